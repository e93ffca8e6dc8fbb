"""Recall at k (R@k): the relevant documents in the top k, over all relevant documents in the qrels."""

import numpy as np

from experiments.evaluate.metrics.family import MetricFamily


def recall(gains: np.ndarray, n_relevant: np.ndarray, ideal: np.ndarray, k: int) -> np.ndarray:
    return (gains[..., :k] > 0).sum(axis=-1) / n_relevant


METRICS = {"R": MetricFamily(recall, needs_cutoff=True)}
