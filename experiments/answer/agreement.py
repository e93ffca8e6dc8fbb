"""Judge robustness, reported: each judge's accuracy, the spread between judges, and their agreement.

On public memory benchmarks the judge prompt alone has moved the same answers' accuracy by tens of points, so
when two or more judges score the same answers memeval shows:
- each judge's accuracy (its mean score over the answers it could score) with the cluster interval memeval
  gives any mean (`cluster_mean_ci`: CR2 t, conversations as the unit);
- the spread, max - min of those accuracies, with the cluster sign-flip interval (`cluster_delta_ci`) of the
  paired per-answer difference between the two judges at the ends (on the answers both scored; the pair is
  chosen by the same data, so read it as a description, not a test);
- Cohen's kappa between each pair of judges and, where labels exist, between each judge and the labels.
A graded score (BEAM's rubric mean, the lexical F1) is read as a verdict at >= 0.5 for kappa. A judge's
unparsed verdicts are NaN in its array and left out of everything that judge takes part in.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import combinations

import numpy as np

from experiments.evaluate.statistics import cluster_codes, cluster_delta_ci, cluster_mean_ci


def cohen_kappa(a: np.ndarray, b: np.ndarray) -> float | None:
    """Cohen's kappa of two 0/1 verdict arrays; None when it is undefined (both raters constant and equal
    chance agreement 1) or there is nothing to compare."""
    if a.size == 0:
        return None
    observed = float(np.mean(a == b))
    pa, pb = float(a.mean()), float(b.mean())
    chance = pa * pb + (1 - pa) * (1 - pb)
    return None if chance >= 1.0 else (observed - chance) / (1.0 - chance)


def _verdicts(values: np.ndarray) -> np.ndarray:
    return (values >= 0.5).astype(float)


def _interval(values: np.ndarray, clusters: np.ndarray, how) -> dict:
    if values.size == 0:
        return {"low": None, "high": None, "reason": "no answer scored"}
    if int(cluster_codes(clusters, values.size).max()) + 1 < 2:
        return {"low": None, "high": None, "reason": "fewer than 2 conversations"}
    low, high = how(values, clusters)
    return {"low": low, "high": high, "reason": None}


def judge_agreement(
    scores: Mapping[str, np.ndarray], clusters: np.ndarray, labels: np.ndarray | None = None
) -> dict:
    """Per judge accuracy with its cluster interval, the spread max - min with a cluster interval, pairwise
    Cohen's kappa, and each judge's kappa with `labels` (0/1, NaN where an answer is unlabelled)."""
    clusters = np.asarray(clusters, dtype=object)
    arrays = {name: np.asarray(values, dtype=float) for name, values in scores.items()}
    for name, values in arrays.items():
        if values.shape != clusters.shape:
            raise ValueError(f"judge {name!r}: {values.size} scores for {clusters.size} answers")
    accuracy = {}
    for name, values in arrays.items():
        ok = ~np.isnan(values)
        accuracy[name] = {
            "accuracy": float(values[ok].mean()) if ok.any() else None,
            "n": int(ok.sum()),
            **_interval(values[ok], clusters[ok], lambda v, c: cluster_mean_ci(v, c)),
        }
    scored = {k: v["accuracy"] for k, v in accuracy.items() if v["accuracy"] is not None}
    spread = None
    if len(scored) >= 2:
        high, low = max(scored, key=scored.get), min(scored, key=scored.get)
        both = ~np.isnan(arrays[high]) & ~np.isnan(arrays[low])
        difference = arrays[high][both] - arrays[low][both]
        spread = {
            "spread": scored[high] - scored[low],
            "max_judge": high,
            "min_judge": low,
            "paired_difference": float(difference.mean()) if difference.size else None,
            **_interval(difference, clusters[both], lambda v, c: cluster_delta_ci(v, c)),
        }
    kappa = {}
    for a, b in combinations(sorted(arrays), 2):
        both = ~np.isnan(arrays[a]) & ~np.isnan(arrays[b])
        kappa[f"{a} vs {b}"] = {
            "kappa": cohen_kappa(_verdicts(arrays[a][both]), _verdicts(arrays[b][both])),
            "n": int(both.sum()),
        }
    with_labels = None
    if labels is not None:
        labels = np.asarray(labels, dtype=float)
        if labels.shape != clusters.shape:
            raise ValueError(f"labels: {labels.size} values for {clusters.size} answers")
        with_labels = {}
        for name, values in arrays.items():
            both = ~np.isnan(values) & ~np.isnan(labels)
            with_labels[name] = {
                "kappa": cohen_kappa(_verdicts(values[both]), labels[both]),
                "n": int(both.sum()),
            }
    return {"judges": accuracy, "spread": spread, "kappa": kappa, "kappa_with_labels": with_labels}
