"""Acceptance: the cluster sign-flip test holds its false-positive rate on conversation-shaped data.

20 clusters of 20 queries, intra-cluster correlation 0.5, no true difference, 500 seeded replications
(experiments/benchmarks/cluster_calibration.py; the committed report runs 1,000)."""

import pytest

from experiments.benchmarks.cluster_calibration import ACCEPTED, calibrate


@pytest.mark.slow
def test_cluster_test_false_positive_rate_is_near_alpha_and_the_query_test_is_inflated():
    result = calibrate(replications=500, seed=1)
    low, high = ACCEPTED
    assert low <= result.false_positive_rate_cluster <= high
    # Questions of one conversation counted as independent: many times alpha.
    assert result.false_positive_rate_query > 3 * result.alpha
    assert result.mean_design_effect > 5
    assert 0.7 <= result.power_at_mde_cluster <= 0.9  # the MDE promises 80%
