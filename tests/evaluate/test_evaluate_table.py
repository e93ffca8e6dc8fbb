"""The per-query table, built as one frame, equals the piece-by-piece joins it replaced: values, dtypes,
column order and index, on suites with abstention queries, missing labels and queries without a ranking."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

import numpy as np
import pandas as pd
import pytest

from experiments.configure.compose import compose_config
from experiments.evaluate import cost
from experiments.evaluate.metrics import per_query as relevance_per_query
from experiments.evaluate.table import evaluate, per_query_table, query_cluster, scope_leaks
from experiments.suites.suite import Suite
from retrieval.pipeline import Pipeline
from retrieval.retrievers.bm25 import BM25Retriever
from retrieval.stages.instruction_boost import InstructionBoost
from retrieval.types import RankedList
from tests.support import query, tiny_suite


def joined_table(suite, output, metrics) -> pd.DataFrame:
    """The table as first written: a frame of the queries, then columns concatenated and joined."""
    run = {r.query_id: list(r.memory_ids) for r in output.ranked}
    rows = pd.DataFrame(
        {
            "query_id": [q.id for q in suite.queries],
            **{
                f"label.{name}": [q.labels.get(name) for q in suite.queries]
                for name in dict.fromkeys(n for q in suite.queries for n in q.labels)
            },
            "abstention": [suite.is_abstention(q.id) for q in suite.queries],
            "cluster": [query_cluster(q) for q in suite.queries],
        }
    ).set_index("query_id")
    by_id = {r.query_id: r for r in output.ranked}
    stages = dict.fromkeys(s for r in output.ranked for s in r.timings_ms)
    ranked = [by_id.get(q) for q in rows.index]
    columns = {
        "n_returned": [len(r.memory_ids) if r else 0 for r in ranked],
        "top_score": [float(r.scores[0]) if r and len(r.scores) else np.nan for r in ranked],
        "latency_ms": [r.latency_ms if r else np.nan for r in ranked],
        **{f"ms.{st}": [r.timings_ms.get(st, 0.0) if r else np.nan for r in ranked] for st in stages},
    }
    rows = pd.concat([rows, pd.DataFrame(columns, index=rows.index)], axis=1)
    rows["scope_leaks"] = scope_leaks(suite, output).reindex(rows.index).fillna(0).astype(int)
    return rows.join(relevance_per_query(suite.qrels, run, metrics))


def suites() -> list[Suite]:
    base = tiny_suite()
    queries = list(base.queries)
    # labels on some queries only, an unanswerable (abstention) query, a query in a scope with no memories
    queries[0] = query(
        queries[0].id, queries[0].text, labels=MappingProxyType({"ability": "recall", "x": "1"})
    )
    queries.append(
        query("nothing-known", "no memory mentions this", labels=MappingProxyType({"ability": "abs"}))
    )
    queries.append(query("elsewhere", "wrong scope", scope="empty-scope"))
    qrels = {**base.qrels, "nothing-known": {}, "elsewhere": {}}
    extra = Suite(name="mixed", memories=base.memories, queries=tuple(queries), qrels=qrels)
    return [base, extra]


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("drop", [False, True])
def test_the_one_frame_table_equals_the_joined_one(which, drop):
    suite = suites()[which]
    pipeline = Pipeline((BM25Retriever(top_n=5), InstructionBoost(weight=0.2)), depth=5)
    output = pipeline.run(suite.memories, suite.queries, progress=False)
    if drop:  # a query the run has no ranked list for, and one whose list is empty
        kept = [r for r in output.ranked if r.query_id != suite.queries[1].id]
        first = kept[0]
        kept[0] = RankedList(first.query_id, (), np.zeros(0), {}, dict(first.timings_ms))
        output = dataclasses.replace(output, ranked=kept)
    metrics = list(compose_config(["tracking=none"]).metrics)  # the run's default metric list
    ours, theirs = per_query_table(suite, output, metrics), joined_table(suite, output, metrics)
    pd.testing.assert_frame_equal(ours, theirs, check_exact=True)
    assert list(ours.dtypes) == list(theirs.dtypes) and ours.index.equals(theirs.index)
    evaluated = evaluate(suite, output, metrics).per_query  # plus what each query returned (cost.py)
    assert evaluated.drop(columns=list(cost.COLUMNS)).equals(theirs)


def test_metrics_json_says_which_statistics_unit_and_counts_empty_queries_on_request():
    suite = tiny_suite()  # conversations c1 (2 answerable) and c2 (1 answerable, 1 abstention)
    output = Pipeline((BM25Retriever(top_n=5),), depth=5).run(suite.memories, suite.queries, progress=False)
    evaluation = evaluate(suite, output, ["R@5", "AP"])
    assert evaluation.per_query["cluster"].tolist() == ["conversation=c1"] * 2 + ["conversation=c2"] * 2
    stats = evaluation.metrics["statistics"]
    assert stats["unit"] == "cluster" and stats["n_clusters"] == 2 and "only 2 clusters" in stats["warning"]
    assert set(stats["design_effect"]) == {"R@5", "AP"}
    by_query = evaluate(suite, output, ["R@5", "AP"], unit="query").metrics["statistics"]
    assert by_query["unit"] == "query" and by_query["warning"] is None
    # trec_eval's convention: the abstention query scores 0 and is averaged in.
    apart = evaluation.metrics["overall"]["AP"]
    zero = evaluate(suite, output, ["R@5", "AP"], empty="zero")
    assert zero.per_query.loc["c2:q1", "AP"] == 0.0
    assert zero.metrics["overall"]["AP"] == pytest.approx(apart * 3 / 4)


def _frame(values: np.ndarray, clusters: list[str]) -> pd.DataFrame:
    """A per-query table as `summarize` reads it: one metric (R@10), every query answerable."""
    n = len(values)
    return pd.DataFrame(
        {"abstention": False, "cluster": clusters, "n_returned": 10, "top_score": 1.0, "latency_ms": 1.0,
         "scope_leaks": 0, "R@10": values},
        index=pd.Index([f"q{i}" for i in range(n)], name="query_id"),
    )  # fmt: skip


def test_overall_ci_by_cluster_is_the_calibrated_cluster_interval():
    from experiments.evaluate.statistics import cluster_mean_ci
    from experiments.evaluate.table import summarize

    rng = np.random.default_rng(2)
    clusters = [f"c{i // 6}" for i in range(48)]
    values = rng.random(8)[np.arange(48) // 6] * 0.5 + rng.random(48) * 0.5
    summary = summarize(_frame(values, clusters), ["R@10"])
    assert summary["overall_ci95"]["R@10"] == list(cluster_mean_ci(values, clusters))
    assert summary["statistics"]["unit"] == "cluster"
    assert summary["statistics"]["unit_reason"].startswith("8 clusters")


def test_a_design_effect_below_1_warns_that_the_cluster_interval_is_narrower():
    from experiments.evaluate.table import summarize

    # Within every conversation the questions vary against each other (one 1, one 0): cluster means are
    # all equal, so the design effect is ~0 and the cluster interval narrower than a query-level one.
    values = np.tile([1.0, 0.0], 10) + np.repeat(np.linspace(0, 0.01, 10), 2)
    clusters = [f"c{i // 2}" for i in range(20)]
    stats = summarize(_frame(values, clusters), ["R@10"])["statistics"]
    assert stats["design_effect"]["R@10"] < 1
    assert "design effect below 1 (R@10" in stats["warning"] and "narrower" in stats["warning"]


def test_one_cluster_says_the_statistics_fell_back_to_queries_and_why():
    from experiments.evaluate.table import summarize

    values = np.random.default_rng(3).random(12)
    with pytest.warns(UserWarning, match="one cluster"):
        stats = summarize(_frame(values, ["conversation=1"] * 12), ["R@10"])["statistics"]
    assert stats["unit"] == "query" and "one cluster" in stats["unit_reason"]
    assert "fall back to the query level" in stats["warning"]
