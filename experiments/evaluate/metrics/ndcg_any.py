"""ndcg_any@k, LongMemEval's nDCG (src/retrieval/eval_utils.py `ndcg`), which differs from trec_eval's nDCG@k.

Relevance is binary (grade > 0 counts 1, whatever the grade). Its DCG does not discount rank 1 and divides
rank r >= 2 by log2(r) (trec_eval divides rank r by log2(r + 1)), so a hit at rank 2 counts as much as one
at rank 1. The ideal DCG comes from the qrels' relevant documents (as upstream, which takes them from the
whole corpus), never from what was retrieved.
"""

import numpy as np

from experiments.evaluate.metrics.family import MetricFamily


def _dcg(relevant: np.ndarray) -> np.ndarray:
    ranks = np.arange(1, relevant.shape[-1] + 1)
    return (relevant / np.log2(np.maximum(ranks, 2))).sum(axis=-1)


def ndcg_any(gains: np.ndarray, n_relevant: np.ndarray, ideal: np.ndarray, k: int) -> np.ndarray:
    return _dcg((gains[..., :k] > 0).astype(float)) / _dcg((ideal[..., :k] > 0).astype(float))


METRICS = {"ndcg_any": MetricFamily(ndcg_any, needs_cutoff=True)}  # LongMemEval's, by its name
