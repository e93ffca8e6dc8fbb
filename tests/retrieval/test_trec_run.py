"""Score any system's output: a TREC run file as a retrieval channel, checked against ir_measures."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import ir_measures
import pytest

from experiments.configure.build import build_pipeline
from experiments.configure.compose import compose_config
from experiments.configure.settings import RunSettings
from experiments.run.app import run_experiment
from experiments.run.resume import config_hash
from experiments.suites.jsonl import save_suite
from retrieval.pipeline import Pipeline, PipelineConfigError
from retrieval.retrievers.trec_run import TrecRunRetriever
from tests.support import REPO, tiny_suite

SPARK25 = REPO / "datasets" / "spark25"


def write_overlap_run(path: Path) -> None:
    """An independent 'system' in plain Python: score = shared lowercase words, top 30, many ties."""
    memories = [json.loads(line) for line in (SPARK25 / "memories.jsonl").read_text().splitlines() if line]
    queries = [json.loads(line) for line in (SPARK25 / "queries.jsonl").read_text().splitlines() if line]
    words = lambda text: set(re.findall(r"[a-z0-9]+", text.lower()))  # noqa: E731
    with open(path, "w") as fh:
        for q in queries:
            scored = sorted(
                ((len(words(q["text"]) & words(m["text"])), m["id"]) for m in memories), reverse=True
            )
            for rank, (score, mid) in enumerate(scored[:30], 1):
                fh.write(f"{q['id']} Q0 {mid} {rank} {score} overlap\n")


def run_config(tmp_path: Path, *overrides: str):
    return compose_config(["suite=spark25", "tracking=none", "cache_dir=null", "progress=false", *overrides])


def test_a_trec_run_scored_through_the_channel_agrees_with_ir_measures(tmp_path):
    run_file = tmp_path / "overlap.trec"
    write_overlap_run(run_file)
    cfg = run_config(tmp_path, "variant=trec_run", f"stage.trec_run.path={run_file}")
    metrics = run_experiment(cfg, tmp_path / "run")["overall"]
    qrels = list(ir_measures.read_trec_qrels(str(SPARK25 / "qrels.tsv")))
    # The harness averages relevance metrics over answerable queries (a positive judgement); a query
    # judged all-irrelevant is an abstention query, reported apart. ir_measures would average it in as 0.
    answerable = {q.query_id for q in qrels if q.relevance > 0}
    qrels = [q for q in qrels if q.query_id in answerable]
    theirs = ir_measures.calc_aggregate(
        [ir_measures.nDCG @ 10, ir_measures.P @ 5], qrels, list(ir_measures.read_trec_run(str(run_file)))
    )
    assert metrics["nDCG@10"] == pytest.approx(theirs[ir_measures.nDCG @ 10], abs=1e-9)
    assert metrics["P@5"] == pytest.approx(theirs[ir_measures.P @ 5], abs=1e-9)
    assert 0 < metrics["nDCG@10"] < 1


def test_the_file_hash_is_in_the_config_and_the_fingerprint(tmp_path):
    run_file = tmp_path / "a.trec"
    run_file.write_text("code-01 Q0 ins-0001 1 2.0 x\n")
    first = run_config(tmp_path, "variant=trec_run", f"stage.trec_run.path={run_file}")
    stage, first_hash = build_pipeline(first).stages[0], config_hash(RunSettings.from_config(first).config)
    run_file.write_text("code-01 Q0 ins-0002 1 2.0 x\n")
    second = run_config(tmp_path, "variant=trec_run", f"stage.trec_run.path={run_file}")
    second_hash = config_hash(RunSettings.from_config(second).config)
    assert first_hash != second_hash  # resume never reuses a run of the old file
    assert stage.fingerprint() != build_pipeline(second).stages[0].fingerprint()  # nor any cache
    with pytest.raises(PipelineConfigError, match="changed since"):  # built after the file changed
        stage.build(_corpus())


def _corpus():
    from retrieval.types import Corpus

    return Corpus(tuple(tiny_suite().memories))


def _run_on_tiny(tmp_path: Path, lines: list[str]) -> None:
    path = tmp_path / "bad.trec"
    path.write_text("".join(f"{line}\n" for line in lines))
    suite = tiny_suite()
    Pipeline((TrecRunRetriever(path=str(path)),), depth=100).run(
        suite.memories, suite.queries, progress=False
    )


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (
            ["c1:q0 Q0 c1:0 1 1.0 x", "c1:q0 Q0 nope 2 0.5 x"],
            r"bad.trec:2: document nope is not in the suite",
        ),
        (["c1:q0 Q0 c1:0 1 1.0 x", "zz Q0 c1:1 1 1.0 x"], r"bad.trec:2: query zz is not in the suite"),
        (["c1:q0 Q0 c1:0 1 1.0"], r"bad.trec:1: a TREC run line has 6 fields"),
        (["c1:q0 Q0 c1:0 1 high x"], r"bad.trec:1: rank must be an integer and score a number"),
        (["c1:q0 Q0 c1:0 1 nan x"], r"bad.trec:1: score nan is not finite"),
        (["c1:q0 Q0 c1:0 1 1 x", "c1:q0 Q0 c1:0 2 0.5 x"], r"bad.trec:2: document c1:0 listed twice"),
        (["c1:q0 Q0 c2:0 1 1 x"], r"bad.trec:1: document c2:0 is in scope .* but query c1:q0 is in scope"),
        (["c1:q0 Q0 c1:0 1 1 x", "c1:q0 Q0 c2:1 2 0.5 x"], r"bad.trec:2: query c1:q0 lists documents of two"),
    ],
)
def test_bad_run_files_are_errors_naming_file_and_line(tmp_path, lines, message):
    with pytest.raises(PipelineConfigError, match=message):
        _run_on_tiny(tmp_path, lines)


def test_ties_are_ranked_as_trec_eval_ranks_them_and_unlisted_queries_get_nothing(tmp_path):
    path = tmp_path / "ties.trec"
    path.write_text("c1:q0 Q0 c1:1 1 1.0 x\nc1:q0 Q0 c1:3 2 1.0 x\nc1:q0 Q0 c1:0 3 2.0 x\n")
    suite = tiny_suite()
    out = Pipeline((TrecRunRetriever(path=str(path)),), depth=100).run(
        suite.memories, suite.queries, progress=False
    )
    ranked = {r.query_id: r for r in out.ranked}
    assert ranked["c1:q0"].memory_ids == ("c1:0", "c1:3", "c1:1")  # score, then doc id descending
    assert list(ranked["c1:q0"].columns["trec_run"]) == [2.0, 1.0, 1.0]
    assert ranked["c2:q0"].memory_ids == ()


def test_a_trec_run_fused_with_bm25_runs(tmp_path):
    suite_dir = save_suite(tiny_suite(), tmp_path / "tiny")
    run_file = tmp_path / "sys.trec"
    run_file.write_text("c1:q0 Q0 c1:0 1 3.0 sys\nc1:q1 Q0 c1:4 1 3.0 sys\nc2:q0 Q0 c2:2 1 3.0 sys\n")
    cfg = compose_config(
        [
            "suite=jsonl",
            f"suite.path={suite_dir}",
            "variant=trec_run_bm25",
            f"stage.trec_run.path={run_file}",
            "tracking=none",
            "cache_dir=null",
            "progress=false",
        ]
    )
    assert [s.name for s in build_pipeline(cfg).stages] == ["trec_run", "bm25", "rrf"]
    metrics = run_experiment(cfg, tmp_path / "run")
    assert metrics["scope_leaks"] == 0 and metrics["overall"]["R@10"] > 0
    lines = (tmp_path / "run" / "run.trec").read_text().splitlines()
    assert lines[0].split()[:3] == ["c1:q0", "Q0", "c1:0"]  # first in both channels
    assert any(
        line.split()[2] == "c1:4" for line in lines if line.startswith("c1:q1")
    )  # only the file had it


@pytest.mark.slow
def test_memeval_run_exits_2_naming_the_line_of_an_unknown_document(tmp_path):
    run_file = tmp_path / "bad.trec"
    run_file.write_text("code-01 Q0 ins-0001 1 2.0 x\ncode-01 Q0 no-such-id 2 1.0 x\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.run",
            "suite=spark25",
            "variant=trec_run",
            f"stage.trec_run.path={run_file}",
            "tracking=none",
            "cache_dir=null",
            f"hydra.run.dir={tmp_path / 'out'}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert f"{run_file}:2: document no-such-id is not in the suite" in proc.stderr
    assert not (tmp_path / "out" / "metrics.json").exists()
