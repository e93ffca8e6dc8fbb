"""noise@5: the share of what was shown that matches the query's noise patterns, in every run's metrics."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from experiments.evaluate.metrics.noise import noise_at_k, noise_table
from experiments.evaluate.table import evaluate
from experiments.suites.suite import Suite
from retrieval.pipeline import Pipeline
from retrieval.retrievers.bm25 import BM25Retriever
from tests.support import memory, query

PATTERNS = (r"^RT @\w+", r"\[DEPTH:\s*\d+\]")


def test_noise_is_the_matching_share_of_the_top_k():
    texts = ["RT @a: x", "run tests first", "[DEPTH: 2] log", "check the venv", "pin versions", "RT @b: y"]
    assert noise_at_k(texts, PATTERNS, k=5) == pytest.approx(2 / 5)  # the 6th is past the cut
    assert noise_at_k(texts[:2], PATTERNS, k=5) == pytest.approx(1 / 2)  # divides by what was shown
    assert noise_at_k([], PATTERNS) == 0.0
    assert noise_at_k(texts, ()) == 0.0


def test_noise_patterns_are_searched_not_matched_from_the_start():
    assert noise_at_k(["see [DEPTH: 3] inside"], PATTERNS) == 1.0
    assert noise_at_k(["text RT @a later"], PATTERNS) == 0.0  # the pattern itself anchors with ^


def test_noise_table_is_empty_when_no_query_has_patterns():
    q = query("q", "x")
    assert noise_table([q], {"q": ["m"]}, {"m": "RT @a"}).columns.tolist() == []
    with_patterns = query("r", "x", noise_patterns=PATTERNS)
    table = noise_table([q, with_patterns], {"q": ["m"], "r": ["m"]}, {"m": "RT @a: x"})
    assert table["noise@5"].to_dict() == {"q": 0.0, "r": 1.0}


def _suite(patterns, k=5):
    mems = [memory("m0", "RT @dev: run the tests"), memory("m1", "run the tests before a commit")]
    mems += [memory(f"f{i}", f"unrelated filler {i} about gardening") for i in range(4)]  # BM25 idf > 0
    labels = MappingProxyType({"category": "code"})
    queries = [query("q0", "run the tests", labels=labels, noise_patterns=patterns)]
    return Suite(name="s", memories=tuple(mems), queries=tuple(queries), qrels={"q0": {"m1": 1}}, k=k)


def test_evaluate_reports_noise_overall_and_per_label_when_the_suite_has_patterns():
    suite = _suite(PATTERNS)
    out = Pipeline((BM25Retriever(),), depth=100).run(suite.memories, suite.queries, progress=False)
    ev = evaluate(suite, out, ["P@5"])
    assert ev.per_query.loc["q0", "noise@5"] == pytest.approx(0.5)
    assert ev.metrics["overall"]["noise@5"] == pytest.approx(0.5)
    assert ev.metrics["by_label"]["category"]["code"]["noise@5"] == pytest.approx(0.5)
    assert "noise@5" in ev.metrics["overall_ci95"]


def test_noise_is_measured_at_the_suites_own_cutoff():
    suite = _suite(PATTERNS, k=10)
    out = Pipeline((BM25Retriever(),), depth=100).run(suite.memories, suite.queries, progress=False)
    ev = evaluate(suite, out, ["P@5"])
    assert "noise@10" in ev.metrics["overall"] and "noise@5" not in ev.metrics["overall"]


def test_evaluate_without_patterns_is_unchanged():
    suite = _suite(())
    out = Pipeline((BM25Retriever(),), depth=100).run(suite.memories, suite.queries, progress=False)
    ev = evaluate(suite, out, ["P@5"])
    assert "noise@5" not in ev.per_query.columns and "noise@5" not in ev.metrics["overall"]
