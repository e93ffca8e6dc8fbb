"""Precision at k (P@k): the relevant documents in the top k, over k.

trec_eval's convention: always divide by k, even when the run returned fewer than k documents,
so a short list is not rewarded for stopping early.
"""

import numpy as np

from experiments.evaluate.metrics.family import MetricFamily


def precision(gains: np.ndarray, n_relevant: np.ndarray, ideal: np.ndarray, k: int) -> np.ndarray:
    return (gains[..., :k] > 0).sum(axis=-1) / k


METRICS = {"P": MetricFamily(precision, needs_cutoff=True)}
