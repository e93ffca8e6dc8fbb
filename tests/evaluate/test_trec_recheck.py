"""trec_eval's re-check works on every run folder memeval writes: pytrec_eval (the trec_eval C code) reads
its qrels.tsv and run.trec, with must-not judgements and with scores that tie at float32, and agrees with
memeval. pytrec_eval runs in a subprocess: a segfault (its answer to a negative grade) fails the test
instead of killing pytest."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from experiments.evaluate.metrics import per_query
from experiments.run_folder.trec import MUST_NOT_QRELS, read_run, write_qrels, write_run
from retrieval.pipeline import Pipeline
from retrieval.retrievers.bm25 import BM25Retriever
from retrieval.types import RankedList
from tests.evaluate.test_must_not import must_not_suite

RECHECK = """
import json, sys, pytrec_eval
with open(sys.argv[1]) as q, open(sys.argv[2]) as r:
    qrels, run = pytrec_eval.parse_qrel(q), pytrec_eval.parse_run(r)
# Every measure trec_eval has, as a re-check would ask: some of them crash on a negative grade.
print(json.dumps(pytrec_eval.RelevanceEvaluator(qrels, pytrec_eval.supported_measures).evaluate(run)))
"""
MEASURES = {"P@5": "P_5", "R@5": "recall_5", "nDCG@10": "ndcg_cut_10", "RR": "recip_rank", "AP": "map"}


def pytrec_eval(folder: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", RECHECK, str(folder / "qrels.tsv"), str(folder / "run.trec")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"pytrec_eval exited {done.returncode} (-11: segfault): {done.stderr[-500:]}"
    return json.loads(done.stdout)


def test_a_run_folder_with_must_not_judgements_is_rechecked_by_pytrec_eval(tmp_path):
    suite = must_not_suite()  # grades -1 and -2; "forgotten" has only a must-not memory
    output = Pipeline((BM25Retriever(top_n=10),), depth=10).run(suite.memories, suite.queries, progress=False)
    # BM25's rankings, and "forgotten" returning its must-not memory (what crashed pytrec_eval).
    ranked = [r for r in output.ranked if r.query_id != "forgotten"]
    ranked.append(RankedList("forgotten", ("old0", "note0"), np.array([2.0, 1.0]), {}, {}))
    write_run(ranked, tmp_path / "run.trec")
    write_qrels(suite.qrels, tmp_path)
    theirs = pytrec_eval(tmp_path)
    run = {r.query_id: list(r.memory_ids) for r in ranked}
    ours = per_query(suite.qrels, run, [*MEASURES, "harm@5"])
    answerable = ours["P@5"].dropna().index
    for name, measure in MEASURES.items():
        np.testing.assert_allclose(
            [theirs[q][measure] for q in answerable], ours.loc[answerable, name], rtol=0, atol=1e-12
        )
    # The must-not judgements are kept beside it, as graded: harm@5 is computable from the two files.
    must_not = [line.split() for line in (tmp_path / MUST_NOT_QRELS).read_text().splitlines()]
    assert {(q, d, int(g)) for q, _, d, g in must_not} == {
        (q, d, g) for q, judged in suite.qrels.items() for d, g in judged.items() if g < 0
    }
    assert all(int(line.split()[3]) >= 0 for line in (tmp_path / "qrels.tsv").read_text().splitlines())
    bad = {(q, d) for q, _, d, _ in must_not}
    harm = {
        q: sum((q, d) in bad for d in read_run(tmp_path / "run.trec").get(q, [])[:5]) / 5
        for q, *_ in must_not
    }
    assert harm == pytest.approx(ours["harm@5"].dropna().to_dict())


def test_scores_that_tie_at_float32_are_written_so_the_recheck_sees_memevals_order(tmp_path):
    # Distinct in float64, equal in float32: trec_eval would break the tie by docno ("b" before "a").
    ranked = [RankedList("q", ("a", "b"), np.array([1.0, 1.0 - 1e-9]), {}, {})]
    write_run(ranked, tmp_path / "run.trec")
    write_qrels({"q": {"a": 1, "b": 0}}, tmp_path)
    assert pytrec_eval(tmp_path)["q"]["recip_rank"] == 1.0  # as memeval ranked it
    assert read_run(tmp_path / "run.trec")["q"] == ["a", "b"]


def test_a_run_file_is_ranked_as_trec_eval_ranks_it(tmp_path):
    # A run file from elsewhere whose scores differ below float32 resolution: trec_eval ties them and
    # breaks the tie by document id descending, so memeval reads it the same way (RR 0.5, not 1.0).
    (tmp_path / "run.trec").write_text("q Q0 a 1 1.0000000001 sys\nq Q0 b 2 1.0 sys\n")
    write_qrels({"q": {"a": 1, "b": 0}}, tmp_path)
    assert pytrec_eval(tmp_path)["q"]["recip_rank"] == 0.5
    assert read_run(tmp_path / "run.trec")["q"] == ["b", "a"]
    assert per_query({"q": {"a": 1, "b": 0}}, read_run(tmp_path / "run.trec"), ["RR"])["RR"]["q"] == 0.5
