"""Statistics over per-query metric values: bootstrap CIs, paired tests, Holm, win/tie/loss.

Sits after the metrics in the data flow: `experiments.evaluate.metrics` turns a run into one value per query,
and the functions here turn those 1-D arrays (aligned by query, one array per run) into the numbers
the gate and the reports print. `compare()` is the one-call building block: a baseline and its
variants for one metric in, a table with means, CIs, deltas, p-values (raw and Holm-adjusted) and
per-query win/tie/loss counts out.

Queries about one conversation are not independent (they share its memories, length and difficulty).
Every interval and test here can take `clusters` (one label per query: the conversation, i.e. the
suite's scope, or a `cluster` a suite declares) and then works on whole clusters; `resolve_unit` picks
the unit (`auto`: clusters wherever a suite has several queries per cluster). With few clusters a
percentile cluster bootstrap is too narrow (reports/benchmarks/cluster_calibration.md), so what memeval
reports at cluster level is calibrated for few clusters: `cluster_delta_ci` (the inverted sign-flip test)
for a paired difference, `cluster_mean_ci` (CR2 t, Bell-McCaffrey df) for a mean; `bootstrap_ci` with
clusters stays for comparison.
`design_effect` says how much clustering widens the variance of a mean, `minimum_detectable_effect`
what paired difference a suite of this size and clustering can detect.

Determinism: every random draw comes from a `numpy.random.Generator` seeded by the caller, sums are
numpy's own single-threaded reductions, a resample mean is one BLAS dot product (its own row, whatever
the thread count), and chunk sizes depend only on the input size, so the same inputs and seed give
bit-identical results in any process, on one core or many (tests/evaluate/test_statistics.py runs it
with 1 and 2 BLAS threads). Another CPU's BLAS kernels may round a bound's last bit differently.
"""

from __future__ import annotations

import functools
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Literal, NamedTuple

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from retrieval.blas_threads import one_blas_thread

# Elements per resampling chunk: bounds memory to a few tens of MB whatever the query count.
_CHUNK_ELEMENTS = 1 << 22
# Resample draws up to this many indices are kept per process (lru of 4: ~14 MB each for BEAM 100K).
_CACHED_ELEMENTS = 1 << 22
# Resamples per block of the mean products: a block small enough to stay in the CPU cache is read from
# there by every column after the first, instead of each column streaming the whole count matrix (a mean
# is its own row's dot product, so the block size does not change it: tests/evaluate/test_statistics.py).
_BLOCK_ROWS = 256
# Bootstrap intervals of means already computed in this process (values, resamples, seed, confidence): the
# last 512 are kept (bootstrap_cis).
_MEAN_CIS: OrderedDict[tuple, ConfidenceInterval] = OrderedDict()
_MEAN_CIS_KEPT = 512
# Exact sign-flip enumeration costs 2**m floats for m non-zero differences: 2**20 is 8 MB: still cheap.
EXACT_MAX_N = 20
# Two test statistics closer than this (relative to the sum of |differences|) are the same value:
# sign-flipped sums are added in a different order than the observed one, so exact ties
# (common with discrete metrics such as hit@k) would otherwise be split by rounding.
_TIE_RTOL = 1e-9

# Fewer clusters than this carrying a comparison: its cluster-level intervals and tests are coarse (an
# exact sign-flip over c clusters cannot give p below 2 / 2**c), and reports say so.
FEW_CLUSTERS = 10

Test = Literal["randomization", "wilcoxon"]
# The unit statistics resample: `auto` is `cluster` when the queries fall into at least two clusters and
# some cluster holds several queries, else `query`.
Unit = Literal["auto", "cluster", "query"]
UNITS = ("auto", "cluster", "query")
# How reports name each unit.
UNIT_NAMES = {
    "cluster": "whole clusters (conversations) resampled and sign-flipped",
    "query": "queries resampled and sign-flipped independently",
}
# How reports name each test.
TEST_NAMES = {
    "randomization": "paired two-sided sign-flip randomization test (exact when at most 20 units differ, "
    "else 10,000 seeded resamples)",
    "wilcoxon": "paired two-sided Wilcoxon signed-rank test",
}


class ConfidenceInterval(NamedTuple):
    """Lower and upper bound of a confidence interval (unpacks as `low, high`)."""

    low: float
    high: float


def _values(values: ArrayLike, name: str = "values") -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array of per-query values, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return array


