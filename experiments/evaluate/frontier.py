"""Quality against cost: the Pareto set and the LAFS frontier score, with intervals by conversation.

LongMemEval-V2 (leaderboard/compute_lafs.py) scores a system by the area under its accuracy step frontier
over log latency budgets: for a budget T, the best accuracy of a point whose latency is <= T (a floor where
none is), averaged over log T uniform on [T_MIN, T_MAX]. `lafs` is that construction, with the same
arithmetic in the same order (tests/evaluate/test_frontier.py checks it against the vendored file to 1e-12,
its reference frontiers and edge cases included); here the cost axis is any positive cost: per-query
latency in ms, or tokens returned, with its own budgets. `LME_V2_REFERENCE` is upstream's released reference
frontier (answer accuracy in points against latency in seconds), for `official` answer-accuracy scoring.

A variant's score is `lafs` of its own points (one per k or budget point when swept, else one: its mean
quality at its p50 cost); its gain is `lafs(reference + variant) - lafs(reference)`, as upstream's.

Intervals are by conversation: every quality and cost comes from the same queries, so a conversation left
out leaves out both. The 95% interval is the delete-one-conversation jackknife with a t quantile on G - 1
degrees of freedom (the few-cluster rule of docs/metrics.md: the CR2 t-interval's analogue for a statistic
that is not a mean); its coverage at 10 and 20 conversations is simulated in
reports/benchmarks/frontier_coverage.md (experiments/benchmarks/frontier_coverage.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class Point:
    name: str
    quality: float
    cost: float  # > 0: ms, tokens, seconds


@dataclass(frozen=True)
class Budgets:
    low: float
    high: float
    floor: float = 0.0
    unit: str = ""

    def __post_init__(self) -> None:
        if not 0 < self.low < self.high:
            raise ValueError(f"frontier budgets: require 0 < low < high, got {self.low} and {self.high}")


# The default budgets memeval states in its reports: latency 0.1 ms - 10 s, tokens 16 - 16,384.
LATENCY_MS = Budgets(0.1, 10_000.0, unit="ms")
TOKENS = Budgets(16.0, 16_384.0, unit="tokens")
# LongMemEval-V2's own: latency 1 - 200 s, floor 0 (leaderboard/compute_lafs.py T_MIN, T_MAX, FLOOR_ACC).
LME_V2 = Budgets(1.0, 200.0, unit="s")
# Its released reference frontiers (accuracy in points, latency in seconds), by tier, as upstream lists them.
LME_V2_REFERENCE: Mapping[str, tuple[Point, ...]] = {
    "small": (
        Point("RAG: query -> slice + notes", 51.0, 0.2),
        Point("Codex", 69.9, 177.2),
        Point("AgentRunbook-R", 58.6, 26.9),
        Point("AgentRunbook-C", 74.9, 108.3),
    ),
    "medium": (
        Point("RAG: query -> slice + notes", 45.9, 0.3),
        Point("Codex", 68.7, 185.8),
        Point("AgentRunbook-R", 57.0, 25.8),
        Point("AgentRunbook-C", 70.1, 139.9),
    ),
}


def pareto(points: Sequence[Point]) -> list[Point]:
    """The non-dominated points, cheapest first: each better than every cheaper one (at equal cost the
    best first, so a tie in cost keeps one point; a tie in quality keeps the cheaper)."""
    front: list[Point] = []
    best = -math.inf
    for point in sorted(points, key=lambda p: (p.cost, -p.quality)):
        if point.cost <= 0:
            raise ValueError(f"frontier: cost must be positive, got {point.cost} for {point.name}")
        if point.quality > best:
            front.append(point)
            best = point.quality
    return front


def _best_under(points: Sequence[Point], budget: float, floor: float) -> float:
    valid = [p.quality for p in points if p.cost <= budget]
    return max(valid) if valid else floor


def lafs(points: Sequence[Point], budgets: Budgets) -> float:
    """The area under the step frontier over log budgets, divided by the log range (module docstring)."""
    front = pareto(points)
    breaks = sorted(
        {budgets.low, budgets.high} | {p.cost for p in front if budgets.low < p.cost < budgets.high}
    )
    area = 0.0
    for left, right in zip(breaks[:-1], breaks[1:], strict=True):
        area += _best_under(front, left, budgets.floor) * math.log(right / left)
    return area / math.log(budgets.high / budgets.low)


def gain(reference: Sequence[Point], points: Sequence[Point], budgets: Budgets) -> float:
    """What the points add to a reference frontier: lafs(reference + points) - lafs(reference)."""
    return lafs([*reference, *points], budgets) - lafs(reference, budgets)


# ------------------------------------------------------------------------------ intervals by conversation


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float
    n_clusters: int


def jackknife_interval(statistic: Callable[[np.ndarray], float], clusters: np.ndarray) -> Interval:
    """`statistic(mask)` over the queries in `mask`; its 95% interval from the delete-one-conversation
    jackknife, t on G - 1 df. With one conversation: unbounded (nothing to resample between)."""
    labels = np.unique(clusters)
    estimate = statistic(np.ones(len(clusters), dtype=bool))
    g = len(labels)
    if g < 2:
        return Interval(estimate, -math.inf, math.inf, g)
    leave = np.array([statistic(clusters != c) for c in labels])
    se = math.sqrt((g - 1) / g * float(((leave - leave.mean()) ** 2).sum()))
    half = float(stats.t.ppf(0.975, g - 1)) * se
    return Interval(estimate, estimate - half, estimate + half, g)


@dataclass(frozen=True)
class Variant:
    """One variant's per-query quality and cost, aligned with `clusters` (the same queries, same order)."""

    name: str
    quality: np.ndarray
    cost: np.ndarray


