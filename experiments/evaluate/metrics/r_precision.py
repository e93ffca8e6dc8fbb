"""R-precision (Rprec): precision at rank R, where R is the number of relevant documents in the qrels.

trec_eval's Rprec: the relevant documents among the first R retrieved, over R (a list shorter than R
is not rewarded for stopping early). At R, precision equals recall, so it needs no cutoff.
"""

import numpy as np

from experiments.evaluate.metrics.family import MetricFamily


def r_precision(gains: np.ndarray, n_relevant: np.ndarray, ideal: np.ndarray, k: int | None) -> np.ndarray:
    ranks = np.arange(1, gains.shape[-1] + 1)
    within_r = ranks <= np.asarray(n_relevant)[..., None]
    return ((gains > 0) & within_r).sum(axis=-1) / n_relevant


METRICS = {"Rprec": MetricFamily(r_precision, needs_cutoff=False)}
