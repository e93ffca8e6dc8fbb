"""Judge robustness (experiments/answer/agreement.py) and upstream's aggregates for BEAM and unparsed verdicts
(experiments/answer/aggregates.py): kappa against scikit-learn's, the spread and its cluster interval, and
unparsed verdicts left out of every mean and counted."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score

from experiments.answer.aggregates import upstream_aggregates
from experiments.answer.agreement import cohen_kappa, judge_agreement
from experiments.answer.types import AnswerItem, Verdict
from experiments.evaluate.statistics import cluster_delta_ci, cluster_mean_ci


def judges(seed: int = 0, n: int = 240):
    rng = np.random.default_rng(seed)
    truth = (rng.random(n) < 0.6).astype(float)
    lenient = np.where(truth == 1, 1.0, (rng.random(n) < 0.5).astype(float))  # accepts half the wrong ones
    strict = np.where(rng.random(n) < 0.9, truth, 1 - truth)
    clusters = np.repeat([f"conv-{i}" for i in range(8)], n // 8).astype(object)
    return truth, lenient, strict, clusters


def test_kappa_is_scikit_learns_and_undefined_when_both_raters_are_constant():
    rng = np.random.default_rng(2)
    for _ in range(50):
        a = (rng.random(80) < rng.random()).astype(float)
        b = np.where(rng.random(80) < rng.random(), a, 1 - a)
        if len(set(a)) + len(set(b)) > 2:
            assert cohen_kappa(a, b) == pytest.approx(cohen_kappa_score(a, b), abs=1e-12)
    assert cohen_kappa(np.ones(5), np.ones(5)) is None


def test_spread_pairwise_kappa_and_kappa_with_labels():
    truth, lenient, strict, clusters = judges()
    labels = np.where(np.arange(truth.size) % 4 == 0, truth, np.nan)  # a quarter labelled
    strict_nan = strict.copy()
    strict_nan[:6] = np.nan  # unparsed
    out = judge_agreement({"lenient": lenient, "strict": strict_nan}, clusters, labels)
    assert out["judges"]["lenient"]["accuracy"] == pytest.approx(lenient.mean())
    ok = ~np.isnan(strict_nan)
    assert out["judges"]["strict"]["n"] == truth.size - 6
    assert (out["judges"]["strict"]["low"], out["judges"]["strict"]["high"]) == pytest.approx(
        tuple(cluster_mean_ci(strict[ok], clusters[ok]))
    )
    spread = out["spread"]
    assert spread["max_judge"] == "lenient" and spread["min_judge"] == "strict"
    assert spread["spread"] == pytest.approx(lenient.mean() - strict[ok].mean())
    assert (spread["low"], spread["high"]) == pytest.approx(
        tuple(cluster_delta_ci(lenient[ok] - strict[ok], clusters[ok]))
    )
    assert spread["low"] > 0  # the lenient judge's excess is far beyond what 8 conversations leave to chance
    assert out["kappa"]["lenient vs strict"]["kappa"] == pytest.approx(
        cohen_kappa_score(lenient[ok], strict[ok])
    )
    both = ~np.isnan(labels)
    assert out["kappa_with_labels"]["lenient"]["kappa"] == pytest.approx(
        cohen_kappa_score(lenient[both], truth[both])
    )
    assert out["kappa_with_labels"]["strict"]["kappa"] > out["kappa_with_labels"]["lenient"]["kappa"]


def test_one_conversation_gives_no_interval_and_says_why():
    truth, lenient, strict, _ = judges()
    one = np.array(["conv-1"] * truth.size, dtype=object)
    out = judge_agreement({"a": lenient, "b": strict}, one)
    assert out["judges"]["a"]["low"] is None and out["judges"]["a"]["reason"] == "fewer than 2 conversations"
    assert out["spread"]["low"] is None and out["kappa_with_labels"] is None


def test_beam_aggregate_is_the_mean_per_ability_and_unparsed_verdicts_are_counted_apart():
    items = [
        AnswerItem(f"q{i}", "Q", "A", labels={"ability": a})
        for i, a in enumerate(["summarization"] * 3 + ["event_ordering"] * 2)
    ]
    verdicts = [
        Verdict(1.0),
        Verdict(0.5),
        Verdict(None, unparsed=True, raw=("??",)),
        Verdict(0.25),
        Verdict(0.75),
    ]
    out = upstream_aggregates("beam", items, {"beam": verdicts})["beam"]
    assert out["by_ability"] == {
        "event_ordering": {"mean": 0.5, "count": 2},
        "summarization": {"mean": 0.75, "count": 2},
    }
    assert (out["unparsed"], out["judged"]) == (1, 4)
    assert "Kendall tau" in out["note"]
    with pytest.raises(ValueError, match="judge 'beam': 4 verdicts for 5 items"):
        upstream_aggregates("beam", items, {"beam": verdicts[:4]})
