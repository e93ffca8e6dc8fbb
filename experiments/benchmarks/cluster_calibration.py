"""Calibration by simulation: do the cluster test and the cluster intervals say "significant" at the rate
they claim when there is no true difference, with few and unequal conversations?

    .venv/bin/python -m experiments.benchmarks.cluster_calibration    # 1,000 replications, writes the report
    .venv/bin/python -m experiments.benchmarks.cluster_calibration --replications 200 --out outputs/calib

Suites shaped like memory benchmarks: G conversations (5 x 40, 10 x 30, 20 x 20, 20 of unequal sizes drawn
from 1-120 in each replication, 50 x 4 questions) and an intra-cluster correlation (ICC) of 0.1, 0.3 or 0.5.
A query's paired difference is a conversation effect (variance ICC) plus query noise (variance 1 - ICC),
so the differences have SD 1. For each setting and each seeded replication, with no true difference:

- the cluster sign-flip test (`paired_randomization_test` with clusters) at alpha: its false-positive rate;
- whether each 95% interval of the mean difference excludes 0: the inverted sign-flip test that memeval
  reports (`sign_flip_bounds`), the CR2 t-interval with Bell-McCaffrey df (`cluster_mean_ci`'s method) and
  the percentile cluster bootstrap memeval used before (shown for the record: too narrow with few clusters);

and the same with a true shift of 0.5 SD (power), and the design effect of the differences (mean, and the
share of replications where it is below 1, which memeval warns about). Acceptance (issue 33): the test
and the reported interval within 0.03-0.07 for G >= 10 and at most 0.07 for G = 5. Writes
OUT/cluster_calibration.md and .json. The intervals are computed for all replications of a setting at
once (numpy); the test runs per replication as memeval runs it, exact up to 2^10 sign patterns and with
2,000 seeded resamples beyond (memeval enumerates up to 2^20: both are exact-size tests, so their
calibration is the same).
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass

import numpy as np

from experiments.benchmarks.simulation_report import arguments, command_line, write
from experiments.evaluate.statistics import (
    _cr2_t,
    design_effect,
    paired_randomization_test,
    sign_flip_bounds,
    sign_flip_patterns,
)

ACCEPTED = (0.03, 0.07)  # the band for G >= 10; at most the upper bound for G = 5
# (label, clusters, questions per cluster; 0 = unequal sizes drawn from 1-120 per replication)
DESIGNS = (("5 x 40", 5, 40), ("10 x 30", 10, 30), ("20 x 20", 20, 20), ("20, unequal 1-120", 20, 0),
           ("50 x 4", 50, 4))  # fmt: skip
ICCS = (0.1, 0.3, 0.5)
EFFECT = 0.5  # the true shift for power, in SDs of the per-query difference


@dataclass(frozen=True)
class Setting:
    design: str
    n_clusters: int
    icc: float
    replications: int
    test_fpr: float  # cluster sign-flip test, p < alpha, no true difference
    signflip_ci_excludes_0: float  # the interval memeval reports
    cr2_t_ci_excludes_0: float
    bootstrap_ci_excludes_0: float  # the percentile cluster bootstrap memeval reported before
    test_power: float  # the same with a true shift of EFFECT
    signflip_ci_power: float
    cr2_t_ci_power: float
    mean_design_effect: float
    share_design_effect_below_1: float


def draw(rng: np.random.Generator, n_clusters: int, size: int, icc: float) -> tuple[np.ndarray, np.ndarray]:
    """One replication's per-query differences (SD 1, ICC `icc`, mean 0) and each query's cluster."""
    sizes = np.full(n_clusters, size) if size else rng.integers(1, 121, n_clusters)
    clusters = np.repeat(np.arange(n_clusters), sizes)
    effect = rng.normal(0.0, np.sqrt(icc), n_clusters)[clusters]
    return effect + rng.normal(0.0, np.sqrt(1.0 - icc), clusters.size), clusters


def _bootstrap_excludes_0(sums: np.ndarray, sizes: np.ndarray, rng: np.random.Generator, resamples: int):
    """Whether the percentile cluster bootstrap 95% interval excludes 0, per row (rows x G)."""
    counts = rng.multinomial(sums.shape[1], np.full(sums.shape[1], 1.0 / sums.shape[1]), size=resamples)
    means = (sums @ counts.T) / (sizes @ counts.T)  # rows x resamples
    low, high = np.quantile(means, [0.025, 0.975], axis=1)
    return (low > 0) | (high < 0)


def simulate(
    design: str, n_clusters: int, size: int, icc: float, *, replications: int, seed: int, alpha: float = 0.05,
    n_resamples: int = 2_000, exact_max_n: int = 10,
) -> Setting:  # fmt: skip
    rng = np.random.default_rng(seed)
    draws = [draw(rng, n_clusters, size, icc) for _ in range(replications)]
    sizes = np.array([np.bincount(c, minlength=n_clusters) for _, c in draws], dtype=float)
    sums = np.array([np.bincount(c, weights=d, minlength=n_clusters) for d, c in draws])
    exact = n_clusters <= exact_max_n
    patterns = None if exact else sign_flip_patterns(n_clusters, n_resamples=n_resamples, seed=seed)
    out: dict[str, float] = {}
    for shift, tag in ((0.0, "null"), (EFFECT, "power")):
        shifted = sums + shift * sizes
        means = shifted.sum(axis=1) / sizes.sum(axis=1)
        residual = shifted - means[:, None] * sizes
        below, above = sign_flip_bounds(residual, sizes, 1.0 - alpha, patterns)
        out[f"signflip_{tag}"] = float(np.mean((means - below > 0) | (means + above < 0)))
        half = _cr2_t(residual, sizes, 1.0 - alpha)
        out[f"cr2_{tag}"] = float(np.mean(np.abs(means) > half))
        pvalues = [
            paired_randomization_test(
                d + shift,
                np.zeros_like(d),
                clusters=c,
                n_resamples=n_resamples,
                seed=seed + i,
                exact_max_n=exact_max_n,
            )  # fmt: skip
            for i, (d, c) in enumerate(draws)
        ]
        out[f"test_{tag}"] = float(np.mean(np.array(pvalues) < alpha))
    effects = np.array([design_effect(d, c) for d, c in draws])
    return Setting(
        design, n_clusters, icc, replications, out["test_null"], out["signflip_null"], out["cr2_null"],
        float(np.mean(_bootstrap_excludes_0(sums, sizes, rng, n_resamples))), out["test_power"],
        out["signflip_power"], out["cr2_power"], float(effects.mean()), float(np.mean(effects < 1.0)),
    )  # fmt: skip


def calibrate(*, replications: int = 1_000, seed: int = 0, designs=DESIGNS, iccs=ICCS) -> list[Setting]:
    """Every (design, ICC) setting, each from its own seeded Generator (seed + its position)."""
    settings = [(d, icc) for d in designs for icc in iccs]
    return [
        simulate(*design, icc, replications=replications, seed=seed + 1000 * i)
        for i, (design, icc) in enumerate(settings)
    ]


def within(setting: Setting, rate: float) -> bool:
    """The issue's acceptance for a no-effect rate: 0.03-0.07 for G >= 10, at most 0.07 for G = 5."""
    low, high = ACCEPTED
    return rate <= high and (setting.n_clusters < 10 or rate >= low)


