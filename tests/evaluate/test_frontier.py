"""The frontier score (experiments/evaluate/frontier.py) against LongMemEval-V2's own compute_lafs.py
(vendored verbatim in tests/upstream/, Apache-2.0): equal to 1e-12 on its released reference frontiers,
its example submissions, the edge cases (faster than T_MIN, slower than T_MAX, dominated points, ties) and
seeded random point sets; and the conversation interval's plumbing."""

from __future__ import annotations

import math

import numpy as np
import pytest

from experiments.evaluate import frontier
from experiments.evaluate.frontier import LME_V2, LME_V2_REFERENCE, Budgets, Point
from tests.upstream import longmemeval_v2_compute_lafs as upstream

TOLERANCE = 1e-12


def _theirs(points: list[Point]) -> list[upstream.Point]:
    return [upstream.Point(p.name, acc=p.quality, latency=p.cost) for p in points]


def _ours(points: list[upstream.Point]) -> list[Point]:
    return [Point(p.name, p.acc, p.latency) for p in points]


def test_the_released_reference_frontiers_are_upstreams_and_score_as_upstream():
    for tier, points in upstream.fixed_frontier_points.items():
        assert list(LME_V2_REFERENCE[tier]) == _ours(points)
        assert abs(frontier.lafs(LME_V2_REFERENCE[tier], LME_V2) - upstream.lafs(points)) <= TOLERANCE
        assert [p.name for p in frontier.pareto(LME_V2_REFERENCE[tier])] == [
            p.name for p in upstream.pareto_frontier(points)
        ]
    assert (LME_V2.low, LME_V2.high, LME_V2.floor) == (upstream.T_MIN, upstream.T_MAX, upstream.FLOOR_ACC)


EDGES = {
    "faster than T_MIN": [Point("fast", 40.0, 0.01), Point("fast2", 45.0, 0.5)],
    "slower than T_MAX": [Point("slow", 99.0, 250.0)],
    "exactly T_MIN and T_MAX": [Point("a", 30.0, 1.0), Point("b", 90.0, 200.0)],
    "dominated": [Point("good", 70.0, 10.0), Point("worse and slower", 60.0, 50.0)],
    "tie in latency": [Point("x", 50.0, 20.0), Point("y", 65.0, 20.0), Point("z", 55.0, 20.0)],
    "tie in accuracy": [Point("x", 60.0, 30.0), Point("y", 60.0, 5.0)],
    "tie in both": [Point("x", 60.0, 30.0), Point("y", 60.0, 30.0)],
    "empty": [],
    "below the floor": [Point("neg", -5.0, 3.0)],
}


@pytest.mark.parametrize("case", EDGES)
@pytest.mark.parametrize("tier", ["small", "medium", None])
def test_edge_cases_equal_upstream_alone_and_against_the_reference(case, tier):
    points = EDGES[case]
    reference = list(LME_V2_REFERENCE[tier]) if tier else []
    ours = frontier.lafs([*reference, *points], LME_V2)
    theirs = upstream.lafs(_theirs([*reference, *points]))
    assert abs(ours - theirs) <= TOLERANCE, (ours, theirs)
    if tier:
        expected = upstream.lafs_gain_for_submission(_theirs(reference), _theirs(points))
        assert abs(frontier.gain(reference, points, LME_V2) - expected) <= TOLERANCE
        summary = upstream.lafs_summary_for_submission(tier, _theirs(points))
        assert abs(frontier.gain(reference, points, LME_V2) - summary["lafs_gain"]) <= TOLERANCE
        assert [p.name for p in frontier.pareto([*reference, *points])] == [
            f["name"] for f in summary["submission_frontier"]
        ]


def test_a_dominated_point_gains_nothing_and_a_point_past_t_max_gains_nothing():
    reference = list(LME_V2_REFERENCE["small"])
    assert frontier.gain(reference, [Point("dominated", 70.0, 150.0)], LME_V2) == 0.0
    assert frontier.gain(reference, [Point("too slow", 99.0, 201.0)], LME_V2) == 0.0
    assert frontier.gain(reference, [Point("fast", 60.0, 10.0)], LME_V2) > 0