def _paired(a: ArrayLike, b: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    a, b = _values(a, "a"), _values(b, "b")
    if a.shape != b.shape:
        raise ValueError(f"paired values must be aligned by query: {a.size} vs {b.size} values")
    return a, b


def cluster_codes(clusters: ArrayLike, n: int) -> np.ndarray:
    """Each query's cluster as an integer 0..C-1 (in order of first appearance), for `n` queries."""
    labels = np.asarray(clusters, dtype=object)
    if labels.ndim != 1 or labels.size != n:
        raise ValueError(f"clusters must hold one label per query: {labels.size} labels for {n} values")
    codes, _ = pd.factorize(labels)
    if np.any(codes < 0):
        raise ValueError("clusters has a missing label (None/NaN): every query needs its cluster")
    return codes


def resolve_unit(unit: str, clusters: ArrayLike | None, n: int) -> Literal["cluster", "query"]:
    """The unit statistics resample for `n` queries: `unit` as asked, `auto` resolved (see `Unit`)."""
    return unit_choice(unit, clusters, n)[0]


def unit_choice(unit: str, clusters: ArrayLike | None, n: int) -> tuple[Literal["cluster", "query"], str]:
    """`resolve_unit`'s unit and the reason for it, as metrics.json and reports state it."""
    if unit not in UNITS:
        raise ValueError(f"unknown statistics unit {unit!r}; use one of {', '.join(UNITS)}")
    if unit == "query":
        return "query", "asked for (unit=query)"
    if clusters is None:
        if unit == "cluster":
            raise ValueError("statistics unit 'cluster' needs each query's cluster, and none was given")
        return "query", "no query records its cluster"
    n_clusters = int(cluster_codes(clusters, n).max()) + 1
    if n_clusters < 2:
        if unit == "cluster":
            raise ValueError(f"statistics unit 'cluster' needs at least two clusters, got {n_clusters}")
        return "query", f"all {n} queries are in one cluster: there are no clusters to resample"
    if n_clusters == n:
        return "query", "every cluster holds one query: the clusters are the queries"
    return "cluster", (
        f"{n_clusters} clusters hold the {n} queries: questions of one conversation are not independent"
    )


def unit_warning(chosen: str, clusters: ArrayLike | None, n: int) -> str | None:
    """What a reader must know about the unit: too few clusters for cluster-level statistics, or one
    cluster holding several queries, which leaves only query-level statistics (they treat questions
    about one conversation as independent: intervals too narrow and p-values too small if they are
    correlated)."""
    if clusters is None:
        return None
    n_clusters = int(cluster_codes(clusters, n).max()) + 1
    if chosen == "cluster":
        return few_clusters_warning(n_clusters)
    if n_clusters == 1 and n > 1:
        # the cluster's own label (`project=spark`: the suite's real scope field), where it is one
        first = np.asarray(clusters, dtype=object).ravel()[0]
        which = first if isinstance(first, str) else "one scope"
        return (
            f"all {n} queries are in one cluster ({which}), so the statistics fall back to the query "
            "level: they count questions about one scope as independent, and if those are correlated "
            "the intervals are too narrow and the p-values too small (a suite whose queries are "
            "independent says so in suite.yaml: `cluster: query`)"
        )
    return None


def design_effect_warning(effects: Mapping[str, float], n_clusters: int) -> str | None:
    """The caveat when a design effect is below 1: the cluster-level interval is then narrower than the
    query-level one, which positively correlated questions cannot justify."""
    below = {m: d for m, d in effects.items() if np.isfinite(d) and d < 1.0}
    if not below:
        return None
    listed = ", ".join(f"{m} {d:.2f}" for m, d in below.items())
    return (
        f"design effect below 1 ({listed}): these cluster-level intervals are narrower than query-level "
        f"ones. Questions about one conversation are usually positively correlated (design effect > 1); "
        f"below 1 they vary against each other within conversations, or {n_clusters} clusters are too few "
        "to estimate the between-cluster variance, which then comes out small by chance"
    )


def few_clusters_warning(n_clusters: int) -> str | None:
    """The caveat printed when a cluster-level comparison rests on fewer than FEW_CLUSTERS clusters."""
    if n_clusters >= FEW_CLUSTERS:
        return None
    smallest = 2 / 2**n_clusters
    cannot = (
        f"; at {n_clusters} clusters the test can never reach p < 0.05 and the 95% interval of a difference "
        "is unbounded"
        if smallest >= 0.05
        else ""
    )
    return (
        f"only {n_clusters} clusters carry this comparison (fewer than {FEW_CLUSTERS}): cluster-level "
        f"intervals are wide and no sign-flip p-value can be below 2/2^{n_clusters} = {smallest:.3g}{cannot}"
    )


def mean_variance(values: ArrayLike, clusters: ArrayLike | None = None) -> float:
    """Variance of the mean of `values`: s^2 / n for independent queries; with `clusters`, the
    cluster-robust (sandwich) variance C/(C-1) * sum_c (sum of residuals in c)^2 / n^2, which equals s^2 / n
    when every query is its own cluster. NaN when it cannot be estimated (one value, or one cluster)."""
    array = _values(values)
    n = array.size
    if clusters is None:
        return float(array.var(ddof=1) / n) if n > 1 else float("nan")
    codes = cluster_codes(clusters, n)
    c = int(codes.max()) + 1
    if c < 2:
        return float("nan")
    residual = np.bincount(codes, weights=array - array.mean(), minlength=c)
    return float(c / (c - 1) * (residual @ residual) / n**2)


def design_effect(values: ArrayLike, clusters: ArrayLike) -> float:
    """Cluster-level variance of the mean over the independent-query variance (1: clustering costs
    nothing; 3: the queries are worth a third as many independent ones). NaN when the values are constant."""
    independent = mean_variance(values)
    if not independent > 0:
        return float("nan")
    return mean_variance(values, clusters) / independent


def minimum_detectable_effect(
    values: ArrayLike,
    clusters: ArrayLike | None = None,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
    correlation: float | None = 0.5,
) -> float:
    """The smallest true change of the mean that a two-sided paired test at `alpha` detects with
    probability `power` on these queries: (t[1 - alpha/2] + t[power]) * SE of the mean paired difference,
    with C - 1 degrees of freedom for C clusters (n - 1 for n independent queries).

    `values` are one run's per-query values (a committed baseline): the paired difference's variance is
    then taken as 2 * (1 - `correlation`) times theirs, i.e. a variant whose per-query values correlate
    `correlation` with the baseline's (0.5: the values' own variance). `correlation=None` means `values`
    already are paired differences. NaN when the variance cannot be estimated.
    """
    if not 0.0 < alpha < 1.0 or not 0.0 < power < 1.0:
        raise ValueError(f"alpha and power must be in (0, 1), got {alpha} and {power}")
    if correlation is not None and not -1.0 <= correlation <= 1.0:
        raise ValueError(f"correlation must be in [-1, 1], got {correlation}")
    array = _values(values)
    variance = mean_variance(array, clusters)
    if correlation is not None:
        variance *= 2.0 * (1.0 - correlation)
    units = array.size if clusters is None else int(cluster_codes(clusters, array.size).max()) + 1
    if not np.isfinite(variance) or units < 2:
        return float("nan")
    from scipy import stats  # ~1 s to import; only the power analysis needs it

    df = units - 1
    return float((stats.t.ppf(1.0 - alpha / 2.0, df) + stats.t.ppf(power, df)) * np.sqrt(variance))


def bootstrap_ci(
    values: ArrayLike,
    *,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
    statistic: Callable[..., np.ndarray] = np.mean,
    clusters: ArrayLike | None = None,
) -> ConfidenceInterval:
    """Percentile bootstrap confidence interval of `statistic` over queries (or whole `clusters`).

    `statistic` must reduce along an `axis` keyword (as numpy's do); it is called on a
    (chunk, n) array of resampled values with `axis=-1`. With `clusters`, only the mean.
    """
    (interval,) = bootstrap_cis(
        {"values": values},
        confidence=confidence,
        n_resamples=n_resamples,
        seed=seed,
        statistic=statistic,
        clusters=clusters,
    ).values()
    return interval


def _chunks(n: int, n_resamples: int) -> list[tuple[int, int]]:
    chunk = max(1, _CHUNK_ELEMENTS // n)
    return [(start, min(start + chunk, n_resamples)) for start in range(0, n_resamples, chunk)]


@functools.lru_cache(maxsize=4)
def _draws(n: int, n_resamples: int, seed: int) -> dict[int, np.ndarray]:
    """The resample indices of every chunk (by its start), as a seeded generator draws them in order."""
    rng = np.random.default_rng(seed)
    draws = {start: rng.integers(0, n, size=(stop - start, n)) for start, stop in _chunks(n, n_resamples)}
    for indices in draws.values():
        indices.setflags(write=False)  # shared by every later call: nobody may change them
    return draws


def _bincount(indices: np.ndarray, n: int) -> np.ndarray:
    rows = np.arange(len(indices))[:, None] * n
    return (
        np.bincount((indices + rows).ravel(), minlength=len(indices) * n)
        .reshape(len(indices), n)
        .astype(float)
    )


@functools.lru_cache(maxsize=4)
def _counts_cached(n: int, n_resamples: int, seed: int) -> dict[int, np.ndarray]:
    counts = {start: _bincount(indices, n) for start, indices in _draws(n, n_resamples, seed).items()}
    for table in counts.values():
        table.setflags(write=False)
    return counts


def _resamples(n: int, n_resamples: int, seed: int, want_counts: bool):
    """(start, stop, indices, counts or None) per chunk. The draws of small problems (at most
    _CACHED_ELEMENTS indices: BEAM's 179 queries x 10,000 resamples is 1.8M), and their counts when
    `want_counts`, are made once per process and reused by every later call with the same
    (n, n_resamples, seed), as a study's many comparisons make; larger ones are drawn chunk by chunk
    each call, bounding memory. Either way the draws are the generator's, in the same order: the
    intervals do not depend on which path ran."""
    if n * n_resamples <= _CACHED_ELEMENTS:
        draws = _draws(n, n_resamples, seed)
        counts = _counts_cached(n, n_resamples, seed) if want_counts else {}
        for start, stop in _chunks(n, n_resamples):
            yield start, stop, draws[start], counts.get(start)
        return
    rng = np.random.default_rng(seed)
    for start, stop in _chunks(n, n_resamples):
        yield start, stop, rng.integers(0, n, size=(stop - start, n)), None


def bootstrap_cis(
    columns: Mapping[str, ArrayLike],
    *,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
    statistic: Callable[..., np.ndarray] = np.mean,
    clusters: ArrayLike | None = None,
) -> dict[str, ConfidenceInterval]:
    """`bootstrap_ci` of several metrics over the same queries, sharing one set of resample draws.

    Each column's interval equals `bootstrap_ci(column, seed=seed)` (the draws are the same), at the
    cost of one draw instead of one per metric. With `clusters` (one label per query), each resample
    draws C whole clusters with replacement and its mean is over every query of the drawn clusters.
    """
    arrays = {name: _values(v, name) for name, v in columns.items()}
    sizes = {a.size for a in arrays.values()}
    if len(sizes) != 1:
        raise ValueError(f"columns must hold one value per query each, got sizes {sorted(sizes)}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be positive, got {n_resamples}")
    (n,) = sizes
    mean = statistic is np.mean
    if clusters is not None:
        if not mean:
            raise ValueError("a cluster bootstrap is of the mean only")
        return _cluster_bootstrap_cis(arrays, cluster_codes(clusters, n), confidence, n_resamples, seed)
    # A mean's interval depends only on the values, resamples, seed and confidence (never on the other
    # columns): intervals already computed in this process are reused (a sweep's jobs repeat many columns).
    keys = {name: (a.tobytes(), n_resamples, seed, confidence) for name, a in arrays.items()} if mean else {}
    out = {name: _MEAN_CIS[key] for name, key in keys.items() if key in _MEAN_CIS}
    names = [name for name in arrays if name not in out]
    estimates = {name: np.empty(n_resamples) for name in names}
    # One BLAS thread: the others would spin through the rest of the run (retrieval/blas_threads.py).
    with one_blas_thread():
        for start, stop, indices, counts in _resamples(n, n_resamples, seed, mean) if names else ():
            if mean:
                # The mean of a resample is (how often each query was drawn) . values / n: a matrix-vector
                # product, one column at a time, so a column's interval does not depend on which other
                # columns came with it (one matrix product over all columns would round differently).
                counts = _bincount(indices, n) if counts is None else counts
                for lo in range(0, len(counts), _BLOCK_ROWS):  # a block stays in cache for every column
                    block = counts[lo : lo + _BLOCK_ROWS]
                    for name in names:
                        estimates[name][start + lo : start + lo + len(block)] = (block @ arrays[name]) / n
                continue
            for name in names:
                estimates[name][start:stop] = statistic(arrays[name][indices], axis=-1)
    tail = (1.0 - confidence) / 2.0
    for name, est in estimates.items():
        low, high = np.quantile(est, [tail, 1.0 - tail])
        out[name] = ConfidenceInterval(float(low), float(high))
        if mean:
            _MEAN_CIS[keys[name]] = out[name]
    while len(_MEAN_CIS) > _MEAN_CIS_KEPT:
        _MEAN_CIS.popitem(last=False)
    return {name: out[name] for name in arrays}


def _cluster_bootstrap_cis(
    arrays: Mapping[str, np.ndarray], codes: np.ndarray, confidence: float, n_resamples: int, seed: int
) -> dict[str, ConfidenceInterval]:
    """The cluster bootstrap: a resample's mean is (draws of each cluster . cluster sums) / (draws .
    cluster sizes), two matrix-vector products over the (resamples x clusters) draw counts."""
    c = int(codes.max()) + 1
    sizes = np.bincount(codes, minlength=c).astype(float)
    keys = {
        name: ("cluster", codes.tobytes(), a.tobytes(), n_resamples, seed, confidence)
        for name, a in arrays.items()
    }
    out = {name: _MEAN_CIS[key] for name, key in keys.items() if key in _MEAN_CIS}
    sums = {name: np.bincount(codes, weights=a, minlength=c) for name, a in arrays.items() if name not in out}
    estimates = {name: np.empty(n_resamples) for name in sums}
    with one_blas_thread():
        for start, stop, indices, counts in _resamples(c, n_resamples, seed, True) if sums else ():
            counts = _bincount(indices, c) if counts is None else counts
            drawn = counts @ sizes
            for name, total in sums.items():
                estimates[name][start:stop] = (counts @ total) / drawn
    tail = (1.0 - confidence) / 2.0
    for name, est in estimates.items():
        low, high = np.quantile(est, [tail, 1.0 - tail])
        out[name] = _MEAN_CIS[keys[name]] = ConfidenceInterval(float(low), float(high))
    while len(_MEAN_CIS) > _MEAN_CIS_KEPT:
        _MEAN_CIS.popitem(last=False)
    return {name: out[name] for name in arrays}


_WARNED: set[str] = set()


def warn_once(message: str) -> None:
    """A statistics warning, said once per process: a report compares many metrics and labels on the same
    queries, and the reader needs to hear it once, not once per table."""
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, UserWarning, stacklevel=3)


def _two_or_more_clusters(clusters: ArrayLike, n: int) -> tuple[np.ndarray, int]:
    """Each value's cluster number and how many clusters: a cluster interval needs two or more."""
    codes = cluster_codes(clusters, n)
    g = int(codes.max()) + 1
    if g < 2:
        raise ValueError(f"a cluster interval needs at least two clusters, got {g}")
    return codes, g


def cluster_mean_ci(
    values: ArrayLike, clusters: ArrayLike, *, confidence: float = 0.95
) -> ConfidenceInterval:
    """Confidence interval of the mean of `values` over whole clusters, calibrated for few clusters: a
    t-interval with the CR2 (bias-reduced) cluster-robust variance and Bell-McCaffrey degrees of freedom
    (G - 1 for G equal clusters, fewer for unequal sizes). What metrics.json and reports print for a run's
    mean at cluster level (docs/metrics.md: the percentile cluster bootstrap is too narrow below ~20
    clusters, reports/benchmarks/cluster_calibration.md)."""
    array = _values(values)
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    codes, g = _two_or_more_clusters(clusters, array.size)
    sizes = np.bincount(codes, minlength=g).astype(float)
    residual = np.bincount(codes, weights=array - array.mean(), minlength=g)
    half = _cr2_t(residual[None, :], sizes, confidence)
    return ConfidenceInterval(float(array.mean() - half[0]), float(array.mean() + half[0]))


def _cr2_t(residual: np.ndarray, sizes: np.ndarray, confidence: float) -> np.ndarray:
    """Half-widths of the CR2 t-interval of a query-weighted mean, for each row of cluster residual sums
    (rows x G; `sizes` G or rows x G). For a mean, CR2 divides each cluster's squared residual sum by
    1 - n_g / n; the Bell-McCaffrey degrees of freedom are tr(M)^2 / ||M||^2 for the Gram matrix
    M_gh = a_g a_h (n_g [g = h] - n_g n_h / n), a_g = 1 / (n sqrt(1 - n_g / n)) (independent errors)."""
    from scipy import stats  # ~1 s to import; only intervals at cluster level need it

    sizes = np.broadcast_to(sizes, residual.shape)
    n = sizes.sum(axis=-1, keepdims=True)
    keep = 1.0 - sizes / n
    variance = (residual**2 / keep).sum(axis=-1) / n[:, 0] ** 2
    a = 1.0 / (n * np.sqrt(keep))
    outer = sizes[:, :, None] * sizes[:, None, :] / n[:, :, None]
    gram = a[:, :, None] * a[:, None, :] * (sizes[:, :, None] * np.eye(sizes.shape[1]) - outer)
    df = np.einsum("rgg->r", gram) ** 2 / (gram**2).sum(axis=(1, 2))
    return stats.t.ppf(0.5 + confidence / 2.0, df) * np.sqrt(variance)


def sign_flip_patterns(n_clusters: int, *, n_resamples: int, seed: int) -> np.ndarray:
    """Sign patterns (rows of +-1 per cluster) for a resampled cluster sign-flip test: the observed one
    (all +) and `n_resamples` drawn as `paired_randomization_test` draws them (same seed, same chunks: the
    same patterns when no cluster's difference is exactly 0)."""
    rng = np.random.default_rng(seed)
    chunk = max(1, _CHUNK_ELEMENTS // n_clusters)
    flips = [
        rng.integers(0, 2, size=(min(chunk, n_resamples - start), n_clusters), dtype=bool)
        for start in range(0, n_resamples, chunk)
    ]
    return np.vstack([np.ones((1, n_clusters)), *(np.where(f, -1.0, 1.0) for f in flips)])


def _signed_sums(weights: np.ndarray, patterns: np.ndarray | None) -> np.ndarray:
    """e . w for each row of `weights` (rows x G) and each sign pattern e: the given `patterns`, or all
    2**G of them built one cluster at a time (column 0 the all-+ pattern; 2**G floats a row, no G-wide
    pattern matrix)."""
    if patterns is not None:
        return weights @ patterns.T
    sums = np.zeros((len(weights), 1))
    for column in weights.T:
        sums = np.concatenate([sums + column[:, None], sums - column[:, None]], axis=1)
    return sums


def sign_flip_bounds(
    residual: np.ndarray, sizes: np.ndarray, confidence: float, patterns: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """How far below and above the mean the inverted cluster sign-flip test's interval reaches, for each
    row of cluster residual sums (rows x G; residual = sum over the cluster of value - overall mean;
    `sizes` G, or rows x G), over all 2**G sign patterns or the given `patterns` (sign_flip_patterns).

    The interval is every shift d whose test (sign-flipping the clusters' sums of value - d) has
    p > 1 - confidence. A pattern e with c = e . residual and b = e . sizes counts at d exactly when d is
    within [mean - |c| / (n - sign(c) b), mean + |c| / (n + sign(c) b)] (the all-same-sign patterns
    always count), so p falls monotonically away from the mean and each bound is an order statistic of
    those per-pattern bounds: no search, and the interval excludes d exactly when the test rejects d."""
    sizes = np.broadcast_to(np.asarray(sizes, dtype=float), residual.shape)
    n = sizes.sum(axis=-1, keepdims=True)
    c = _signed_sums(residual, patterns)  # (rows, patterns)
    b = _signed_sums(sizes, patterns)
    always = np.abs(b) >= n - 0.5  # all + or all -: c is 0 up to rounding, the pattern counts everywhere
    sign = np.sign(c)
    with np.errstate(divide="ignore", invalid="ignore"):
        above = np.where(always, np.inf, np.abs(c) / (n + sign * b))
        below = np.where(always, np.inf, np.abs(c) / (n - sign * b))
    # p(d) > alpha  <=>  more than alpha * N patterns count at d  <=>  d within the j-th largest bound.
    count = c.shape[1]
    j = int(np.floor((1.0 - confidence) * count)) + 1
    kth = count - j
    return np.partition(below, kth, axis=-1)[:, kth], np.partition(above, kth, axis=-1)[:, kth]


def cluster_delta_ci(
    differences: ArrayLike,
    clusters: ArrayLike,
    *,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
    exact_max_n: int = EXACT_MAX_N,
) -> ConfidenceInterval:
    """Confidence interval of the mean paired difference over whole clusters: the inverted cluster
    sign-flip test (`sign_flip_bounds`), so it excludes 0 exactly when `paired_randomization_test` with
    these clusters gives p <= 1 - confidence, and it is as calibrated as the test at any number of
    clusters. With G clusters and 2 / 2**G > 1 - confidence (G <= 5 at 95%) no shift can be rejected:
    the interval is unbounded (-inf, inf), which is what the data can say. Differences all 0: (0, 0)."""
    array = _values(differences, "differences")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    codes, g = _two_or_more_clusters(clusters, array.size)
    if not np.any(array):
        return ConfidenceInterval(0.0, 0.0)
    sizes = np.bincount(codes, minlength=g).astype(float)
    residual = np.bincount(codes, weights=array - array.mean(), minlength=g)
    patterns = None if g <= exact_max_n else sign_flip_patterns(g, n_resamples=n_resamples, seed=seed)
    below, above = sign_flip_bounds(residual[None, :], sizes, confidence, patterns)
    return ConfidenceInterval(float(array.mean() - below[0]), float(array.mean() + above[0]))


def smallest_p(n_units: int, *, n_resamples: int = 10_000, exact_max_n: int = EXACT_MAX_N) -> float:
    """The smallest p-value the sign-flip test can give over `n_units` units (clusters or queries), when
    every one differs: 2 / 2**G exact (the observed pattern and its mirror), 1 / (n_resamples + 1) when
    resampled."""
    if n_units <= exact_max_n:
        return 2.0 / 2.0**n_units if n_units else 1.0
    return max(2.0 / 2.0**n_units, 1.0 / (n_resamples + 1))


def cluster_sums(values: ArrayLike, clusters: ArrayLike) -> np.ndarray:
    """The sum of `values` within each cluster (in cluster code order): what a cluster test flips."""
    array = _values(values)
    return np.bincount(cluster_codes(clusters, array.size), weights=array)


def paired_randomization_test(
    a: ArrayLike,
    b: ArrayLike,
    *,
    n_resamples: int = 10_000,
    seed: int = 0,
    exact_max_n: int = EXACT_MAX_N,
    clusters: ArrayLike | None = None,
) -> float:
    """Two-sided sign-flip permutation test of mean(a - b) == 0 over paired per-query values.

    Under the null each query's difference is equally likely to have either sign. Zero differences
    are the same under both signs, so they are left out of the enumeration (the p-value does not
    change). With m <= `exact_max_n` non-zero differences all 2**m sign patterns are enumerated and
    the p-value is exact; otherwise `n_resamples` random patterns are drawn from a Generator seeded
    with `seed` and p = (count + 1) / (n_resamples + 1), which counts the observed pattern and so is
    never zero.

    With `clusters`, the signs belong to whole clusters: the statistic, the sum of all differences, is
    the sum of the clusters' sums, and each cluster's sum is flipped as one (the test above run on
    the cluster sums), so queries of one conversation never count as independent evidence.
    """
    a, b = _paired(a, b)
    differences = a - b
    if clusters is not None:
        differences = cluster_sums(differences, clusters)
    differences = differences[differences != 0.0]
    m = differences.size
    if m == 0:
        return 1.0
    observed = abs(float(differences.sum()))
    threshold = observed - _TIE_RTOL * float(np.abs(differences).sum())
    if m <= exact_max_n:
        # All 2**m signed sums, built one query at a time (index 0 is the observed all-plus pattern).
        sums = np.zeros(1)
        for d in differences:
            sums = np.concatenate([sums + d, sums - d])
        return float(np.count_nonzero(np.abs(sums) >= threshold) / sums.size)
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be positive, got {n_resamples}")
    rng = np.random.default_rng(seed)
    chunk = max(1, _CHUNK_ELEMENTS // m)
    count = 0
    for start in range(0, n_resamples, chunk):
        flips = rng.integers(0, 2, size=(min(chunk, n_resamples - start), m), dtype=bool)
        sums = np.where(flips, -differences, differences).sum(axis=1)
        count += int(np.count_nonzero(np.abs(sums) >= threshold))
    return (count + 1) / (n_resamples + 1)


def wilcoxon_test(a: ArrayLike, b: ArrayLike, *, clusters: ArrayLike | None = None) -> float:
    """Two-sided Wilcoxon signed-rank test (scipy defaults: zero differences dropped); with `clusters`,
    of the clusters' summed differences."""
    a, b = _paired(a, b)
    if clusters is not None:
        a, b = cluster_sums(a - b, clusters), np.zeros(int(cluster_codes(clusters, a.size).max()) + 1)
    if np.all(a == b):
        return 1.0  # scipy warns and divides by zero here; no evidence of a difference is p = 1
    from scipy import stats  # ~1 s to import; only this test needs it

    return float(stats.wilcoxon(a, b, alternative="two-sided").pvalue)


def holm(pvalues: ArrayLike) -> np.ndarray:
    """Holm step-down adjusted p-values, in the input order, monotone in the raw order, capped at 1."""
    pvalues = np.asarray(pvalues, dtype=float)
    if pvalues.ndim != 1:
        raise ValueError(f"pvalues must be 1-D, got shape {pvalues.shape}")
    if np.any(np.isnan(pvalues)) or np.any((pvalues < 0) | (pvalues > 1)):
        raise ValueError("pvalues must be in [0, 1]")
    m = pvalues.size
    order = np.argsort(pvalues, kind="stable")
    stepped = np.maximum.accumulate((m - np.arange(m)) * pvalues[order])
    adjusted = np.empty(m)
    adjusted[order] = np.minimum(stepped, 1.0)
    return adjusted


def win_tie_loss(a: ArrayLike, b: ArrayLike, *, tol: float = 1e-12) -> tuple[int, int, int]:
    """Queries where `a` beats `b` by more than `tol`, is within `tol`, and loses by more than `tol`."""
    a, b = _paired(a, b)
    differences = a - b
    wins = int(np.count_nonzero(differences > tol))
    losses = int(np.count_nonzero(differences < -tol))
    return wins, differences.size - wins - losses, losses


def compare(
    runs: Mapping[str, ArrayLike],
    baseline: str,
    *,
    test: Test = "randomization",
    alpha: float = 0.05,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
    clusters: ArrayLike | None = None,
    unit: Unit = "auto",
) -> pd.DataFrame:
    """One metric, every run against `baseline`: one row per run, baseline first.

    `runs` maps a run name to its per-query values, all aligned by query (pandas Series must share
    the baseline's index). Columns: mean, ci_low, ci_high (CI of the mean), delta, delta_ci_low,
    delta_ci_high (CI of the mean paired difference), p_value (the paired `test`), p_holm (Holm across
    the variants in this call), significant (p_holm < alpha), min_p (the smallest p-value the sign-flip
    test can give on this many units, clusters or queries: 2 / 2**G exact, 1 / (n_resamples + 1)
    resampled), and wins, ties, losses per query. By query the CIs are percentile bootstraps; by cluster
    they are calibrated for few clusters: the mean's is `cluster_mean_ci` (CR2 t), the difference's
    `cluster_delta_ci` (the inverted sign-flip test: it excludes 0 exactly when the randomization test
    rejects at 1 - confidence, and is unbounded when no p-value can get that small). The baseline row
    has delta 0 and no p-value. Every run uses the same seed, so a run's numbers do not depend on which
    other runs are compared. Test, correction and alpha are recorded in `.attrs`. To correct across
    several metrics of one report, pass all their p_value columns to `holm()` together.

    `clusters` (one label per query, aligned like the values; a Series is aligned by index) and `unit`
    (see `resolve_unit`) choose what the bootstrap and the test resample. Two more columns say what the
    clustering costs: n_clusters, and design_effect (of the paired differences; of the values for the
    baseline row). `.attrs` records the unit, why (`unit_reason`), the number of clusters and a warning
    when fewer than FEW_CLUSTERS clusters carry a cluster-level comparison or one cluster holds every
    query (then also issued as a UserWarning: the statistics fall back to the query level).
    """
    if baseline not in runs:
        raise KeyError(f"baseline {baseline!r} is not among the runs {sorted(runs)}")
    if test not in ("randomization", "wilcoxon"):
        raise ValueError(f"unknown test {test!r}; use 'randomization' or 'wilcoxon'")
    reference = runs[baseline]
    for name, values in runs.items():
        if isinstance(values, pd.Series) and isinstance(reference, pd.Series):
            if not values.index.equals(reference.index):
                raise ValueError(f"run {name!r} is not aligned by query with baseline {baseline!r}")
    base = _values(reference, baseline)
    if isinstance(clusters, pd.Series) and isinstance(reference, pd.Series):
        clusters = clusters.reindex(reference.index)
    labels = clusters
    if clusters is not None:
        clusters = cluster_codes(clusters, base.size)
    chosen, reason = unit_choice(unit, clusters, base.size)
    warning = unit_warning(chosen, labels, base.size)
    if warning and chosen == "query":
        warn_once(warning)
    resampled = clusters if chosen == "cluster" else None
    n_clusters = int(clusters.max()) + 1 if clusters is not None else base.size
    names = [baseline] + [name for name in runs if name != baseline]
    rows = []
    for name in names:
        values = _values(runs[name], name)
        if values.shape != base.shape:
            raise ValueError(f"run {name!r} has {values.size} values, baseline has {base.size}")
        differences = values - base
        if resampled is None:
            low, high = bootstrap_ci(values, confidence=confidence, n_resamples=n_resamples, seed=seed)
            delta_low, delta_high = bootstrap_ci(
                differences, confidence=confidence, n_resamples=n_resamples, seed=seed
            )
            units = base.size
        else:
            low, high = cluster_mean_ci(values, resampled, confidence=confidence)
            delta_low, delta_high = cluster_delta_ci(
                differences, resampled, confidence=confidence, n_resamples=n_resamples, seed=seed
            )
            units = n_clusters
        if name == baseline:
            p_value = np.nan
        elif test == "randomization":
            p_value = paired_randomization_test(
                values, base, n_resamples=n_resamples, seed=seed, clusters=resampled
            )
        else:
            p_value = wilcoxon_test(values, base, clusters=resampled)
        wins, ties, losses = win_tie_loss(values, base)
        rows.append(
            dict(
                mean=float(values.mean()),
                ci_low=low,
                ci_high=high,
                delta=float(differences.mean()),
                delta_ci_low=delta_low,
                delta_ci_high=delta_high,
                p_value=p_value,
                wins=wins,
                ties=ties,
                losses=losses,
                n_clusters=n_clusters,
                design_effect=(
                    design_effect(values if name == baseline else differences, clusters)
                    if clusters is not None
                    else 1.0
                ),
                min_p=np.nan if name == baseline else smallest_p(units, n_resamples=n_resamples),
            )
        )
    table = pd.DataFrame(rows, index=pd.Index(names, name="run"))
    variants = table.index != baseline
    table.insert(7, "p_holm", np.nan)
    table.loc[variants, "p_holm"] = holm(table.loc[variants, "p_value"].to_numpy())
    table.insert(8, "significant", variants & (table["p_holm"].to_numpy() < alpha))
    table.attrs.update(
        baseline=baseline, test=test, correction="holm", alpha=alpha, confidence=confidence,
        unit=chosen, unit_reason=reason, n_clusters=n_clusters, warning=warning,
    )  # fmt: skip
    return table
