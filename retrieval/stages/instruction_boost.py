"""Instruction boost (rank): lift candidates tagged `fact_role = "instruction"`.

Sits after current-state ranking and before the conciseness penalty (query, candidates ->
candidates). Score scale: the incoming `score` is min-max normalised within the query (best = 1,
worst = 0) and `weight` is added to every tagged candidate, then the list is re-sorted (stable). So
a weight is a fraction of this query's score range, whatever the fusion (RRF scores are ~0.03,
weighted-sum scores ~1): weight 0.15 lifts an instruction over any untagged candidate that scored
less than 15% of the range above it. The raw columns (bm25, dense, fused...) are kept; the
normalised input is kept as `instruction_boost_base`.

`max_boosted` (None = every tagged candidate) limits the boost to the N best-ranked
tagged candidates of the query: a conversation holds several standing instructions, and the one a
question tests is usually the tagged memory retrieval already ranks highest, so lifting only it
costs the other abilities at most N slots of the top k.

Off switch: `enabled: false` drops the stage (pipeline level); weight 0 returns the input
candidates untouched. Both give rankings bit-identical to a pipeline without the stage.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from retrieval.stage import BatchRankStage, Range
from retrieval.types import CandidateBatch


@dataclass(frozen=True, kw_only=True)
class InstructionBoost(BatchRankStage):
    name = "instruction_boost"
    ranges = {"weight": Range(), "max_boosted": Range(ge=0)}
    weight: float = 0.15
    fact_role: str = "instruction"
    max_boosted: int | None = None

    def rank_all(self, candidates: CandidateBatch) -> CandidateBatch:
        if self.weight == 0 or len(candidates) == 0:
            return candidates
        tagged = candidates.attribute("fact_role") == self.fact_role
        if self.max_boosted is not None:
            # Candidates arrive best first: keep the boost for the best-ranked tagged ones only.
            tagged &= candidates.running_count(tagged) <= self.max_boosted
        base = candidates.minmax(candidates.score)
        return candidates.with_score(
            self.name, base + self.weight * tagged.astype(np.float64), extra={f"{self.name}_base": base}
        )
