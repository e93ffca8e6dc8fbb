"""The conventions users switch between (experiments/evaluate/metrics/conventions.py), each against
ir_measures / pytrec_eval (trec_eval's own C code) on a random graded run: a relevance threshold
(`rel=2`, trec_eval -l 2; nDCG keeps the raw grades), exponential nDCG gains, R-precision, and
queries with no relevant document counted as 0 (trec_eval) instead of reported apart."""

import ir_measures
import numpy as np
import pytest
import pytrec_eval

from experiments.evaluate.metrics import metric_name_for_mlflow, parse_metric, per_query

THRESHOLDED = {  # ours -> ir_measures (pytrec_eval provider, relevance_level=2)
    "P(rel=2)@5": "P(rel=2)@5",
    "R(rel=2)@10": "R(rel=2)@10",
    "AP(rel=2)": "AP(rel=2)",
    "RR(rel=2)": "RR(rel=2)",
    "Rprec(rel=2)": "Rprec(rel=2)",
    "Rprec": "Rprec",
    "hit(rel=2)@10": "Success(rel=2)@10",
    "nDCG(rel=2)@10": "nDCG@10",  # trec_eval's nDCG ignores -l: the raw grades are the gains
}


def random_graded_run(rng: np.random.Generator, n_queries: int = 300):
    """Grades 0-3 over a pool of 25 documents per query; some queries with nothing relevant at all,
    some with nothing at grade 2 or more, some missing from the run; strictly decreasing scores."""
    qrels, ranked, scored = {}, {}, {}
    for i in range(n_queries):
        query, pool = f"q{i:03d}", [f"d{j}" for j in range(25)]
        judged = rng.choice(25, size=rng.integers(0, 12), replace=False)
        top = int(rng.choice([1, 2, 4], p=[0.15, 0.25, 0.6]))  # highest grade drawn for this query
        qrels[query] = {pool[j]: int(rng.integers(0, top)) for j in judged}
        if rng.random() < 0.07:
            continue
        docs = [pool[j] for j in rng.permutation(25)[: rng.integers(0, 25)]]
        ranked[query] = docs
        scored[query] = {doc: float(len(docs) - rank) for rank, doc in enumerate(docs)}
    return qrels, ranked, scored


@pytest.fixture(scope="module")
def graded():
    return random_graded_run(np.random.default_rng(27))


def _theirs(measures: dict, qrels, scored) -> dict:
    parsed = {ir_measures.parse_measure(name): name for name in measures.values()}
    return {(m.query_id, parsed[m.measure]): m.value for m in ir_measures.iter_calc(parsed, qrels, scored)}


def test_threshold_and_r_precision_equal_ir_measures_counting_empty_queries_as_zero(graded):
    qrels, ranked, scored = graded
    ours = per_query(qrels, ranked, list(THRESHOLDED), empty="zero")
    theirs = _theirs(THRESHOLDED, qrels, scored)
    assert list(ours.index) == list(qrels)  # every judged query has a row
    none_at_2 = [q for q, judged in qrels.items() if any(g > 0 for g in judged.values())
                 and not any(g >= 2 for g in judged.values())]  # fmt: skip
    assert len(none_at_2) > 20 and sum(not any(j.values()) for j in qrels.values()) > 20
    for ours_name, their_name in THRESHOLDED.items():
        column = ours[ours_name]
        assert 0 < column.mean() < 1 and column.nunique() >= 2, ours_name
        # pytrec_eval leaves out queries missing from the run: trec_eval -c counts them 0
        expected = [theirs.get((q, their_name), 0.0) for q in ours.index]
        np.testing.assert_allclose(column.to_numpy(), expected, rtol=0, atol=1e-9, err_msg=ours_name)
    # At grade 2 a query answerable only at grade 1 scores 0 on every binary measure.
    assert (ours.loc[none_at_2, ["P(rel=2)@5", "AP(rel=2)", "Rprec(rel=2)"]] == 0).all().all()


