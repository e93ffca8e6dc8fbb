"""recall_all@k, LongMemEval's name (src/retrieval/eval_utils.py): 1 if every relevant document is in
the top k.

The same quantity as R_all@k; kept under LongMemEval's name so a LongMemEval table reads as the paper's.
"""

import numpy as np

from experiments.evaluate.metrics.family import MetricFamily
from experiments.evaluate.metrics.recall_all import recall_all as _r_all


def recall_all(gains: np.ndarray, n_relevant: np.ndarray, ideal: np.ndarray, k: int) -> np.ndarray:
    return _r_all(gains, n_relevant, ideal, k)


METRICS = {"recall_all": MetricFamily(recall_all, needs_cutoff=True)}  # LongMemEval's, by its name
