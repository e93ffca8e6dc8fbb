"""Normalised discounted cumulative gain (nDCG@k), as trec_eval's ndcg_cut.

Gain is the relevance grade itself (linear, not 2^grade - 1); the document at rank r is discounted
by log2(r + 1). The ideal DCG comes from the qrels' grades sorted best first — never from what
was retrieved, otherwise a run that finds one of three relevant documents would score 1.
"""

import numpy as np

from experiments.evaluate.metrics.family import MetricFamily


def _discounted_sum(grades: np.ndarray) -> np.ndarray:
    return (grades / np.log2(np.arange(2, grades.shape[-1] + 2))).sum(axis=-1)


def ndcg(gains: np.ndarray, n_relevant: np.ndarray, ideal: np.ndarray, k: int | None) -> np.ndarray:
    return _discounted_sum(gains[..., :k]) / _discounted_sum(ideal[..., :k])


METRICS = {"nDCG": MetricFamily(ndcg, needs_cutoff=False)}