def variant_score(variant: Variant | Sequence[Variant], mask: np.ndarray, budgets: Budgets) -> float:
    """lafs of the variant's points over the queries in `mask`, each mean quality at p50 cost; a variant
    swept over k or a token budget is the sequence of its runs (one point each)."""
    runs = [variant] if isinstance(variant, Variant) else list(variant)
    return lafs([_point(v, mask) for v in runs], budgets)


def _point(variant: Variant, mask: np.ndarray) -> Point:
    q, c = variant.quality[mask], variant.cost[mask]
    return Point(variant.name, float(np.nanmean(q)), float(np.percentile(c[~np.isnan(c)], 50)))


def score_interval(variant: Variant | Sequence[Variant], clusters: np.ndarray, budgets: Budgets) -> Interval:
    return jackknife_interval(lambda mask: variant_score(variant, mask, budgets), clusters)


def paired_difference(
    a: Variant | Sequence[Variant], b: Variant | Sequence[Variant], clusters: np.ndarray, budgets: Budgets
) -> Interval:
    """a's score minus b's, both over the same resampled conversations."""
    return jackknife_interval(
        lambda mask: variant_score(a, mask, budgets) - variant_score(b, mask, budgets), clusters
    )


# ------------------------------------------------------------------ LongMemEval-V2's own answer frontier


def lme_v2_summary(name: str, correct: np.ndarray, latency_s: np.ndarray, clusters: np.ndarray) -> dict:
    """A run with answers as one LongMemEval-V2 operating point, scored as upstream's
    `lafs_summary_for_submission` scores it against each tier's released reference frontier: accuracy in
    points (100 x the mean judge score over the judged queries) against the mean memory-query latency in
    seconds (upstream's `memory_query.avg_seconds`: retrieval, not answer generation), budgets 1-200 s,
    floor 0. Beside upstream's numbers, the gain's 95% interval by conversation (jackknife, as above)."""
    judged = ~np.isnan(correct) & ~np.isnan(latency_s)
    correct, latency_s, clusters = correct[judged], latency_s[judged], clusters[judged]

    def point(mask: np.ndarray) -> Point:
        return Point(name, 100.0 * float(np.mean(correct[mask])), float(np.mean(latency_s[mask])))

    ours = point(np.ones(len(correct), dtype=bool))
    tiers = {}
    for tier, reference in LME_V2_REFERENCE.items():
        interval = jackknife_interval(lambda m, ref=reference: gain(ref, [point(m)], LME_V2), clusters)
        tiers[tier] = {
            "reference_lafs": lafs(reference, LME_V2),
            "submission_lafs": lafs([*reference, ours], LME_V2),
            "lafs_gain": interval.estimate,
            "lafs_gain_ci95": [interval.low, interval.high] if math.isfinite(interval.low) else None,
            "submission_frontier": [p.name for p in pareto([*reference, ours])],
        }
    return {
        "accuracy_points": ours.quality,
        "memory_query_avg_seconds": ours.cost,
        "n": int(len(correct)),
        "t_min_seconds": LME_V2.low,
        "t_max_seconds": LME_V2.high,
        "floor_accuracy": LME_V2.floor,
        "tiers": tiers,
    }
