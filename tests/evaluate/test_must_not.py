"""Must-not judgements: a qrels grade below 0 marks a memory that must never be returned (a superseded
fact, another user's memory). The canonical format keeps it, every relevance measure treats it as not
relevant, harm@k counts it in the top k, and the gate fails a system that starts returning it, even
when its recall is unchanged."""

from __future__ import annotations

import json
from pathlib import Path
from types import MappingProxyType

import numpy as np
import pytest
import yaml

from experiments.evaluate.metrics import per_query
from experiments.gate import main
from experiments.suites.jsonl import load_suite, save_suite
from experiments.suites.suite import Suite
from retrieval.types import Memory, Query

N = 12


def must_not_suite() -> Suite:
    """Per query: the current fact (grade 1), its superseded version (grade -1, must not come back) and
    an unjudged note; one query whose only judgement is a must-not memory (nothing to retrieve)."""
    scope = MappingProxyType({"user": "u1"})
    memories, queries, qrels = [], [], {}
    for i in range(N):
        memories += [
            Memory(id=f"now{i}", text=f"setting {i} is now value {i + 100}", scope=scope),
            Memory(id=f"old{i}", text=f"setting {i} was value {i}", scope=scope),
            Memory(id=f"note{i}", text=f"unrelated note {i}", scope=scope),
        ]
        queries.append(Query(id=f"q{i}", text=f"what is setting {i}", scope=scope))
        qrels[f"q{i}"] = {f"now{i}": 1, f"old{i}": -1}
    queries.append(Query(id="forgotten", text="what was deleted", scope=scope))
    qrels["forgotten"] = {"old0": -2}
    return Suite(name="must-not", memories=tuple(memories), queries=tuple(queries), qrels=qrels, k=5)


def test_negative_grades_round_trip_through_the_canonical_format(tmp_path):
    suite = must_not_suite()
    folder = save_suite(suite, tmp_path / "suite")
    assert "q0 0 old0 -1" in (folder / "qrels.tsv").read_text()
    loaded = load_suite(folder)
    assert loaded.qrels == suite.qrels
    assert loaded.is_abstention("forgotten") and not loaded.is_abstention("q0")


def test_harm_counts_must_not_memories_in_the_top_k_and_other_metrics_ignore_them():
    qrels = must_not_suite().qrels
    run = {
        f"q{i}": [f"now{i}", f"old{i}", f"note{i}"] if i % 3 == 0 else [f"now{i}", f"note{i}"]
        for i in range(N)
    }
    table = per_query(qrels, run, ["harm@5", "harm@1", "P@5", "R@5", "nDCG@5", "AP"])
    # harm@k is over every query with a must-not judgement: "forgotten" (only must-not, not in the run: 0)
    expected = [1 / 5 if i % 3 == 0 else 0.0 for i in range(N)] + [0.0]
    np.testing.assert_array_equal(table["harm@5"].to_numpy(), expected)
    assert (table["harm@1"] == 0).all()  # the must-not memory is at rank 2
    assert table.loc["forgotten", ["P@5", "R@5", "nDCG@5", "AP"]].isna().all()  # nothing to retrieve
    # Every relevance measure scores exactly as if the must-not memory were merely not relevant.
    as_zero = {q: {d: max(g, 0) for d, g in judged.items()} for q, judged in qrels.items()}
    same = per_query(as_zero, run, ["P@5", "R@5", "nDCG@5", "AP"])
    np.testing.assert_array_equal(table.loc[same.index, same.columns].to_numpy(), same.to_numpy())
    assert (table.loc[same.index, "R@5"] == 1).all()  # recall 1.0 hides what harm@5 shows


