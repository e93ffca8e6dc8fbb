"""Reciprocal rank (RR, optionally RR@k): 1 / rank of the first relevant document, 0 if none.

Its mean over queries is MRR. With k, only the top k count (a first hit at rank k+1 scores 0).
"""

import numpy as np

from experiments.evaluate.metrics.family import MetricFamily


def reciprocal_rank(
    gains: np.ndarray, n_relevant: np.ndarray, ideal: np.ndarray, k: int | None
) -> np.ndarray:
    relevant = gains[..., :k] > 0
    ranks = np.arange(1, relevant.shape[-1] + 1)
    # 1/rank falls with rank, so the largest 1/rank among the hits is the first hit's.
    return np.max(relevant / ranks, axis=-1, initial=0.0)


METRICS = {"RR": MetricFamily(reciprocal_rank, needs_cutoff=False)}
