"""Importance prune (a rank stage): drop medium/low memories whose ICM weight fell under a minimum.

Reads the `importance_weight` column the decay stage wrote (so replayed access counts count); without
it, computes the weight from the importance level and the suite's metadata access counts. Critical
and high memories are never pruned. A gate: pruned memories are dropped, not demoted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from retrieval.aging import DECAYING_LEVELS, DEFAULT_WEIGHTS, importance_weight, metadata_access
from retrieval.stage import Range, RankStage
from retrieval.types import Candidates, Query


@dataclass(frozen=True, kw_only=True)
class ImportancePrune(RankStage):
    name = "importance_prune"
    ranges = {"min_weight": Range(), "importance_weights": Range(), "access_step": Range(ge=0)}
    min_weight: float = 0.3
    importance_weights: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    default_importance: str | None = None
    access_step: float = 0.1

    def __call__(self, query: Query, candidates: Candidates) -> Candidates:
        levels = candidates.attribute("importance")
        if self.default_importance is not None:
            levels = np.array(
                [lv if lv is not None else self.default_importance for lv in levels], dtype=object
            )
        if "importance_weight" in candidates.columns:
            weight = candidates.columns["importance_weight"]
        else:
            access = metadata_access(candidates.corpus, candidates.index, query)
            weight = importance_weight(levels, access, self.importance_weights, self.access_step)
        prunable = np.isin(levels.astype(str), DECAYING_LEVELS)
        return candidates.select(~(prunable & (weight < self.min_weight)))