HEADER = (
    "| conversations x questions | ICC | test FPR | sign-flip CI excl. 0 | CR2 t CI excl. 0 "
    "| bootstrap CI excl. 0 | test power | sign-flip CI power | CR2 t power | design effect | DE < 1 "
    "| accepted |\n" + "|---" * 12 + "|"
)


def markdown(settings: list[Setting], command: str) -> str:
    reps = settings[0].replications
    se = np.sqrt(0.05 * 0.95 / reps)
    rows = [
        f"| {s.design} | {s.icc} | **{s.test_fpr:.3f}** | **{s.signflip_ci_excludes_0:.3f}** | "
        f"{s.cr2_t_ci_excludes_0:.3f} | {s.bootstrap_ci_excludes_0:.3f} | {s.test_power:.2f} | "
        f"{s.signflip_ci_power:.2f} | {s.cr2_t_ci_power:.2f} | {s.mean_design_effect:.1f} | "
        f"{s.share_design_effect_below_1:.3f} | "
        f"{'yes' if within(s, s.test_fpr) and within(s, s.signflip_ci_excludes_0) else 'NO'} |"
        for s in settings
    ]
    failing = [s for s in settings if not (within(s, s.test_fpr) and within(s, s.signflip_ci_excludes_0))]
    verdict = "every row" if not failing else "NOT " + ", ".join(f"{s.design} ICC {s.icc}" for s in failing)
    return f"""# Cluster statistics calibration by simulation

Generated by `{command}` (experiments/benchmarks/cluster_calibration.py). Do not edit by hand.

No true difference, then a true shift of {EFFECT} SD; {reps:,} seeded replications per row; alpha 0.05,
95% intervals. Columns: the cluster sign-flip test's false-positive rate; how often each 95% interval of
the mean paired difference excludes 0 (sign-flip: the inverted test, what memeval reports; CR2 t: the
CR2 t-interval with Bell-McCaffrey df; bootstrap: the percentile cluster bootstrap memeval reported
before); power at {EFFECT} SD; the mean design effect of the differences and the share of replications
where it is below 1 (memeval warns then). A rate exactly at 0.05 lands within +/-{1.96 * se:.3f} of it
in 95% of such simulations.

{HEADER}
{chr(10).join(rows)}

- Accepted (test and reported interval within {ACCEPTED[0]}-{ACCEPTED[1]} for G >= 10, at most
  {ACCEPTED[1]} for G = 5): **{verdict}**.
- With 5 clusters no sign-flip p-value is below 2/2^5 = 0.0625, so the inverted interval at 95% is
  unbounded and never excludes 0 (power 0): memeval says so rather than print a finite interval.
"""


def main(argv: list[str] | None = None) -> int:
    args = arguments(__doc__, argv)
    settings = calibrate(replications=args.replications, seed=args.seed)
    text = markdown(settings, command_line("cluster_calibration", argv))
    write(args.out, "cluster_calibration", [asdict(s) for s in settings], text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
