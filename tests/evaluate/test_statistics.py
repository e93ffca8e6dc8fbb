"""Specification of experiments.evaluate.statistics, checked against scipy on known inputs."""

import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from experiments.evaluate.statistics import (
    ConfidenceInterval,
    bootstrap_ci,
    cluster_delta_ci,
    cluster_mean_ci,
    compare,
    design_effect,
    holm,
    mean_variance,
    minimum_detectable_effect,
    paired_randomization_test,
    resolve_unit,
    wilcoxon_test,
    win_tie_loss,
)
from tests.support import REPO


def _mean_difference(x, y, axis=-1):
    return np.mean(x - y, axis=axis)


def _scipy_paired_p(a, b, n_resamples=np.inf):
    result = stats.permutation_test(
        (a, b),
        _mean_difference,
        permutation_type="samples",
        alternative="two-sided",
        vectorized=True,
        n_resamples=n_resamples,
        rng=np.random.default_rng(1),
    )
    return result.pvalue


@pytest.fixture
def scores():
    """Per-query values of two runs on 60 queries: a small true improvement plus noise."""
    rng = np.random.default_rng(42)
    base = rng.beta(2, 3, size=60)
    return base, np.clip(base + rng.normal(0.03, 0.1, size=60), 0, 1)


@pytest.mark.parametrize("statistic", [np.mean, np.median])
def test_bootstrap_ci_agrees_with_scipy_percentile_bootstrap(scores, statistic):
    values = scores[0]
    low, high = bootstrap_ci(values, statistic=statistic, n_resamples=20_000, seed=3)
    reference = stats.bootstrap(
        (values,), statistic, method="percentile", n_resamples=20_000, rng=np.random.default_rng(7)
    ).confidence_interval
    width = reference.high - reference.low
    # Two independent Monte Carlo estimates of the same percentiles: a few % of the width apart at most.
    assert low == pytest.approx(reference.low, abs=0.05 * width)
    assert high == pytest.approx(reference.high, abs=0.05 * width)


def test_bootstrap_ci_confidence_level_sets_the_width(scores):
    wide = bootstrap_ci(scores[0], confidence=0.99)
    narrow = bootstrap_ci(scores[0], confidence=0.80)
    assert isinstance(wide, ConfidenceInterval)
    assert wide.low < narrow.low < scores[0].mean() < narrow.high < wide.high


def test_bootstrap_ci_of_constant_values_is_a_point():
    assert bootstrap_ci(np.full(30, 0.25)) == (0.25, 0.25)


@pytest.mark.parametrize("discrete", [False, True])
def test_exact_randomization_p_equals_scipy_exact_permutation_test(discrete):
    rng = np.random.default_rng(5)
    if discrete:  # hit@k-like values: many zero differences and exactly tied signed sums
        a, b = rng.integers(0, 3, size=14) / 2, rng.integers(0, 3, size=14) / 2
    else:
        a, b = rng.random(12), rng.random(12) * 0.8
    p = paired_randomization_test(a, b)
    assert p == pytest.approx(_scipy_paired_p(a, b), rel=1e-12)
    assert p < 1.0


def test_exact_p_is_a_count_over_all_sign_patterns():
    rng = np.random.default_rng(8)
    a, b = rng.random(15), rng.random(15)
    p = paired_randomization_test(a, b, n_resamples=7)  # exact path ignores n_resamples
    assert (p * 2**15) == pytest.approx(round(p * 2**15), abs=1e-6)


def test_zero_differences_do_not_change_the_randomization_p():
    rng = np.random.default_rng(9)
    a, b = rng.random(10), rng.random(10)
    tied = rng.random(25)
    with_ties = paired_randomization_test(np.concatenate([a, tied]), np.concatenate([b, tied]))
    assert with_ties == paired_randomization_test(a, b)


