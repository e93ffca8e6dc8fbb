"""The spark25 phases section's tables (experiments/study/questions/spark.py), from real (tiny) runs:
paired tests with Holm within a metric, the leave-one-out reading, gate fallbacks."""

from __future__ import annotations

from types import MappingProxyType

import pandas as pd

from experiments.evaluate.table import evaluate
from experiments.study.questions.spark import _ablation, fallback_counts, paired_table
from experiments.suites.suite import Suite
from experiments.track.finished_runs import RunRecord
from retrieval.pipeline import Pipeline
from retrieval.retrievers.bm25 import BM25Retriever
from retrieval.stages.actionability import ActionabilityGate
from tests.support import memory, query

TEXTS = [
    "When a test fails, read the traceback from the bottom up",
    "RT @dev: read the traceback from the bottom (eng: 5 likes)",
    "Before a commit, run the tests and the linter",
    "RT @ops: run the tests before every commit (eng: 9 likes)",
    "Lead a post with the result, not a teaser",
    "unrelated gardening note about tomatoes and basil",
]


def _suite() -> Suite:
    mems = tuple(memory(f"m{i}", t, "p") for i, t in enumerate(TEXTS))
    noise = (r"^RT @",)
    queries = tuple(
        query(qid, text, "p", labels=MappingProxyType({"category": cat}), noise_patterns=noise)
        for qid, text, cat in [
            ("q0", "test fails traceback", "debugging"),
            ("q1", "run tests before commit", "code"),
            ("q2", "post result teaser", "social"),
        ]
    )
    qrels = {"q0": {"m0": 2, "m1": 0}, "q1": {"m2": 1}, "q2": {"m4": 1}}
    return Suite(name="tiny-advice", memories=mems, queries=queries, qrels=qrels, k=5)


def _phase(name: str, *rank) -> tuple[RunRecord, object]:
    suite = _suite()
    output = Pipeline((BM25Retriever(), *rank), depth=100).run(suite.memories, suite.queries, progress=False)
    evaluation = evaluate(suite, output, ["P@5", "nDCG@5", "R@5"])
    record = RunRecord(name, {}, evaluation.metrics, evaluation.per_query)
    return record, output


def test_paired_table_tests_each_pair_and_the_gate_removes_noise():
    (base, _), (gated, output) = _phase("base"), _phase("gated", ActionabilityGate(min_results=0))
    assert base.summary["overall"]["noise@5"] > gated.summary["overall"]["noise@5"] == 0.0
    runs = {"base": base, "gated": gated}
    table = paired_table(runs, [("gated", "base")], ["P@5", "noise@5"], seed=0)
    assert list(table["metric"]) == ["P@5", "noise@5"] and set(table["comparison"]) == {"gated vs base"}
    noise = table[table["metric"] == "noise@5"].iloc[0]
    assert noise["_delta"] < 0 and noise["Δ mean [95% CI]"].startswith("-")  # the gate removed noise
    assert fallback_counts(output.ranked) == {"actionability": 0}


def test_leave_one_out_names_each_switched_off_stage():
    (full, _), (ablated, _) = (
        _phase("full", ActionabilityGate(min_results=0)),
        _phase("full-no_actionability"),
    )
    blocks = _ablation({"full": full, "full-no_actionability": ablated}, "full", seed=0, alpha=0.05)
    table = next(b.frame for b in blocks if hasattr(b, "frame"))
    assert list(table.index) == ["actionability"] and isinstance(table, pd.DataFrame)
    assert any("`actionability`: P@5" in getattr(b, "text", "") for b in blocks)
