"""recall_any@k, LongMemEval's name (src/retrieval/eval_utils.py): 1 if any relevant document is in the top k.

The same quantity as hit@k (ir_measures' Success@k); kept under LongMemEval's name so a LongMemEval table
reads as the paper's. Relevant means grade > 0.
"""

import numpy as np

from experiments.evaluate.metrics.family import MetricFamily
from experiments.evaluate.metrics.hit import hit


def recall_any(gains: np.ndarray, n_relevant: np.ndarray, ideal: np.ndarray, k: int) -> np.ndarray:
    return hit(gains, n_relevant, ideal, k)


METRICS = {"recall_any": MetricFamily(recall_any, needs_cutoff=True)}  # LongMemEval's, by its name
