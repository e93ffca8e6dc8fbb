"""Conciseness penalty (rank): a small, configurable demotion of very long memories.

Sits last among the score-changing rank stages (query, candidates -> candidates). Length is counted
in words of the memory text. A memory up to `max_words` is untouched; above it the penalty grows
linearly and saturates at `weight` when the memory is twice `max_words` long:
    score = minmax(score) - weight * clip((words - max_words) / max_words, 0, 1)
Same scale as `instruction_boost`: a fraction of this query's score range. Weight 0 returns the
input untouched (identical to no stage).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from retrieval.stage import BatchRankStage, Range
from retrieval.types import CandidateBatch


def word_counts(texts: np.ndarray) -> np.ndarray:
    """Words per text (whitespace-separated). str.split is the exact rule; numpy has no equivalent."""
    return np.fromiter((len(str(t).split()) for t in texts), dtype=np.float64, count=len(texts))


@dataclass(frozen=True, kw_only=True)
class ConcisenessPenalty(BatchRankStage):
    name = "conciseness_penalty"
    ranges = {"weight": Range(), "max_words": Range(ge=1)}
    weight: float = 0.05
    max_words: int = 150

    def rank_all(self, candidates: CandidateBatch) -> CandidateBatch:
        if self.weight == 0 or len(candidates) == 0:
            return candidates
        # counted once per corpus (every query of every sweep job reads the same counts)
        corpus = candidates.corpus
        words = corpus.derived("word_counts", lambda: word_counts(corpus.column("text")))[candidates.index]
        excess = np.clip((words - self.max_words) / self.max_words, 0.0, 1.0)
        base = candidates.minmax(candidates.score)
        return candidates.with_score(self.name, base - self.weight * excess, extra={"words": words})
