"""Specification of experiments.evaluate.metrics: textbook kernels, names, the per-query table, and agreement
with ir_measures / pytrec_eval (trec_eval's conventions) on a random graded run."""

import copy
from types import MappingProxyType

import ir_measures
import numpy as np
import pytest

from experiments.evaluate.metrics import (
    Metric,
    abstentions,
    answerable,
    mean,
    metric_name_for_mlflow,
    missing_from_run,
    parse_metric,
    per_query,
)
from experiments.evaluate.metrics.average_precision import average_precision
from experiments.evaluate.metrics.hit import hit
from experiments.evaluate.metrics.ndcg import ndcg
from experiments.evaluate.metrics.precision import precision
from experiments.evaluate.metrics.recall import recall
from experiments.evaluate.metrics.recall_all import recall_all
from experiments.evaluate.metrics.reciprocal_rank import reciprocal_rank

NONE = np.zeros(0)


def g(*grades: float) -> np.ndarray:
    return np.array(grades, dtype=float)


# --- kernels: textbook examples -------------------------------------------------------------------


def test_precision_counts_hits_in_top_k_over_k():
    assert precision(g(1, 0, 2, 0, 0, 1), 3, NONE, 5) == pytest.approx(2 / 5)


def test_precision_divides_by_k_even_when_fewer_documents_were_returned():
    assert precision(g(1, 1), 2, NONE, 10) == pytest.approx(2 / 10)


def test_recall_divides_by_all_relevant_in_the_qrels():
    assert recall(g(1, 0, 1, 1), 4, NONE, 3) == pytest.approx(2 / 4)


def test_ndcg_matches_the_wikipedia_example():
    # en.wikipedia.org/wiki/Discounted_cumulative_gain: DCG6 = 6.861, IDCG6 = 8.740, nDCG6 = 0.785
    gains, ideal = g(3, 2, 3, 0, 1, 2), g(3, 3, 3, 2, 2, 2, 1)
    assert ndcg(gains, 7, ideal, 6) == pytest.approx(6.861 / 8.740, abs=1e-3)


def test_ndcg_ideal_comes_from_the_qrels_not_from_what_was_retrieved():
    # One of three relevant documents found, at rank 1: perfect order of what was found, still < 1.
    expected = 1 / (1 + 1 / np.log2(3) + 1 / np.log2(4))
    assert ndcg(g(1), 3, g(1, 1, 1), 10) == pytest.approx(expected)


def test_ndcg_uses_linear_gains():
    # grade 2 at rank 2 behind a grade-1 document; ideal is (2, 1). Linear: (1 + 2/log2 3) / (2 + 1/log2 3)
    expected = (1 + 2 / np.log2(3)) / (2 + 1 / np.log2(3))
    assert ndcg(g(1, 2), 2, g(2, 1), 2) == pytest.approx(expected)


def test_reciprocal_rank_is_one_over_the_first_relevant_rank():
    assert reciprocal_rank(g(0, 0, 1, 0, 2), 2, NONE, None) == pytest.approx(1 / 3)
    assert reciprocal_rank(g(0, 0, 1), 1, NONE, 2) == 0.0
    assert reciprocal_rank(g(0, 0), 1, NONE, None) == 0.0
    assert reciprocal_rank(NONE, 1, NONE, None) == 0.0


def test_average_precision_divides_by_relevant_in_the_qrels():
    # hits at ranks 1 and 3, three relevant in the qrels: (1/1 + 2/3) / 3
    assert average_precision(g(1, 0, 1, 0), 3, NONE, None) == pytest.approx((1 + 2 / 3) / 3)
    assert average_precision(g(1, 0, 1, 0), 3, NONE, 2) == pytest.approx(1 / 3)
    assert average_precision(NONE, 3, NONE, None) == 0.0


def test_hit_is_one_when_any_relevant_is_in_top_k():
    assert hit(g(0, 0, 1), 1, NONE, 2) == 0.0
    assert hit(g(0, 0, 1), 1, NONE, 3) == 1.0


def test_recall_all_is_one_only_when_every_relevant_is_in_top_k():
    assert recall_all(g(1, 0, 2), 2, NONE, 2) == 0.0
    assert recall_all(g(1, 0, 2), 2, NONE, 3) == 1.0
    assert recall_all(g(1, 0, 2), 3, NONE, 3) == 0.0


