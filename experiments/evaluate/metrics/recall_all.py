"""All-recall at k (R_all@k): 1 if every relevant document is in the top k, else 0.

A memory question that needs several pieces of evidence is only answerable when all of them are
retrieved; R@k gives partial credit, R_all@k does not. No trec_eval counterpart. Counting hits
is exact because a ranked list never repeats a document (per_query checks it).
"""

import numpy as np

from experiments.evaluate.metrics.family import MetricFamily


def recall_all(gains: np.ndarray, n_relevant: np.ndarray, ideal: np.ndarray, k: int) -> np.ndarray:
    return ((gains[..., :k] > 0).sum(axis=-1) == n_relevant).astype(float)


METRICS = {"R_all": MetricFamily(recall_all, needs_cutoff=True)}
