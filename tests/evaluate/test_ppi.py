"""Acceptance check 4 of issue 43: memeval's iid PPI (lambda 1) and PPI++ (lambda estimated) intervals equal
`ppi_py.ppi_mean_ci` to 1e-12 on 400+ random binary-judge cases at alpha 0.05 and 0.1, and the lambda-1
interval equals ARES's `pp_mean_iid_asymptotic` (tests/upstream/ares_ppi.py, vendored). ppi-python is a
test-only dependency (the `dev` extra): memeval's PPI is its own few lines of numpy. Then the cluster
interval and the PPI block's refusals."""

from __future__ import annotations

import numpy as np
import pytest
from ppi_py import ppi_mean_ci

from experiments.evaluate.ppi import MIN_LABELS, ppi_block, ppi_mean_cluster, ppi_mean_iid
from tests.upstream.ares_ppi import pp_mean_iid_asymptotic


def binary_case(rng: np.random.Generator):
    """A judged accuracy: truth with some accuracy, a judge with its false-accept and false-reject rates."""
    n, big_n = int(rng.integers(30, 400)), int(rng.integers(50, 4000))
    accuracy, false_accept, false_reject = rng.uniform(0.05, 0.95), rng.uniform(0, 0.5), rng.uniform(0, 0.5)

    def draw(m: int):
        truth = (rng.random(m) < accuracy).astype(float)
        judged = np.where(truth == 1, rng.random(m) >= false_reject, rng.random(m) < false_accept)
        return truth, judged.astype(float)

    labels, judged_labelled = draw(n)
    return labels, judged_labelled, draw(big_n)[1]


def test_iid_ppi_and_ppi_plus_plus_equal_ppi_py_and_ares_on_400_cases():
    rng = np.random.default_rng(43)
    worst, lambdas = 0.0, []
    for _ in range(400):
        labels, judged_labelled, judged_unlabelled = binary_case(rng)
        for alpha in (0.05, 0.1):
            for lam in (1.0, None):
                low, high = ppi_mean_ci(labels, judged_labelled, judged_unlabelled, alpha=alpha, lam=lam)
                _, ours_low, ours_high, used = ppi_mean_iid(
                    labels, judged_labelled, judged_unlabelled, alpha=alpha, lam=lam
                )
                worst = max(worst, abs(float(low[0]) - ours_low), abs(float(high[0]) - ours_high))
                if lam is None:
                    lambdas.append(used)
            ares = pp_mean_iid_asymptotic(labels, judged_labelled, judged_unlabelled, alpha)
            _, ours_low, ours_high, _ = ppi_mean_iid(labels, judged_labelled, judged_unlabelled, alpha=alpha)
            worst = max(worst, abs(ares[0] - ours_low), abs(ares[1] - ours_high))
    assert worst <= 1e-12
    assert 0 < np.mean(lambdas) < 1 and len(set(np.round(lambdas, 6))) > 100  # PPI++ really tunes lambda


def _suite(rng, g: int, labelled: int = 200):
    sizes = rng.integers(20, 200, size=g)
    clusters = np.repeat([f"conv-{i}" for i in range(g)], sizes)
    p = rng.beta(6, 4, size=g)[np.repeat(np.arange(g), sizes)]
    truth = (rng.random(clusters.size) < p).astype(float)
    judged = np.where(rng.random(clusters.size) < 0.85, truth, 1 - truth)
    mask = np.zeros(clusters.size, dtype=bool)
    mask[rng.choice(clusters.size, size=labelled, replace=False)] = True
    return judged, mask, truth, clusters


def test_the_cluster_interval_has_the_iid_estimate_and_is_wider_when_conversations_differ():
    judged, mask, truth, clusters = _suite(np.random.default_rng(5), 10)
    block = ppi_block(judged, mask, truth, clusters)
    assert block["reason"] is None and block["ppi"]["df"] == 9
    assert block["ppi"]["estimate"] == pytest.approx(block["iid_ppi"]["estimate"], abs=1e-15)
    cluster_width = block["ppi"]["high"] - block["ppi"]["low"]
    assert cluster_width > block["iid_ppi"]["high"] - block["iid_ppi"]["low"]
    # with every question its own conversation, the cluster interval is the iid one up to t vs normal and CR2
    own = np.array([f"q{i}" for i in range(judged.size)], dtype=object)
    est, low, high, g = ppi_mean_cluster(truth[mask], judged[mask], own[mask], judged[~mask], own[~mask])
    _, ilow, ihigh, _ = ppi_mean_iid(truth[mask], judged[mask], judged[~mask])
    assert g == judged.size and (high - low) / (ihigh - ilow) == pytest.approx(1.0, abs=0.01)


def test_false_accept_and_false_reject_rates_are_counted_against_the_labels():
    judged = np.array([1, 1, 0, 0, 1, 0, 1, 1] * 10, dtype=float)
    truth = np.array([1, 0, 0, 1, 1, 0, 0, 1] * 10, dtype=float)
    clusters = np.repeat(["a", "b", "c", "d"], 20)
    block = ppi_block(judged, np.ones(80, dtype=bool), truth, clusters)
    assert block["false_accept"]["rate"] == pytest.approx(2 / 4) and block["false_accept"]["n"] == 40
    assert block["false_reject"]["rate"] == pytest.approx(1 / 4) and block["false_reject"]["n"] == 40
    assert "every answer is labelled" in block["reason"] and block["ppi"] is None


def test_no_interval_from_one_conversation_or_too_few_labels_and_the_block_says_why():
    rng = np.random.default_rng(1)
    judged, mask, truth, clusters = _suite(rng, 5, labelled=MIN_LABELS - 1)
    block = ppi_block(judged, mask, truth, clusters)
    assert block["ppi"] is None and block["iid_ppi"] is None
    assert block["reason"] == f"{MIN_LABELS - 1} labelled answer(s): an interval needs at least {MIN_LABELS}"
    assert block["false_accept"]["low"] is None and block["judge_accuracy"] == judged.mean()
    judged, mask, truth, _ = _suite(rng, 5)
    one = np.array(["conv-1"] * judged.size, dtype=object)
    block = ppi_block(judged, mask, truth, one)
    assert block["ppi"] is None and block["reason"].startswith("1 conversation(s)")
    # labels given only for the labelled answers, in order, are read the same
    judged, mask, truth, clusters = _suite(rng, 6)
    assert ppi_block(judged, mask, truth[mask], clusters) == ppi_block(judged, mask, truth, clusters)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="must be 0 or 1"):
        ppi_block(np.array([0.5, 1.0]), np.array([True, False]), np.array([1.0, 0.0]), np.array(["a", "b"]))
    with pytest.raises(ValueError, match="labels must hold 2 or 1 values"):
        ppi_block(
            np.array([0.0, 1.0]), np.array([True, False]), np.array([1.0, 0.0, 1.0]), np.array(["a", "b"])
        )
