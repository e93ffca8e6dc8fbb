"""experiments.spark_report's tables, from real (tiny) runs: per category, overall with CIs, paired tests."""

from __future__ import annotations

from types import MappingProxyType

from experiments.evaluate import evaluate
from experiments.spark_report import (
    PhaseResult,
    category_table,
    comparison_table,
    fallback_counts,
    overall_table,
)
from experiments.suites.suite import Suite
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


def _phase(name: str, *rank) -> PhaseResult:
    suite = _suite()
    pipeline = Pipeline((BM25Retriever(), *rank))
    output = pipeline.run(suite.memories, suite.queries, progress=False)
    return PhaseResult(
        name,
        tuple(s.name for s in pipeline.stages),
        evaluate(suite, output, ["P@5", "nDCG@5", "R@5"]),
        output,
    )


def test_the_report_tables_show_each_phase_overall_and_per_category():
    base, gated = _phase("base"), _phase("gated", ActionabilityGate(min_results=0))
    noise = [p.evaluation.metrics["overall"]["noise@5"] for p in (base, gated)]
    assert noise[0] > noise[1] == 0.0
    per_category = category_table([base, gated])
    assert per_category.count("| base |") == 4 and per_category.count("| gated |") == 4  # all + 3 categories
    assert "| gated | debugging | 1 |" in per_category
    overall = overall_table([base, gated])
    assert overall.splitlines()[0].startswith("| phase | P@5 [95% CI] | noise@5 [95% CI]")
    tests = comparison_table([(gated, base)])
    row = next(line for line in tests.splitlines() if line.startswith("| noise@5 |"))
    assert "gated vs base" in row and "| -" in row  # the gate removed noise: a negative delta
    assert fallback_counts(gated) == {"actionability": 0}