def test_monte_carlo_p_is_close_to_exact_for_moderate_n():
    rng = np.random.default_rng(11)
    b = rng.random(20)
    a = b + rng.normal(0.1, 0.15, size=20)
    exact = paired_randomization_test(a, b, exact_max_n=20)
    monte_carlo = paired_randomization_test(a, b, exact_max_n=0, n_resamples=40_000, seed=1)
    assert 0.01 < exact < 0.5  # a p-value where the comparison is informative
    assert monte_carlo == pytest.approx(exact, abs=4 * np.sqrt(exact * (1 - exact) / 40_000) + 1e-4)
    assert monte_carlo == pytest.approx(_scipy_paired_p(a, b, n_resamples=40_000), abs=0.01)


def test_clear_shift_gives_the_smallest_monte_carlo_p():
    rng = np.random.default_rng(12)
    b = rng.random(300)
    a = b + 0.2 + rng.normal(0, 0.05, size=300)
    # (count + 1) / (n_resamples + 1): no random pattern is as extreme, and p is never 0.
    assert paired_randomization_test(a, b, n_resamples=999) == 1 / 1000
    assert wilcoxon_test(a, b) < 1e-40


def test_wilcoxon_equals_scipy(scores):
    base, variant = scores
    assert wilcoxon_test(variant, base) == stats.wilcoxon(variant, base).pvalue
    small_a, small_b = variant[:15], base[:15]  # exact distribution path in scipy
    assert wilcoxon_test(small_a, small_b) == stats.wilcoxon(small_a, small_b).pvalue


def test_identical_runs_give_p_one_and_all_ties():
    values = np.random.default_rng(13).random(40)
    assert paired_randomization_test(values, values.copy()) == 1.0
    assert paired_randomization_test(values, values.copy(), exact_max_n=0) == 1.0
    assert wilcoxon_test(values, values.copy()) == 1.0
    assert win_tie_loss(values, values.copy()) == (0, 40, 0)


def test_win_tie_loss_counts_each_query_once_with_tolerance():
    a = np.array([0.5, 0.5, 0.3, 1.0, 0.2 + 1e-15])
    b = np.array([0.4, 0.5, 0.6, 0.0, 0.2])
    assert win_tie_loss(a, b) == (2, 2, 1)
    assert win_tie_loss(b, a) == (1, 2, 2)


def test_holm_on_a_textbook_example():
    # Sorted: 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, then 0.04*1 raised to 0.06 by monotonicity.
    adjusted = holm([0.01, 0.04, 0.03, 0.005])
    np.testing.assert_allclose(adjusted, [0.03, 0.06, 0.06, 0.02], rtol=1e-12)
    np.testing.assert_array_equal(holm([0.5, 0.8]), [1.0, 1.0])
    assert holm([]).size == 0


def test_holm_matches_its_definition_on_random_pvalues():
    p = np.random.default_rng(14).random(12) ** 3
    m = p.size
    order = np.argsort(p)
    expected = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        expected[i] = running
    np.testing.assert_allclose(holm(p), expected, rtol=1e-12)
    assert np.all(holm(p) >= p)


def test_same_seed_gives_identical_results_and_another_seed_does_not(scores):
    base, variant = scores
    run = lambda seed: (  # noqa: E731
        bootstrap_ci(variant, seed=seed),
        paired_randomization_test(variant, base, exact_max_n=0, seed=seed),
    )
    assert run(0) == run(0)
    assert run(0) != run(1)


_SUBPROCESS_SCRIPT = """
import numpy as np
from experiments.evaluate.statistics import bootstrap_ci, paired_randomization_test
rng = np.random.default_rng(42)
base = rng.beta(2, 3, size=60)
variant = np.clip(base + rng.normal(0.03, 0.1, size=60), 0, 1)
big = rng.random(2000)  # large enough for BLAS to split its matrix-vector products across threads
print(repr((bootstrap_ci(variant, seed=0), paired_randomization_test(variant, base, exact_max_n=0))))
print(repr(bootstrap_ci(big, seed=0)))
"""


