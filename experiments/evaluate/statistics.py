"""Statistics over per-query metric values: bootstrap CIs, paired tests, Holm, win/tie/loss.

Sits after the metrics in the data flow: `experiments.evaluate.metrics` turns a run into one value per query,
and the functions here turn those 1-D arrays (aligned by query, one array per run) into the numbers
the gate and the reports print. `compare()` is the one-call building block: a baseline and its
variants for one metric in, a table with means, CIs, deltas, p-values (raw and Holm-adjusted) and
per-query win/tie/loss counts out.

Determinism: every random draw comes from a `numpy.random.Generator` seeded by the caller, sums are
numpy's own single-threaded reductions, a resample mean is one BLAS dot product (its own row, whatever
the thread count), and chunk sizes depend only on the input size, so the same inputs and seed give
bit-identical results in any process, on one core or many (tests/test_statistics.py runs it with 1 and 2
BLAS threads). Another CPU's BLAS kernels may round a bound's last bit differently.
"""

from __future__ import annotations

import functools
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
# Resamples per block of the mean products: 256 x 179 queries is 0.4 MB, read from cache by every column
# after the first (~1.7x faster than each column streaming the whole 14 MB count matrix; a mean is its own
# row's dot product, so the block size does not change it: tests/test_statistics.py).
_BLOCK_ROWS = 256
# Bootstrap intervals of means already computed in this process (values, resamples, seed, confidence): the
# last 512 are kept (bootstrap_cis).
_MEAN_CIS: OrderedDict[tuple, ConfidenceInterval] = OrderedDict()
_MEAN_CIS_KEPT = 512
# Exact sign-flip enumeration costs 2**m floats for m non-zero differences: 2**20 is 8 MB and ~10 ms.
EXACT_MAX_N = 20
# Two test statistics closer than this (relative to the sum of |differences|) are the same value:
# sign-flipped sums are added in a different order than the observed one, so exact ties
# (common with discrete metrics such as hit@k) would otherwise be split by rounding.
_TIE_RTOL = 1e-9

Test = Literal["randomization", "wilcoxon"]
# How reports name each test.
TEST_NAMES = {
    "randomization": "paired two-sided sign-flip randomization test (exact when at most 20 queries differ, "
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


def bootstrap_ci(
    values: ArrayLike,
    *,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
    statistic: Callable[..., np.ndarray] = np.mean,
) -> ConfidenceInterval:
    """Percentile bootstrap confidence interval of `statistic` over queries.

    `statistic` must reduce along an `axis` keyword (as numpy's do); it is called on a
    (chunk, n) array of resampled values with `axis=-1`.
    """
    (interval,) = bootstrap_cis(
        {"values": values}, confidence=confidence, n_resamples=n_resamples, seed=seed, statistic=statistic
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
) -> dict[str, ConfidenceInterval]:
    """`bootstrap_ci` of several metrics over the same queries, sharing one set of resample draws.

    Each column's interval equals `bootstrap_ci(column, seed=seed)` (the draws are the same), at the
    cost of one draw instead of one per metric.
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


def paired_randomization_test(
    a: ArrayLike,
    b: ArrayLike,
    *,
    n_resamples: int = 10_000,
    seed: int = 0,
    exact_max_n: int = EXACT_MAX_N,
) -> float:
    """Two-sided sign-flip permutation test of mean(a - b) == 0 over paired per-query values.

    Under the null each query's difference is equally likely to have either sign. Zero differences
    are the same under both signs, so they are left out of the enumeration (the p-value does not
    change). With m <= `exact_max_n` non-zero differences all 2**m sign patterns are enumerated and
    the p-value is exact; otherwise `n_resamples` random patterns are drawn from a Generator seeded
    with `seed` and p = (count + 1) / (n_resamples + 1), which counts the observed pattern and so is
    never zero.
    """
    a, b = _paired(a, b)
    differences = a - b
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


def wilcoxon_test(a: ArrayLike, b: ArrayLike) -> float:
    """Two-sided Wilcoxon signed-rank test (scipy defaults: zero differences dropped)."""
    a, b = _paired(a, b)
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
) -> pd.DataFrame:
    """One metric, every run against `baseline`: one row per run, baseline first.

    `runs` maps a run name to its per-query values, all aligned by query (pandas Series must share
    the baseline's index). Columns: mean, ci_low, ci_high (bootstrap CI of the mean), delta,
    delta_ci_low, delta_ci_high (bootstrap CI of the mean paired difference), p_value (the paired
    `test`), p_holm (Holm across the variants in this call), significant (p_holm < alpha), and
    wins, ties, losses per query. The baseline row has delta 0 and no p-value. Every run uses the
    same seed, so a run's numbers do not depend on which other runs are compared. Test, correction
    and alpha are recorded in `.attrs`. To correct across several metrics of one report, pass all
    their p_value columns to `holm()` together.
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
    names = [baseline] + [name for name in runs if name != baseline]
    rows = []
    for name in names:
        values = _values(runs[name], name)
        if values.shape != base.shape:
            raise ValueError(f"run {name!r} has {values.size} values, baseline has {base.size}")
        low, high = bootstrap_ci(values, confidence=confidence, n_resamples=n_resamples, seed=seed)
        differences = values - base
        delta_low, delta_high = bootstrap_ci(
            differences, confidence=confidence, n_resamples=n_resamples, seed=seed
        )
        if name == baseline:
            p_value = np.nan
        elif test == "randomization":
            p_value = paired_randomization_test(values, base, n_resamples=n_resamples, seed=seed)
        else:
            p_value = wilcoxon_test(values, base)
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
            )
        )
    table = pd.DataFrame(rows, index=pd.Index(names, name="run"))
    variants = table.index != baseline
    table.insert(7, "p_holm", np.nan)
    table.loc[variants, "p_holm"] = holm(table.loc[variants, "p_value"].to_numpy())
    table.insert(8, "significant", variants & (table["p_holm"].to_numpy() < alpha))
    table.attrs.update(baseline=baseline, test=test, correction="holm", alpha=alpha, confidence=confidence)
    return table
