"""Rank stage: score floors. A candidate too far from the query is dropped: fewer, better results.

Two floors, each optional (null = off): `min_similarity` on the dense channel's cosine similarity
column, and `min_fused` on the fused score column. A memory the dense channel did not return (NaN
similarity) was below the channel's top_n cut, so it fails the similarity floor. Under RRF the fused
score is rank-based (1/(k+rank) per channel), so `min_fused` is a rank floor there; it means more under
weighted fusion, where fused scores are normalised similarities. Fallback: if fewer than `min_results`
(default 3) pass, the best of the dropped ones by similarity (by fused score when only that floor is
on; ties in rank order) are let back
(retrieval/stages/fallback.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from retrieval.stage import Range, RankStage
from retrieval.stages.fallback import keep_or_relax
from retrieval.types import Candidates, Query


@dataclass(frozen=True, kw_only=True)
class ScoreFloor(RankStage):
    name = "score_floor"
    ranges = {"min_similarity": Range(), "min_fused": Range(), "min_results": Range(ge=0)}
    min_similarity: float | None = 0.2
    similarity_column: str = "dense"
    min_fused: float | None = None
    fused_column: str = "fused"
    min_results: int = 3

    def _column(self, candidates: Candidates, name: str) -> np.ndarray:
        if name not in candidates.columns:
            raise KeyError(
                f"score_floor needs the column {name!r}; the candidates have {sorted(candidates.columns)}"
            )
        return np.asarray(candidates.columns[name], dtype=float)

    def __call__(self, query: Query, candidates: Candidates) -> Candidates:
        keep = np.ones(len(candidates), dtype=bool)
        priority = np.zeros(len(candidates))
        if self.min_fused is not None:
            fused = self._column(candidates, self.fused_column)
            keep &= np.nan_to_num(fused, nan=-np.inf) >= self.min_fused
            priority = np.nan_to_num(fused, nan=-np.inf)
        if self.min_similarity is not None:
            similarity = self._column(candidates, self.similarity_column)
            keep &= np.nan_to_num(similarity, nan=-np.inf) >= self.min_similarity
            priority = np.nan_to_num(similarity, nan=-np.inf)  # relax by similarity, ties by rank
        return keep_or_relax(candidates, keep, priority, self.min_results, self.name)
