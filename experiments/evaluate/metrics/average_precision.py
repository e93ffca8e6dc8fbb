"""Average precision (AP, optionally AP@k): mean of P@rank over the ranks of the relevant documents.

Divided by the number of relevant documents in the qrels, not by the number retrieved, so a
relevant document never retrieved (or below k) counts as precision 0 — trec_eval's map/map_cut.
"""

import numpy as np

from experiments.evaluate.metrics.family import MetricFamily


def average_precision(
    gains: np.ndarray, n_relevant: np.ndarray, ideal: np.ndarray, k: int | None
) -> np.ndarray:
    relevant = gains[..., :k] > 0
    precision_at_rank = np.cumsum(relevant, axis=-1) / np.arange(1, relevant.shape[-1] + 1)
    return (precision_at_rank * relevant).sum(axis=-1) / n_relevant


METRICS = {"AP": MetricFamily(average_precision, needs_cutoff=False)}