@pytest.mark.parametrize(
    "kernel", [precision, recall, ndcg, reciprocal_rank, average_precision, hit, recall_all]
)
def test_a_zero_padded_batch_scores_each_row_as_alone(kernel):
    rows = [g(0, 1, 2, 0), g(2), NONE, g(0, 0, 1)]
    ideals = [g(2, 1, 1), g(2, 1), g(1), g(1)]
    n_relevant = np.array([3, 2, 1, 1])
    batch, ideal = np.zeros((4, 4)), np.zeros((4, 3))
    for i, (row, best) in enumerate(zip(rows, ideals, strict=True)):
        batch[i, : len(row)], ideal[i, : len(best)] = row, best
    for k in (1, 3, 10):
        alone = [kernel(row, n, best, k) for row, n, best in zip(rows, n_relevant, ideals, strict=True)]
        np.testing.assert_allclose(kernel(batch, n_relevant, ideal, k), alone)


# --- names ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, family, k",
    [
        ("P@5", "P", 5),
        ("R@10", "R", 10),
        ("nDCG@10", "nDCG", 10),
        ("nDCG", "nDCG", None),
        ("RR", "RR", None),
        ("RR@10", "RR", 10),
        ("AP", "AP", None),
        ("AP@100", "AP", 100),
        ("hit@5", "hit", 5),
        ("R_all@10", "R_all", 10),
    ],
)
def test_metric_names_parse_into_family_and_cutoff(name, family, k):
    assert parse_metric(name) == Metric(name, family, k)


@pytest.mark.parametrize(
    "name", ["P", "R_all", "hit", "P@0", "P@05", "P@-1", "ndcg@10", "MAP", "P@5 ", "", "R@"]
)
def test_unknown_metric_names_raise_listing_the_known_ones(name):
    with pytest.raises(ValueError, match=r"known: .*nDCG@k.*R_all@k"):
        parse_metric(name)


def test_mlflow_names_replace_at_and_are_accepted_by_mlflow():
    from mlflow.exceptions import MlflowException
    from mlflow.utils.validation import _validate_metric_name

    assert metric_name_for_mlflow("R@10") == "R_at_10"
    assert metric_name_for_mlflow("R_all@10") == "R_all_at_10"
    assert metric_name_for_mlflow("RR") == "RR"
    _validate_metric_name(metric_name_for_mlflow("nDCG@10"))
    with pytest.raises(MlflowException):
        _validate_metric_name("nDCG@10")


# --- the per-query table --------------------------------------------------------------------------

QRELS = {
    "found": {"a": 2, "b": 1, "c": 0},
    "absent": {"a": 1},
    "empty": {"b": 1},
    "abstain": {"a": 0, "b": 0},
    "abstain_unjudged": {},
}
RUN = {"found": ["x", "a", "c", "b"], "empty": [], "abstain": ["a"], "not_in_qrels": ["a"]}
ALL = ["P@5", "R@10", "nDCG@10", "nDCG", "RR", "RR@10", "AP", "AP@10", "hit@5", "R_all@10"]


def test_rows_are_answerable_queries_and_columns_the_metrics_in_order():
    frame = per_query(QRELS, RUN, ["RR", "P@5"])
    assert frame.index.name == "query_id"
    assert list(frame.index) == ["found", "absent", "empty"]
    assert list(frame.columns) == ["RR", "P@5"]
    assert all(dtype == np.float64 for dtype in frame.dtypes)
    assert frame.loc["found", "RR"] == pytest.approx(1 / 2)
    assert frame.loc["found", "P@5"] == pytest.approx(2 / 5)


def test_queries_missing_from_the_run_or_with_no_documents_score_zero_and_count_in_the_mean():
    frame = per_query(QRELS, RUN, ALL)
    assert (frame.loc[["absent", "empty"]] == 0).all().all()
    assert (frame.loc["found"] > 0).all()
    assert missing_from_run(QRELS, RUN) == ["absent", "empty"]
    assert mean(frame) == pytest.approx({m: frame.loc["found", m] / 3 for m in ALL})


def test_abstention_queries_are_not_rows_and_are_listed_apart():
    assert abstentions(QRELS) == ["abstain", "abstain_unjudged"]
    assert answerable(QRELS) == ["found", "absent", "empty"]
    assert not set(abstentions(QRELS)) & set(per_query(QRELS, RUN, ALL).index)


def test_unjudged_and_negative_grades_are_not_relevant():
    frame = per_query({"q": {"a": 1, "spam": -2}}, {"q": ["spam", "unjudged", "a"]}, ["RR", "nDCG@3"])
    assert frame.loc["q", "RR"] == pytest.approx(1 / 3)
    assert frame.loc["q", "nDCG@3"] == pytest.approx(1 / np.log2(4))


