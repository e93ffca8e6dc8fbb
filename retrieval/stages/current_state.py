"""Current-state ranking (rank, knowledge updates): of near-duplicates, prefer the most recent.

Sits before `instruction_boost` (query, candidates -> candidates). Among the top `window`
candidates, two memories are near-duplicates about the same subject when the Jaccard similarity of
their content-token sets (retrieval.tokenize: lower-cased, stop words dropped) is at least
`min_jaccard`; one matrix product gives every pair's overlap. Recency is the order of the `recency`
attributes (lexicographic: `created_at` ISO date, then conversation `position`); a missing value is
oldest. The rule, on the per-query min-max normalised score:
- a memory with an older near-duplicate ranked above it is lifted to that duplicate's score plus
  `margin`, so the latest statement of a fact sits just above the one it updates;
- a memory with a newer near-duplicate (it is superseded) loses `penalty` (0 by default: on BEAM
  the original statement is evidence too, so it is kept, only moved below its update).
Candidates outside the window keep their order below it. Columns kept: `superseded`, `lifted`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from retrieval.fusion_arithmetic import minmax
from retrieval.stage import Range, RankStage
from retrieval.tokenize import tokenize
from retrieval.types import Candidates, Query


def jaccard_matrix(texts: Sequence[str]) -> np.ndarray:
    """Pairwise Jaccard similarity of content-token sets (diagonal 0)."""
    token_sets = [set(tokenize(t)) for t in texts]
    vocab = {tok: i for i, tok in enumerate(sorted(set().union(*token_sets)))} if token_sets else {}
    # Integer matmul: exact counts, and no BLAS threads (which spin-wait on a busy machine).
    x = np.zeros((len(texts), len(vocab)), dtype=np.int32)
    for row, tokens in enumerate(token_sets):
        x[row, [vocab[t] for t in tokens]] = 1
    inter = (x @ x.T).astype(np.float64)
    sizes = x.sum(axis=1).astype(np.float64)
    union = sizes[:, None] + sizes[None, :] - inter
    sim = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
    np.fill_diagonal(sim, 0.0)
    return sim


def recency_rank(columns: Sequence[np.ndarray]) -> np.ndarray:
    """0 = oldest; ties share a rank. Each column sorts by its own values; None sorts first."""
    keys = []
    for values in columns:
        as_text = np.array(["" if v is None else v for v in values], dtype=object)
        if all(isinstance(v, (int, float)) for v in as_text if v != ""):
            numeric = np.array([-np.inf if v == "" else float(v) for v in as_text])
            keys.append(np.unique(numeric, return_inverse=True)[1])
        else:
            keys.append(np.unique(as_text.astype(str), return_inverse=True)[1])
    order = np.lexsort(tuple(reversed(keys)))
    stacked = np.stack(keys, axis=1)[order]
    new_group = np.r_[True, np.any(stacked[1:] != stacked[:-1], axis=1)]
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.cumsum(new_group) - 1
    return rank


@dataclass(frozen=True, kw_only=True)
class CurrentState(RankStage):
    name = "current_state"
    ranges = {"min_jaccard": Range(ge=0, le=1), "window": Range(ge=0), "margin": Range(), "penalty": Range()}
    min_jaccard: float = 0.5
    window: int = 30
    recency: Sequence[str] = ("created_at", "position")
    margin: float = 0.001
    penalty: float = 0.0

    def __call__(self, query: Query, candidates: Candidates) -> Candidates:
        n = min(self.window, len(candidates))
        if n < 2:
            return candidates
        head = np.arange(n)
        sim = jaccard_matrix(candidates.attribute("text")[head])
        rank = recency_rank([candidates.attribute(c)[head] for c in self.recency])
        dup = sim >= self.min_jaccard
        newer = rank[None, :] > rank[:, None]  # newer[i, j]: j is more recent than i
        base = minmax(candidates.score)
        head_score = base[head]
        superseded = np.any(dup & newer, axis=1)
        # For each i: the best score among its older near-duplicates (-inf if none).
        older_best = np.where(dup & newer.T, head_score[None, :], -np.inf).max(axis=1)
        lifted = older_best + self.margin > head_score
        score = base.copy()
        score[head] = np.where(lifted, older_best + self.margin, head_score) - self.penalty * superseded
        # Keep the window above the rest, so the stage only reorders inside it.
        if n < len(candidates):
            score[head] = np.maximum(score[head], base[n] + self.margin)
        flags = np.zeros(len(candidates), dtype=bool), np.zeros(len(candidates), dtype=bool)
        flags[0][head], flags[1][head] = superseded, lifted
        return candidates.with_score(self.name, score, extra={"superseded": flags[0], "lifted": flags[1]})
