"""session_recall_any@k, session_recall_all@k, session_ndcg_any@k: LongMemEval's session view of a turn-level
run (upstream's src/retrieval/eval_utils.py `evaluate_retrieval_turn2session`).

They need each turn's session and upstream's corpus ids, which qrels do not hold: only LongMemEval's
official scorer computes them (experiments/evaluate/metrics/official_longmemeval.py). This kernel is what
the generic table sees: NaN, replaced by the scorer's values (experiments/evaluate/metrics/official.py
refuses these names on a suite without that scorer before any work).
"""

import numpy as np

from experiments.evaluate.metrics.family import MetricFamily


def session_view(gains: np.ndarray, n_relevant: np.ndarray, ideal: np.ndarray, k: int) -> np.ndarray:
    return np.full(np.shape(gains)[:-1], np.nan)


METRICS = {
    name: MetricFamily(session_view, needs_cutoff=True)
    for name in ("session_recall_any", "session_recall_all", "session_ndcg_any")
}
