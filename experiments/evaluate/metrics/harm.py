"""Harm at k (harm@k): the must-not memories in the top k, over k. Lower is better; 0 is the goal.

A qrels grade below 0 judges a memory that must never come back (a superseded fact, another user's
memory). Every other metric treats it as not relevant (grade clipped to 0, as trec_eval does), so a run
can keep its recall while returning it; harm@k is read beside P@k (same denominator) and can be gated.
It is the one kernel that sees the raw grades, negatives included (`MetricFamily.raw_grades`).
"""

import numpy as np

from experiments.evaluate.metrics.family import MetricFamily


def harm(grades: np.ndarray, n_relevant: np.ndarray, ideal: np.ndarray, k: int) -> np.ndarray:
    return (grades[..., :k] < 0).sum(axis=-1) / k


METRICS = {"harm": MetricFamily(harm, needs_cutoff=True, raw_grades=True)}
