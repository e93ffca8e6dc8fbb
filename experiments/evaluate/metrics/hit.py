"""Hit at k (hit@k, ir_measures' Success@k): 1 if any relevant document is in the top k, else 0."""

import numpy as np

from experiments.evaluate.metrics.family import MetricFamily


def hit(gains: np.ndarray, n_relevant: np.ndarray, ideal: np.ndarray, k: int) -> np.ndarray:
    return (gains[..., :k] > 0).any(axis=-1).astype(float)


METRICS = {"hit": MetricFamily(hit, needs_cutoff=True)}