@pytest.mark.parametrize("threads", ["1", "2"])
def test_results_are_identical_in_a_fresh_process_with_any_thread_count(scores, threads):
    base, variant = scores
    big = np.random.default_rng(42)
    big.beta(2, 3, size=60), big.normal(0.03, 0.1, size=60)  # the script's draws, in its order
    here = repr((bootstrap_ci(variant, seed=0), paired_randomization_test(variant, base, exact_max_n=0)))
    here += "\n" + repr(bootstrap_ci(big.random(2000), seed=0))
    env = dict(os.environ, OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    there = subprocess.run(
        [sys.executable, "-c", _SUBPROCESS_SCRIPT],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert there == here


def test_compare_tabulates_every_run_against_the_baseline(scores):
    base, better = scores
    rng = np.random.default_rng(15)
    noise = base + rng.normal(0, 0.01, 60)
    runs = {"bm25": base, "same": base.copy(), "better": better + 0.1, "noise": noise}
    before = {name: values.copy() for name, values in runs.items()}
    table = compare(runs, baseline="bm25", n_resamples=2_000)

    assert list(table.index) == ["bm25", "same", "better", "noise"]
    assert list(table.columns) == [
        "mean",
        "ci_low",
        "ci_high",
        "delta",
        "delta_ci_low",
        "delta_ci_high",
        "p_value",
        "p_holm",
        "significant",
        "wins",
        "ties",
        "losses",
        "n_clusters",
        "design_effect",
        "min_p",
    ]
    assert table.attrs["unit"] == "query"  # no clusters given: every query is its own unit
    assert np.isnan(table.loc["bm25", "p_value"]) and not table.loc["bm25", "significant"]
    assert table.loc["same", "p_value"] == 1.0
    assert table.loc["same", ["wins", "ties", "losses"]].tolist() == [0, 60, 0]
    assert table.loc["better", "significant"] and table.loc["better", "delta_ci_low"] > 0
    assert table.loc["better", "delta"] == pytest.approx(runs["better"].mean() - base.mean())
    variants = table.index != "bm25"
    np.testing.assert_array_equal(table.loc[variants, "p_holm"], holm(table.loc[variants, "p_value"]))
    assert (table["significant"] == (table["p_holm"] < 0.05)).all()
    assert (table[["wins", "ties", "losses"]].sum(axis=1) == 60).all()
    assert table.loc["noise", "ci_low"] < table.loc["noise", "mean"] < table.loc["noise", "ci_high"]
    assert table.attrs["test"] == "randomization" and table.attrs["correction"] == "holm"
    assert all(np.array_equal(runs[name], before[name]) for name in runs)  # inputs untouched


def test_compare_with_wilcoxon_uses_scipy_wilcoxon(scores):
    base, variant = scores
    table = compare({"base": base, "variant": variant}, baseline="base", test="wilcoxon", n_resamples=500)
    assert table.loc["variant", "p_value"] == stats.wilcoxon(variant, base).pvalue
    assert table.loc["variant", "p_holm"] == table.loc["variant", "p_value"]  # one comparison: no adjustment


def test_a_run_numbers_do_not_depend_on_the_other_runs(scores):
    base, variant = scores
    alone = compare({"b": base, "v": variant}, baseline="b", n_resamples=1_000)
    crowded = compare({"b": base, "x": base[::-1].copy(), "v": variant}, baseline="b", n_resamples=1_000)
    cols = ["mean", "ci_low", "ci_high", "delta_ci_low", "delta_ci_high", "p_value"]
    assert alone.loc["v", cols].tolist() == crowded.loc["v", cols].tolist()


def test_misaligned_or_bad_values_are_rejected():
    with pytest.raises(ValueError, match="aligned"):
        paired_randomization_test(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="NaN"):
        bootstrap_ci([0.1, np.nan])
    with pytest.raises(ValueError, match="non-empty"):
        bootstrap_ci([])
    with pytest.raises(KeyError):
        compare({"a": np.ones(3)}, baseline="b")
    a = pd.Series([0.1, 0.2], index=["q1", "q2"])
    b = pd.Series([0.1, 0.2], index=["q2", "q1"])
    with pytest.raises(ValueError, match="aligned"):
        compare({"a": a, "b": b}, baseline="a")


def test_bootstrap_cis_shares_draws_and_equals_bootstrap_ci_per_column():
    from experiments.evaluate.statistics import bootstrap_cis

    rng = np.random.default_rng(3)
    columns = {"R@10": rng.random(57), "nDCG@10": rng.random(57) ** 2}
    together = bootstrap_cis(columns, seed=11)
    for name, values in columns.items():
        assert together[name] == bootstrap_ci(values, seed=11)
    with pytest.raises(ValueError, match="one value per query"):
        bootstrap_cis({"a": rng.random(3), "b": rng.random(4)})


def test_bootstrap_cis_reuses_an_interval_only_for_the_same_values_draws_and_confidence():
    from experiments.evaluate import statistics
    from experiments.evaluate.statistics import bootstrap_cis

    rng = np.random.default_rng(5)
    values = rng.random(41)
    statistics._MEAN_CIS.clear()
    fresh = bootstrap_cis({"a": values}, seed=2)["a"]
    assert len(statistics._MEAN_CIS) == 1
    assert bootstrap_cis({"b": values.copy(), "c": values**2}, seed=2)["b"] == fresh  # reused
    assert len(statistics._MEAN_CIS) == 2  # only the new column was computed
    changed = values.copy()
    changed[0] += 1e-12
    for other in (
        bootstrap_cis({"a": changed}, seed=2)["a"],
        bootstrap_cis({"a": values}, seed=3)["a"],
        bootstrap_cis({"a": values}, seed=2, confidence=0.9)["a"],
    ):
        assert other != fresh
    statistics._MEAN_CIS.clear()
    assert bootstrap_cis({"a": values}, seed=2)["a"] == fresh  # computed again: the same interval


def test_bootstrap_means_do_not_depend_on_the_block_of_resamples_they_are_computed_in():
    from experiments.evaluate.statistics import _BLOCK_ROWS, _counts_cached, bootstrap_cis

    rng = np.random.default_rng(5)
    n = 179
    columns = {f"m{i}": rng.random(n) for i in range(3)}
    counts = np.concatenate(list(_counts_cached(n, 10_000, 0).values()))
    assert len(counts) > 3 * _BLOCK_ROWS  # several blocks, and a short last one
    got = bootstrap_cis(columns, seed=0)
    for name, values in columns.items():
        whole = (counts @ values) / n  # every resample mean from one product over the whole matrix
        assert got[name] == tuple(np.quantile(whole, [0.025, 0.975]))


# Cluster-aware statistics: whole clusters (conversations) are resampled and sign-flipped.


def _clustered(n_clusters=12, size=8, icc=0.5, shift=0.0, seed=5):
    """Per-query values of two runs, queries grouped in equal clusters sharing a random effect."""
    rng = np.random.default_rng(seed)
    clusters = np.repeat([f"conv-{c}" for c in range(n_clusters)], size)

    def run():
        effect = np.repeat(rng.normal(0, np.sqrt(icc), n_clusters), size)
        return effect + rng.normal(0, np.sqrt(1 - icc), n_clusters * size)

    return run(), run() + shift, clusters


def test_cluster_bootstrap_with_one_query_per_cluster_is_the_query_bootstrap(scores):
    values = scores[0]
    singletons = [f"q{i}" for i in range(values.size)]
    assert bootstrap_ci(values, seed=4, clusters=singletons) == bootstrap_ci(values, seed=4)


def test_cluster_bootstrap_is_wider_than_the_query_bootstrap_on_clustered_values():
    a, _, clusters = _clustered(icc=0.8)
    query_low, query_high = bootstrap_ci(a, seed=1)
    cluster_low, cluster_high = bootstrap_ci(a, seed=1, clusters=clusters)
    assert cluster_high - cluster_low > 1.5 * (query_high - query_low)
    assert cluster_low < a.mean() < cluster_high


def test_cluster_sign_flip_test_is_the_paired_test_on_cluster_means():
    a, b, clusters = _clustered(n_clusters=10, size=6, shift=0.3)
    means_a = pd.Series(a).groupby(clusters).mean().to_numpy()
    means_b = pd.Series(b).groupby(clusters).mean().to_numpy()
    # Equal cluster sizes: flipping cluster sums is scipy's exact paired permutation test of cluster means.
    expected = _scipy_paired_p(means_a, means_b)
    assert paired_randomization_test(a, b, clusters=clusters) == pytest.approx(expected, rel=1e-12)
    assert paired_randomization_test(a, b, clusters=clusters) > paired_randomization_test(a, b)


def test_variance_of_the_mean_with_singleton_clusters_is_the_independent_one(scores):
    values = scores[0]
    independent = values.var(ddof=1) / values.size
    assert mean_variance(values) == pytest.approx(independent, rel=1e-12)
    assert mean_variance(values, np.arange(values.size)) == pytest.approx(independent, rel=1e-12)
    assert design_effect(values, np.arange(values.size)) == pytest.approx(1.0, rel=1e-12)


def test_design_effect_of_values_constant_within_clusters():
    # Every query of a cluster has the cluster's value: n queries are worth C, deff = (n - 1) / (C - 1).
    rng = np.random.default_rng(0)
    clusters = np.repeat(np.arange(9), 7)
    values = rng.random(9)[clusters]
    assert design_effect(values, clusters) == pytest.approx((63 - 1) / (9 - 1), rel=1e-12)


def test_unit_auto_clusters_only_when_some_cluster_holds_several_queries():
    assert resolve_unit("auto", None, 10) == "query"
    assert resolve_unit("auto", ["a"] * 10, 10) == "query"  # one cluster: nothing to resample
    assert resolve_unit("auto", list("abcdefghij"), 10) == "query"  # one query per cluster
    assert resolve_unit("auto", list("aabbccddee"), 10) == "cluster"
    assert resolve_unit("query", list("aabbccddee"), 10) == "query"
    with pytest.raises(ValueError, match="needs each query's cluster"):
        resolve_unit("cluster", None, 10)
    with pytest.raises(ValueError, match="unknown statistics unit"):
        resolve_unit("conversation", None, 10)


def test_compare_by_cluster_reports_clusters_design_effect_and_few_cluster_warning():
    a, b, clusters = _clustered(n_clusters=6, size=10, icc=0.6)
    table = compare({"base": a, "variant": b}, "base", clusters=clusters, n_resamples=2_000)
    assert table.attrs["unit"] == "cluster" and table.attrs["n_clusters"] == 6
    assert "only 6 clusters" in table.attrs["warning"]
    assert table.loc["variant", "design_effect"] == pytest.approx(design_effect(b - a, clusters))
    assert table.loc["variant", "p_value"] == paired_randomization_test(b, a, clusters=clusters)
    by_query = compare({"base": a, "variant": b}, "base", clusters=clusters, unit="query", n_resamples=2_000)
    assert by_query.attrs["unit"] == "query" and by_query.attrs["warning"] is None
    assert by_query.loc["variant", "p_value"] == paired_randomization_test(b, a, n_resamples=2_000)


def test_minimum_detectable_effect_grows_with_the_design_effect():
    a, _, clusters = _clustered(n_clusters=20, size=20, icc=0.5)
    independent = minimum_detectable_effect(a)
    clustered = minimum_detectable_effect(a, clusters)
    # (t + t) * SE: SE grows by sqrt(deff); the t quantiles grow too (19 df instead of 399).
    assert clustered > independent * np.sqrt(design_effect(a, clusters)) * 0.99
    t = stats.t.ppf(0.975, 19) + stats.t.ppf(0.8, 19)
    assert clustered == pytest.approx(t * np.sqrt(mean_variance(a, clusters)), rel=1e-12)
    # From already-paired differences, the variance is used as it is.
    assert minimum_detectable_effect(a, clusters, correlation=None) == pytest.approx(clustered, rel=1e-12)
    assert minimum_detectable_effect(a, clusters, correlation=0.75) == pytest.approx(
        clustered * np.sqrt(0.5), rel=1e-12
    )


def _t_interval_of_cluster_means(values, clusters):
    means = pd.Series(values).groupby(clusters).mean().to_numpy()
    return stats.t.interval(0.95, means.size - 1, loc=means.mean(), scale=stats.sem(means))


def test_cluster_mean_ci_with_equal_sizes_is_the_t_interval_of_the_cluster_means():
    a, _, clusters = _clustered(n_clusters=7, size=9, icc=0.4)
    assert cluster_mean_ci(a, clusters) == pytest.approx(_t_interval_of_cluster_means(a, clusters), rel=1e-12)
    # Unequal sizes: Bell-McCaffrey df fall below G - 1, so the interval is wider than a t(G-1) one.
    uneven = np.repeat(np.arange(7), [1, 2, 3, 5, 8, 13, 31])
    low, high = cluster_mean_ci(a, uneven)
    g = 7
    sizes = np.bincount(uneven).astype(float)
    residual = np.bincount(uneven, weights=a - a.mean())
    se = np.sqrt((residual**2 / (1 - sizes / a.size)).sum()) / a.size
    assert (high - low) / 2 > stats.t.ppf(0.975, g - 1) * se


@pytest.mark.parametrize("n_clusters", [8, 30])  # exact enumeration, and seeded resamples
def test_cluster_delta_ci_excludes_a_shift_exactly_when_the_sign_flip_test_rejects_it(n_clusters):
    a, b, clusters = _clustered(n_clusters=n_clusters, size=5, icc=0.5, shift=0.2)
    low, high = cluster_delta_ci(b - a, clusters, n_resamples=2_000, seed=3)
    assert low < (b - a).mean() < high
    eps = 1e-6 * (high - low)

    def p(shift):
        return paired_randomization_test(b - shift, a, clusters=clusters, n_resamples=2_000, seed=3)

    assert p(low - eps) <= 0.05 < p(low + eps)
    assert p(high + eps) <= 0.05 < p(high - eps)


def test_compare_by_cluster_prints_the_calibrated_intervals_and_the_smallest_attainable_p():
    a, b, clusters = _clustered(n_clusters=12, size=10, icc=0.5, shift=0.2)
    table = compare({"base": a, "variant": b}, "base", clusters=clusters, n_resamples=2_000)
    row = table.loc["variant"]
    assert (row["delta_ci_low"], row["delta_ci_high"]) == cluster_delta_ci(b - a, clusters, n_resamples=2_000)
    assert (row["ci_low"], row["ci_high"]) == cluster_mean_ci(b, clusters)
    assert row["min_p"] == 2 / 2**12 and table.attrs["unit_reason"].startswith("12 clusters")


def test_with_five_clusters_no_difference_is_significant_and_the_interval_says_so():
    a, b, clusters = _clustered(n_clusters=5, size=40, icc=0.1, shift=5.0)  # a huge true shift
    table = compare({"base": a, "variant": b}, "base", clusters=clusters, n_resamples=2_000)
    row = table.loc["variant"]
    assert row["p_value"] == row["min_p"] == 2 / 2**5  # the smallest p five clusters can give: > 0.05
    assert not row["significant"]
    assert row["delta_ci_low"] == -np.inf and row["delta_ci_high"] == np.inf
    assert "can never reach p < 0.05" in table.attrs["warning"]
    assert table.loc["base", ["delta_ci_low", "delta_ci_high"]].tolist() == [0.0, 0.0]


def test_one_cluster_falls_back_to_query_statistics_with_a_warning():
    a, b, _ = _clustered(n_clusters=4, size=10)
    one = ["conv-1"] * a.size
    with pytest.warns(UserWarning, match="one cluster"):
        table = compare({"base": a, "variant": b}, "base", clusters=one, n_resamples=2_000)
    assert table.attrs["unit"] == "query"
    assert "one cluster" in table.attrs["unit_reason"] and "too narrow" in table.attrs["warning"]
