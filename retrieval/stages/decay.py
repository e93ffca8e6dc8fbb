"""Time decay and ICM importance (a rank stage): score x min(1, recency) x importance weight.

Recency by memory kind (the attribute `kind_field`, e.g. tier or role; an unlisted kind uses the
`default` entry of `half_life_days` and `floor`); age = query.now - memory.created_at in days, clipped
at 0; unknown age -> no decay. The importance weight multiplies outside the recency cap, so an
important memory can outrank a fresher one. Memories with no importance level use
`default_importance` (null: weight 1, never access-decayed). Access counts (`access`): `none`,
`metadata` (suite access_count / access_history) or `replay` (the injected AccessLedger; see
retrieval/aging.py for why the state lives there). Columns kept: age_days, recency,
access_count, importance_weight, decay.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from retrieval.aging import (
    DEFAULT_WEIGHTS,
    AccessLedger,
    created_days,
    epoch_days,
    importance_weight,
    metadata_access,
    recency,
)
from retrieval.stage import Range, RankStage
from retrieval.types import Candidates, Query


@dataclass(frozen=True, kw_only=True)
class TimeDecay(RankStage):
    name = "decay"
    ranges = {
        "half_life_days": Range(gt=0),
        "floor": Range(ge=0, le=1),
        "importance_weights": Range(),
        "access_step": Range(ge=0),
    }
    kind_field: str = "tier"
    half_life_days: dict[str, float] = field(default_factory=lambda: {"default": 30.0})
    floor: dict[str, float] = field(default_factory=lambda: {"default": 0.3})
    importance_weights: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    default_importance: str | None = None
    access: Literal["none", "metadata", "replay"] = "metadata"
    access_step: float = 0.1
    ledger: AccessLedger | None = None

    def _per_kind(self, table: dict[str, float], kinds: np.ndarray) -> np.ndarray:
        default = float(table.get("default", next(iter(table.values()))))
        return np.array([float(table.get(k, default)) if k is not None else default for k in kinds])

    def access_counts(self, query: Query, candidates: Candidates) -> np.ndarray:
        if self.access == "none":
            return np.zeros(len(candidates))
        if self.access == "metadata":
            return metadata_access(candidates.corpus, candidates.index, query)
        if self.access == "replay":
            if self.ledger is None:
                raise ValueError("decay.access=replay needs a ledger (retrieval.aging.AccessLedger)")
            return self.ledger.counts(candidates.corpus, candidates.index)
        raise ValueError(f"decay.access must be none, metadata or replay, not {self.access!r}")

    def __call__(self, query: Query, candidates: Candidates) -> Candidates:
        kinds = candidates.attribute(self.kind_field)
        age = np.maximum(0.0, epoch_days(query.now) - created_days(candidates.corpus)[candidates.index])
        fresh = recency(age, self._per_kind(self.floor, kinds), self._per_kind(self.half_life_days, kinds))
        levels = candidates.attribute("importance")
        if self.default_importance is not None:
            levels = np.array(
                [lv if lv is not None else self.default_importance for lv in levels], dtype=object
            )
        access = self.access_counts(query, candidates)
        weight = importance_weight(levels, access, self.importance_weights, self.access_step)
        extra = {"age_days": age, "recency": fresh, "access_count": access, "importance_weight": weight}
        out = candidates.with_score("decay", candidates.score * fresh * weight, extra=extra)
        if self.access == "replay":
            self.ledger.record(out.corpus, out.index)
        return out