def test_seeded_random_point_sets_and_budgets_equal_upstream():
    rng = np.random.default_rng(44)
    for _ in range(500):
        n = int(rng.integers(1, 9))
        latencies = np.exp(rng.uniform(math.log(0.05), math.log(500.0), n))
        latencies[rng.random(n) < 0.2] = latencies[0]  # ties in latency
        accuracies = np.round(rng.uniform(0, 100, n), int(rng.integers(0, 2)))  # ties in accuracy
        points = [
            Point(f"p{i}", float(a), float(t))
            for i, (a, t) in enumerate(zip(accuracies, latencies, strict=True))
        ]
        low = float(np.exp(rng.uniform(-3, 1)))
        budgets = Budgets(low, low * float(np.exp(rng.uniform(0.5, 8))), floor=float(rng.uniform(0, 10)))
        expected = upstream.lafs(_theirs(points), budgets.low, budgets.high, budgets.floor)
        assert abs(frontier.lafs(points, budgets) - expected) <= TOLERANCE


def test_non_positive_costs_and_budgets_are_refused_as_upstream_refuses_them():
    with pytest.raises(ValueError, match="positive"):
        frontier.lafs([Point("zero", 50.0, 0.0)], LME_V2)
    with pytest.raises(ValueError):
        upstream.lafs(_theirs([Point("zero", 50.0, 0.0)]))
    with pytest.raises(ValueError, match="0 < low < high"):
        Budgets(10.0, 1.0)


def test_the_conversation_interval_resamples_quality_and_cost_from_the_same_queries():
    rng = np.random.default_rng(0)
    clusters = np.repeat(np.arange(12), 15)
    quality = rng.random(len(clusters))
    cost = np.exp(rng.normal(2, 0.5, len(clusters)))
    a = frontier.Variant("a", quality, cost)
    b = frontier.Variant("b", quality * 0.9, cost * 2)
    budgets = Budgets(1.0, 1000.0)
    interval = frontier.score_interval(a, clusters, budgets)
    assert interval.n_clusters == 12 and interval.low < interval.estimate < interval.high
    point = Point("a", float(quality.mean()), float(np.percentile(cost, 50)))
    assert interval.estimate == frontier.lafs([point], budgets)
    diff = frontier.paired_difference(a, b, clusters, budgets)
    assert diff.low > 0  # better and cheaper on every query: the paired difference excludes 0
    one = frontier.score_interval(a, np.zeros(len(clusters)), budgets)
    assert one.low == -math.inf and one.high == math.inf


def test_a_run_with_answers_scores_as_upstreams_submission_summary_per_tier():
    """lme_v2_summary: the run's operating point (100 x mean accuracy, mean seconds) against each released
    reference, equal to upstream's lafs_summary_for_submission; the gain's interval holds the estimate."""
    rng = np.random.default_rng(3)
    for latency_scale in (0.004, 5.0, 60.0, 500.0):  # faster than T_MIN, inside, slower than T_MAX
        correct = rng.integers(0, 2, 120).astype(float)
        correct[[4, 9]] = np.nan  # unparsed verdicts are left out, as the answer block's means leave them
        latency = rng.exponential(latency_scale, 120) + 1e-6
        clusters = np.array([f"c{i % 10}" for i in range(120)], dtype=object)
        ours = frontier.lme_v2_summary("run", correct, latency, clusters)
        keep = ~np.isnan(correct)
        point = upstream.Point("run", acc=100 * correct[keep].mean(), latency=latency[keep].mean())
        assert ours["accuracy_points"] == pytest.approx(point.acc, abs=TOLERANCE)
        assert ours["memory_query_avg_seconds"] == pytest.approx(point.latency, abs=TOLERANCE)
        for tier in upstream.fixed_frontier_points:
            theirs = upstream.lafs_summary_for_submission(tier, [point])
            mine = ours["tiers"][tier]
            for field in ("reference_lafs", "submission_lafs", "lafs_gain"):
                assert abs(mine[field] - theirs[field]) <= TOLERANCE, (tier, field, latency_scale)
            assert mine["submission_frontier"] == [p["name"] for p in theirs["submission_frontier"]]
            low, high = mine["lafs_gain_ci95"]
            assert low <= mine["lafs_gain"] <= high