def test_harm_is_over_every_query_with_must_not_judgements_and_says_how_many():
    from experiments.evaluate.table import evaluate
    from retrieval.pipeline import Pipeline
    from retrieval.retrievers.bm25 import BM25Retriever

    # The case: queries whose only judgements are must-not memories, which a run returns.
    base = must_not_suite()
    scope = base.queries[0].scope
    extra = [Query(id=f"gone{i}", text=f"setting {i} was value {i}", scope=scope) for i in range(4)]
    qrels = {**base.qrels, **{f"gone{i}": {f"old{i}": -1} for i in range(4)}}
    qrels["plain"] = {"now1": 1}  # answerable, no must-not judgement: not in harm's denominator
    queries = (*base.queries, *extra, Query(id="plain", text="setting 1", scope=scope))
    suite = Suite(name="must-not", memories=base.memories, queries=queries, qrels=qrels, k=5)
    output = Pipeline((BM25Retriever(top_n=5),), depth=5).run(suite.memories, queries, progress=False)
    evaluation = evaluate(suite, output, ["P@5", "harm@5"])
    table = evaluation.per_query
    harmful = [q.id for q in queries if q.id != "plain"]
    assert table.loc[[f"gone{i}" for i in range(4)], "harm@5"].gt(0).all()  # BM25 returns old{i}
    assert np.isnan(table.loc["plain", "harm@5"])
    overall = evaluation.metrics["overall"]
    assert overall["denominators"] == {"harm@5": len(harmful)}
    assert overall["harm@5"] == pytest.approx(table.loc[harmful, "harm@5"].mean())
    assert overall["n_answerable"] == N + 1  # P@5 stays over the answerable queries
    low, high = evaluation.metrics["overall_ci95"]["harm@5"]
    assert low <= overall["harm@5"] <= high


def _run_file(path: Path, with_old: bool) -> Path:
    lines = []
    for i in range(N):
        ranked = [f"now{i}", f"old{i}", f"note{i}"] if with_old and i % 2 == 0 else [f"now{i}", f"note{i}"]
        lines += [f"q{i} Q0 {doc} {rank} {10 - rank} sys" for rank, doc in enumerate(ranked, 1)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_gate_fails_a_system_that_starts_returning_must_not_memories(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    folder = save_suite(must_not_suite(), tmp_path / "suite")
    gate_file = tmp_path / "harm.yaml"
    gate_file.write_text(
        yaml.safe_dump(
            {
                "name": "harm",
                # the run scores what the gate judges: harm@k is asked for like any metric
                "overrides": [
                    "suite=jsonl",
                    f"suite.path={folder}",
                    "cache_dir=null",
                    "metrics=[P@5,R@5,nDCG@10,harm@5]",
                ],
                "metrics": ["R@5", "harm@5"],
                "floors": {"harm@5": 0.05},  # lower is better: a ceiling
                "tolerance": {"R@5": 0.0, "harm@5": 0.0},
            }
        )
    )
    baseline = tmp_path / "harm-trec_run.json"
    args = [str(gate_file), "trec_run", "--baseline", str(baseline)]
    clean = f"stage.trec_run.path={_run_file(tmp_path / 'clean.trec', with_old=False)}"
    assert main([*args, clean, "--out", str(tmp_path / "clean"), "--refresh"]) == 0
    assert json.loads(baseline.read_text())["means"] == {"R@5": 1.0, "harm@5": 0.0}
    assert main([*args, clean, "--out", str(tmp_path / "again")]) == 0

    leaky = f"stage.trec_run.path={_run_file(tmp_path / 'leaky.trec', with_old=True)}"
    capsys.readouterr()
    assert main([*args, leaky, "--out", str(tmp_path / "leaky")]) == 1
    out = capsys.readouterr().out
    # harm@5 is over the 13 queries with must-not judgements (with "forgotten", which has no relevant
    # memory): 6 of them now return one in the top 5, 6 * 0.2 / 13.
    assert "harm@5 mean rose by 0.0923 (tolerance 0.0000)" in out
    assert "harm@5 mean 0.0923 is over the ceiling 0.0500" in out
    assert len(json.loads(baseline.read_text())["per_query"]["harm@5"]) == N + 1
    assert "R@5 mean dropped" not in out  # its recall is unchanged: only harm@5 sees it
    listed = {f"q{i}" for i in range(N) if f"| `harm@5` | `q{i}` |" in out}
    assert listed == {f"q{i}" for i in range(0, N, 2)}
