"""The shared "fallback" of the advisory gates: relax a filter when too few results survive it.

Gates (intent routing, actionability, score floors) drop candidates rather than demote them ("fewer,
better results"). Dropping can leave an agent with nothing, so each gate has a `min_results` option
(default 3, 0 switches the fallback off): when fewer survive, the gate is relaxed just enough, letting
back the dropped candidates its own criterion rates best (ties in the current rank order), until
`min_results` survive or nothing is left. The candidates a fallback let back are flagged in a boolean
column `<gate>_relaxed`, so a report can count how often a gate gave way.
"""

from __future__ import annotations

import numpy as np

from retrieval.types import Candidates


def keep_or_relax(
    candidates: Candidates, keep: np.ndarray, priority: np.ndarray, min_results: int, gate: str
) -> Candidates:
    """Keep the `keep` mask, in rank order; relax by `priority` (higher first) below `min_results`."""
    keep = np.asarray(keep, dtype=bool).copy()
    short = min(min_results, len(candidates)) - int(keep.sum())
    relaxed = np.zeros(len(candidates), dtype=bool)
    if short > 0:
        dropped = np.flatnonzero(~keep)
        # lexsort: last key is primary. Best priority first, then earlier rank (stable, deterministic).
        best = dropped[np.lexsort((dropped, -np.asarray(priority, dtype=float)[dropped]))][:short]
        relaxed[best] = True
        keep |= relaxed
    out = Candidates(candidates.corpus, candidates.index, {**candidates.columns, f"{gate}_relaxed": relaxed})
    return out.select(np.flatnonzero(keep))