def test_threshold_one_is_the_default_convention(graded):
    qrels, ranked, _ = graded
    plain = per_query(qrels, ranked, ["P@5", "AP", "nDCG@10"])
    explicit = per_query(qrels, ranked, ["P(rel=1)@5", "AP(rel=1)", "nDCG(gain=linear)@10"])
    np.testing.assert_array_equal(plain.to_numpy(), explicit.to_numpy())


def test_exponential_gain_ndcg_is_trec_eval_ndcg_over_grades_mapped_to_two_to_the_g_minus_one(graded):
    qrels, ranked, scored = graded
    ours = per_query(qrels, ranked, ["nDCG(gain=exp)@10", "nDCG(gain=exp)", "nDCG@10"])
    # trec_eval's gain is the grade itself: grades 2^g - 1 in the qrels make it the exponential gain.
    exp_qrels = {q: {d: 2**g - 1 for d, g in judged.items()} for q, judged in qrels.items()}
    theirs = pytrec_eval.RelevanceEvaluator(exp_qrels, {"ndcg_cut.10", "ndcg"}).evaluate(scored)
    for ours_name, key in [("nDCG(gain=exp)@10", "ndcg_cut_10"), ("nDCG(gain=exp)", "ndcg")]:
        expected = [theirs.get(q, {}).get(key, 0.0) for q in ours.index]
        np.testing.assert_allclose(ours[ours_name].to_numpy(), expected, rtol=0, atol=1e-9)
    # Exponential gains weigh the top grades more: with grades up to 3 the two conventions differ.
    assert not np.allclose(ours["nDCG(gain=exp)@10"], ours["nDCG@10"])


def test_queries_with_nothing_relevant_are_apart_by_default_and_zero_on_request(graded):
    qrels, ranked, _ = graded
    apart = per_query(qrels, ranked, ["AP", "R@10"])
    zero = per_query(qrels, ranked, ["AP", "R@10"], empty="zero")
    empty = [q for q, judged in qrels.items() if not any(g > 0 for g in judged.values())]
    assert set(zero.index) - set(apart.index) == set(empty)
    assert (zero.loc[empty] == 0).all().all()
    np.testing.assert_array_equal(zero.loc[apart.index].to_numpy(), apart.to_numpy())
    with pytest.raises(ValueError, match="empty queries must be one of"):
        per_query(qrels, ranked, ["AP"], empty="drop")


@pytest.mark.parametrize(
    ("name", "family", "k", "rel", "gain"),
    [
        ("P(rel=2)@5", "P", 5, 2, "linear"),
        ("nDCG(gain=exp)@10", "nDCG", 10, 1, "exp"),
        ("nDCG(rel=2,gain=exp)", "nDCG", None, 2, "exp"),
        ("Rprec(rel=3)", "Rprec", None, 3, "linear"),
    ],
)
def test_metric_names_parse_into_parameters(name, family, k, rel, gain):
    metric = parse_metric(name)
    assert (metric.family, metric.k, metric.rel, metric.gain) == (family, k, rel, gain)


@pytest.mark.parametrize(
    "name",
    ["P(rel=0)@5", "P(gain=exp)@5", "nDCG(gain=cubic)@10", "P(rel=2,rel=3)@5", "P(x=1)@5", "harm(rel=2)@5"],
)
def test_bad_metric_parameters_are_refused_naming_the_name(name):
    with pytest.raises(ValueError, match="metric name"):
        parse_metric(name)


def test_parameterised_names_map_to_distinct_mlflow_keys():
    names = ["P@5", "P(rel=2)@5", "nDCG(gain=exp)@10", "nDCG(rel=2,gain=exp)@10", "Rprec", "harm@5"]
    keys = [metric_name_for_mlflow(n) for n in names]
    assert keys == [
        "P_at_5",
        "P_rel_2_at_5",
        "nDCG_gain_exp_at_10",
        "nDCG_rel_2_gain_exp_at_10",
        "Rprec",
        "harm_at_5",
    ]
    assert all(set(k) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") for k in keys)
