"""Metrics from a run given as scores (`per_query_from_scores`: what a TREC run file and pytrec_eval hold),
ranked as trec_eval ranks it in one vectorised pass: exactly the table of the per-query path (trec_run's
`trec_eval_order`, then `per_query`) on 20,000 queries x 100 documents full of ties, and equal to
pytrec_eval itself (through ir_measures) on a run whose ties only trec_eval's docid rule orders."""

from __future__ import annotations

import ir_measures
import numpy as np
import pytest

from experiments.evaluate.metrics import per_query, per_query_from_scores
from retrieval.retrievers.trec_run import _Line, trec_eval_order

METRICS = ["P@5", "P@10", "R@10", "nDCG@10", "nDCG", "RR", "AP", "hit@5", "R_all@10", "Rprec", "P(rel=2)@5"]


def tied_run(n_queries: int, depth: int, seed: int):
    """Graded qrels (-1..2) over a 400-document pool; scores drawn from 25 values, so most lists tie
    several times, some scores equal only as float32 (x and x + 1e-12), some 0.0 against -0.0 and
    infinities of both signs; a few queries absent from the run or with an empty score dict; one run query
    not judged."""
    rng = np.random.default_rng(seed)
    qrels, scores = {}, {}
    for i in range(n_queries):
        query = f"q{i}"
        judged = rng.choice(400, size=int(rng.integers(0, 20)), replace=False)
        qrels[query] = {f"d{j}": int(rng.integers(-1, 3)) for j in judged}
        if rng.random() < 0.02:
            continue
        size = int(rng.integers(0, depth + 1)) if rng.random() < 0.05 else depth
        docs = rng.choice(400, size=size, replace=False)
        values = rng.integers(-12, 13, size=len(docs)) / 7.0
        values[rng.random(len(docs)) < 0.05] += 1e-12  # distinct as float64, tied as float32
        values[rng.random(len(docs)) < 0.01] = -0.0
        values[rng.random(len(docs)) < 0.01] = np.inf
        values[rng.random(len(docs)) < 0.01] = -np.inf  # its +inf sort key meets the padding's
        scores[query] = {f"d{d}": float(v) for d, v in zip(docs, values, strict=True)}
    scores["not judged"] = {"d1": 1.0}
    return qrels, scores


def ranked_one_by_one(scores):
    """The per-query path: each query's documents through trec_run's own trec_eval_order."""
    return {
        q: [ln.doc_id for ln in trec_eval_order([_Line(0, q, d, s) for d, s in docs.items()])]
        for q, docs in scores.items()
    }


@pytest.mark.parametrize("empty", ["apart", "zero"])
def test_scores_give_exactly_the_table_of_the_one_by_one_ranking_on_20000_queries_with_ties(empty):
    qrels, scores = tied_run(20_000, 100, seed=36)
    metrics = [*METRICS, "harm@5"]
    new = per_query_from_scores(qrels, scores, metrics, empty=empty)
    old = per_query(qrels, ranked_one_by_one(scores), metrics, empty=empty)
    assert len(new) > 15_000 and new["RR"].nunique() > 5  # not a degenerate run
    assert new.equals(old)  # the same rows, columns and float64 values, NaNs in the same cells


def test_scores_equal_pytrec_eval_where_the_docid_rule_decides_the_order():
    qrels, scores = tied_run(500, 30, seed=7)
    qrels = {q: {d: max(g, 0) for d, g in judged.items()} for q, judged in qrels.items()}  # pytrec_eval: >= 0
    agreeing = {"P@5": "P@5", "R@10": "R@10", "nDCG@10": "nDCG@10", "nDCG": "nDCG", "RR": "RR", "AP": "AP",
                "Rprec": "Rprec", "P(rel=2)@5": "P(rel=2)@5"}  # fmt: skip
    finite = {q: {d: (s if np.isfinite(s) else 10.0) for d, s in docs.items()} for q, docs in scores.items()}
    ours = per_query_from_scores(qrels, finite, list(agreeing), empty="zero")
    parsed = {ir_measures.parse_measure(name): name for name in agreeing.values()}
    theirs = {(m.query_id, parsed[m.measure]): m.value for m in ir_measures.iter_calc(parsed, qrels, finite)}
    for name, their_name in agreeing.items():
        expected = [theirs.get((q, their_name), 0.0) for q in ours.index]  # pytrec_eval omits missing queries
        np.testing.assert_allclose(ours[name].to_numpy(), expected, rtol=0, atol=1e-9, err_msg=name)
    # the ties matter: ranking them by docid ascending instead changes the numbers
    flipped = {q: sorted(docs, key=lambda d: (-np.float32(docs[d]), d)) for q, docs in finite.items()}
    assert not per_query(qrels, flipped, list(agreeing), empty="zero").equals(ours)


def test_a_nan_score_is_refused_naming_the_query():
    with pytest.raises(ValueError, match="'q'.*NaN"):
        per_query_from_scores({"q": {"a": 1}}, {"q": {"a": float("nan")}}, ["RR"])


def test_queries_without_scores_score_zero_and_the_width_is_the_longest_list():
    qrels = {"a": {"x": 1}, "b": {"y": 1}, "c": {"z": 1}}
    frame = per_query_from_scores(qrels, {"a": {"w": 2.0, "x": 2.0}, "b": {}}, ["RR", "P@1"])
    # a tie at 2.0: docid descending puts "x" first
    assert frame["RR"].to_dict() == {"a": 1.0, "b": 0.0, "c": 0.0}
    assert per_query_from_scores(qrels, {}, ["RR"]).equals(per_query(qrels, {}, ["RR"]))  # nothing scored


def test_distinct_scores_take_the_sort_without_ids_and_give_the_same_table():
    qrels, tied = tied_run(2_000, 50, seed=3)
    rng = np.random.default_rng(4)
    scores = {
        q: {d: float(v) for d, v in zip(docs, rng.permutation(len(docs)), strict=True)}
        for q, docs in tied.items()
    }
    assert per_query_from_scores(qrels, scores, METRICS).equals(
        per_query(qrels, ranked_one_by_one(scores), METRICS)
    )
