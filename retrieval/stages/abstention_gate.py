"""Abstention gate (rank): return nothing when even the best candidate looks irrelevant.

Sits last in the pipeline (query, candidates -> candidates, possibly empty). The decision uses a
calibrated score, not the ranking score: fused RRF scores and normalised boosts only order one
query's candidates and say nothing about absolute relevance. The calibrated score is the raw value
of `column` (default `dense`: the bi-encoder cosine, comparable across queries), maximised over the
candidates (NaN where the channel missed a memory). If it is below `threshold` the gate drops every
candidate; otherwise the candidates pass unchanged. `threshold: null` never abstains.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from retrieval.stage import Range, RankStage
from retrieval.types import Candidates, Query


@dataclass(frozen=True, kw_only=True)
class AbstentionGate(RankStage):
    name = "abstention_gate"
    ranges = {"threshold": Range()}
    column: str = "dense"
    threshold: float | None = 0.35

    def best_calibrated(self, candidates: Candidates) -> float:
        if self.column not in candidates.columns:
            raise KeyError(
                f"abstention_gate reads column {self.column!r}; candidates have {sorted(candidates.columns)}"
            )
        values = np.asarray(candidates.columns[self.column], dtype=np.float64)
        values = values[np.isfinite(values)]
        return float(values.max()) if values.size else -np.inf

    def __call__(self, query: Query, candidates: Candidates) -> Candidates:
        if self.threshold is None or len(candidates) == 0:
            return candidates
        if self.best_calibrated(candidates) >= self.threshold:
            return candidates
        return candidates.select(np.zeros(len(candidates), dtype=bool))