def test_inputs_are_not_mutated_and_read_only_inputs_work():
    qrels, run = copy.deepcopy(QRELS), copy.deepcopy(RUN)
    metrics = list(ALL)
    per_query(qrels, run, metrics)
    assert (qrels, run, metrics) == (QRELS, RUN, ALL)
    frozen_qrels = MappingProxyType({q: MappingProxyType(j) for q, j in QRELS.items()})
    frozen_run = MappingProxyType({q: tuple(docs) for q, docs in RUN.items()})
    assert per_query(frozen_qrels, frozen_run, tuple(ALL)).equals(per_query(QRELS, RUN, ALL))


def test_a_run_repeating_a_document_or_given_as_a_string_is_rejected():
    with pytest.raises(ValueError, match="'found'"):
        per_query(QRELS, {"found": ["a", "b", "a"]}, ["P@5"])
    with pytest.raises(ValueError, match="'found'"):
        per_query(QRELS, {"found": "abc"}, ["P@5"])


def test_repeated_or_unknown_metric_names_fail_before_any_work():
    with pytest.raises(ValueError, match="repeat"):
        per_query(QRELS, RUN, ["P@5", "P@5"])
    with pytest.raises(ValueError, match="known"):
        per_query(QRELS, RUN, ["P@5", "MRR"])


# --- agreement with ir_measures / pytrec_eval ------------------------------------------------------

AGREEING = {  # ours -> ir_measures (pytrec_eval, except RR@10: ir_measures' msmarco provider)
    "P@5": "P@5",
    "P@10": "P@10",
    "R@10": "R@10",
    "nDCG@10": "nDCG@10",
    "nDCG@5": "nDCG@5",
    "nDCG": "nDCG",
    "RR": "RR",
    "RR@10": "RR@10",
    "AP": "AP",
    "AP@10": "AP@10",
    "hit@5": "Success@5",
    "hit@10": "Success@10",
}


def random_judged_run(rng: np.random.Generator, n_queries: int = 300):
    """Graded qrels (0-2) over a pool of 25 documents per query, a ranked run that mixes judged and
    unjudged documents; some queries absent from the run, some with nothing retrieved."""
    qrels, ranked, scored = {}, {}, {}
    for i in range(n_queries):
        query, pool = f"q{i:03d}", [f"d{j}" for j in range(25)]
        judged = rng.choice(25, size=rng.integers(0, 12), replace=False)
        qrels[query] = {pool[j]: int(rng.integers(0, 3)) for j in judged}
        if rng.random() < 0.07:
            continue  # missing from the run
        docs = [pool[j] for j in rng.permutation(25)[: rng.integers(0, 25)]]
        ranked[query] = docs
        # strictly decreasing scores: trec_eval re-sorts by score (ties by docid), so no ties allowed
        scored[query] = {doc: float(len(docs) - rank) for rank, doc in enumerate(docs)}
    ranked["not_judged"], scored["not_judged"] = ["d1"], {"d1": 1.0}
    return qrels, ranked, scored


def test_metrics_equal_ir_measures_for_every_query_including_ones_missing_from_the_run():
    qrels, ranked, scored = random_judged_run(np.random.default_rng(20240611))
    ours = per_query(qrels, ranked, list(AGREEING) + ["R_all@10"])
    measures = {ir_measures.parse_measure(name): name for name in AGREEING.values()}
    results = ir_measures.iter_calc(measures, qrels, scored)
    theirs = {(m.query_id, measures[m.measure]): m.value for m in results}

    missing = missing_from_run(qrels, ranked)
    assert len(ours) > 250 and len(missing) > 10  # the comparison covers both kinds of query
    for ours_name, their_name in AGREEING.items():
        column = ours[ours_name]
        assert 0 < column.mean() < 1 and column.nunique() >= 2, ours_name  # not a degenerate run
        expected = [theirs.get((query, their_name), 0.0) for query in ours.index]  # pytrec_eval omits missing
        np.testing.assert_allclose(column.to_numpy(), expected, rtol=0, atol=1e-9, err_msg=ours_name)
        assert (column[missing] == 0).all()
    # R_all@k has no trec_eval measure, but it is exactly "R@k reached 1"
    assert ((ours["R_all@10"] == 1) == np.isclose(ours["R@10"], 1)).all()
    assert 0 < ours["R_all@10"].mean() < 1
