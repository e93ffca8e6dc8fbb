"""Acceptance: the cluster sign-flip test and the interval memeval reports hold their false-positive rate on
conversation-shaped data, with 5 to 50 conversations of equal and unequal sizes
(experiments/benchmarks/cluster_calibration.py; the committed report runs 1,000 replications a row)."""

import json

import numpy as np
import pytest

from experiments.benchmarks.cluster_calibration import DESIGNS, ICCS, calibrate, main


def test_the_benchmark_covers_every_setting_and_writes_its_table(tmp_path):
    assert main(["--replications", "20", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "cluster_calibration.json").read_text())
    assert [(r["design"], r["icc"]) for r in rows] == [(d[0], icc) for d in DESIGNS for icc in ICCS]
    rates = [k for k in rows[0] if k.endswith(("_fpr", "_excludes_0", "_power", "_below_1"))]
    assert len(rates) == 8 and all(0.0 <= r[k] <= 1.0 for r in rows for k in rates)
    five = [r for r in rows if r["n_clusters"] == 5]
    # 5 clusters: no p below 2/2^5 > 0.05, so neither the test nor the inverted interval ever fires.
    assert all(r["test_fpr"] == r["signflip_ci_excludes_0"] == r["signflip_ci_power"] == 0 for r in five)
    text = (tmp_path / "cluster_calibration.md").read_text()
    assert "cluster_calibration --replications 20 --out" in text.splitlines()[2]
    assert text.count("\n| ") == 1 + len(rows)  # header and one row per setting


@pytest.mark.slow
def test_the_test_and_the_reported_interval_hold_their_size_and_the_bootstrap_does_not():
    reps = 400
    settings = calibrate(replications=reps, seed=7, iccs=(0.5,))
    # A rate exactly at alpha is within 3 binomial SEs of 0.05 in 99.7% of runs of this test.
    tolerance = 3 * np.sqrt(0.05 * 0.95 / reps)
    for s in settings:
        if s.n_clusters == 5:
            assert s.test_fpr == s.signflip_ci_excludes_0 == 0.0
            continue
        for rate in (s.test_fpr, s.signflip_ci_excludes_0, s.cr2_t_ci_excludes_0):
            assert abs(rate - 0.05) <= tolerance, (s.design, rate)
        assert s.mean_design_effect > 1.5
    # The percentile cluster bootstrap it replaced: far too often "significant" with 5 clusters.
    few = [s for s in settings if s.n_clusters == 5]
    assert all(s.bootstrap_ci_excludes_0 > 0.05 + tolerance for s in few)
