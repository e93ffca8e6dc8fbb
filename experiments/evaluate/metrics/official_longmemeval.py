"""LongMemEval's own retrieval metrics (xiaowu0162/LongMemEval src/retrieval/eval_utils.py), reproduced for
`suite.protocol=official`: it owns recall_any@k, recall_all@k, ndcg_any@k and their session view
session_recall_any@k, session_recall_all@k, session_ndcg_any@k (`evaluate_retrieval_turn2session`).

Upstream scores a ranking of its *corpus ids* (src/retrieval/run_retrieval.py:202-229): the user turns of
each haystack session in order, `<session>_<n>` (n counts every turn of the session from 1), empty ones
included; in a session whose id contains `answer`, a turn without `has_answer` is renamed `noans...`. Its
correct documents are the ids that contain `answer` (run_retrieval.py:272). Then, at cutoff k:
- recall_any / recall_all: any / all correct ids among the top k (`all` of none is 1);
- ndcg_any: binary DCG, rank 1 undiscounted, rank r >= 2 divided by log2(r); the ideal from the whole corpus;
- the session view of a turn ranking: each id loses its last `_<n>` (so `noans_x_2` names session `noans_x`,
  not `answer_x`), k grows until the top k turns hold k distinct sessions (or the ranking ends), and the
  three metrics are taken over the turns as ranked, a turn counting when its stripped id is correct.
Here the ranking is the run's (ranked memory ids mapped to corpus positions): the session view of a run
shorter than the turns it needs uses what the run returned, as upstream's functions do on that list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from experiments.evaluate.metrics import Metric

NAME = (
    "LongMemEval src/retrieval/eval_utils.py evaluate_retrieval (session_*: "
    "evaluate_retrieval_turn2session); "
    "overall mean = src/evaluation/print_retrieval_metrics.py (every non-abstention question); "
    "label lme_average='both scripts' = src/retrieval/run_retrieval.py's mean"
)


def _dcg(relevances: Sequence[int], k: int) -> float:
    top = np.asarray(relevances, dtype=float)[:k]
    return float(top[0] + np.sum(top[1:] / np.log2(np.arange(2, top.size + 1)))) if top.size else 0.0


def evaluate_retrieval(
    rankings: Sequence[int], correct: frozenset[str], corpus_ids: Sequence[str], k: int
) -> tuple[float, float, float]:
    """(recall_any, recall_all, ndcg_any) at k of a ranking of corpus positions."""
    recalled = {corpus_ids[i] for i in rankings[:k]}
    relevances = [int(c in correct) for c in corpus_ids]
    ideal = _dcg(sorted(relevances, reverse=True), k)
    ndcg = _dcg([relevances[i] for i in rankings[:k]], k) / ideal if ideal else 0.0
    return float(any(c in recalled for c in correct)), float(all(c in recalled for c in correct)), ndcg


def session_of(corpus_id: str) -> str:
    return corpus_id.rsplit("_", 1)[0] if "_" in corpus_id else ""


def turn2session(
    rankings: Sequence[int], correct: frozenset[str], corpus_ids: Sequence[str], k: int
) -> tuple[float, float, float]:
    """The session view of a turn ranking at k (upstream's k grows until k distinct sessions are in it)."""
    sessions = [session_of(c) for c in corpus_ids]
    effective_k = k
    while effective_k <= len(sessions) and len({sessions[i] for i in rankings[:effective_k]}) < k:
        effective_k += 1
    return evaluate_retrieval(rankings, frozenset(map(session_of, correct)), sessions, effective_k)


_VALUE = {"recall_any": 0, "recall_all": 1, "ndcg_any": 2}


@dataclass(frozen=True)
class LongMemEvalScorer:
    """`corpus`: each scored question's upstream corpus ids, in corpus order; `position`: per question, a
    memory id -> its position in that corpus; `turns`: whether the corpus is of turns (else of sessions)."""

    corpus: Mapping[str, tuple[str, ...]]
    position: Mapping[str, Mapping[str, int]]
    turns: bool
    name: str = NAME

    @cached_property
    def scored(self) -> frozenset[str]:
        return frozenset(self.corpus)

    def owns(self, metric: Metric) -> bool:
        return metric.family.removeprefix("session_") in _VALUE

    def score(self, query_id: str, ranked: Sequence[str], metric: Metric) -> float:
        corpus_ids = self.corpus[query_id]
        correct = frozenset(c for c in corpus_ids if "answer" in c)
        position = self.position[query_id]
        rankings = [position[m] for m in ranked if m in position]
        view = turn2session if self.turns and metric.family.startswith("session_") else evaluate_retrieval
        assert metric.k is not None  # every family it owns needs a cutoff
        return view(rankings, correct, corpus_ids, metric.k)[_VALUE[metric.family.removeprefix("session_")]]
