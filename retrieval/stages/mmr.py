"""Rank stage: maximal marginal relevance (Carbonell & Goldstein 1998) over the top of the list.

Re-orders the best `pool` candidates (default 20) greedily: each step picks the candidate maximising
    lambda_mult * relevance - (1 - lambda_mult) * max cosine similarity to those already picked,
with relevance the current score min-max scaled to [0, 1] within the pool (fused RRF scores and
cosine scores live on different scales). lambda_mult = 1 keeps the order; lower trades relevance
for diversity (default 0.5). Candidates past the pool keep their order after it.

Memory vectors come from an injected encoder component (the same `SentenceEncoder` the dense channel
uses, `encoder: ${encoder}` in config), which reads them from its on-disk cache: the stage reads no
files itself. It embeds the memory's own text, not an enriched `embed_text`, since the shared
"[category] [domain:...]" prefix would make every pair look alike. The new score is 1/(1 + position)
(column `mmr`); the marginal value at each pick is kept in `mmr_marginal`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from retrieval.encoder import SentenceEncoder
from retrieval.fusion_arithmetic import minmax
from retrieval.stage import Range, RankStage
from retrieval.types import Candidates, Query


def mmr_order(
    relevance: np.ndarray, vectors: np.ndarray, lambda_mult: float
) -> tuple[np.ndarray, np.ndarray]:
    """Greedy MMR: positions in pick order and the marginal value at each pick (ties: earlier first)."""
    n = len(relevance)
    similarity = vectors @ vectors.T
    picked = np.zeros(n, dtype=bool)
    closest = np.full(n, -np.inf)  # max similarity to anything picked so far
    order, marginals = np.empty(n, dtype=np.int64), np.empty(n)
    for step in range(n):
        redundancy = np.where(np.isfinite(closest), closest, 0.0)
        value = np.where(picked, -np.inf, lambda_mult * relevance - (1 - lambda_mult) * redundancy)
        best = int(np.argmax(value))  # argmax returns the first of equal values: deterministic
        order[step], marginals[step] = best, value[best]
        picked[best] = True
        closest = np.maximum(closest, similarity[best])
    return order, marginals


@dataclass(frozen=True, kw_only=True)
class MMRDiversity(RankStage):
    name = "mmr"
    ranges = {"lambda_mult": Range(ge=0, le=1), "pool": Range(ge=1)}
    encoder: SentenceEncoder  # anything with encode(texts, role) -> vectors and fingerprint()
    lambda_mult: float = 0.5
    pool: int = 20

    def __call__(self, query: Query, candidates: Candidates) -> Candidates:
        n = min(self.pool, len(candidates))
        if n == 0:
            return candidates
        head = candidates.index[:n]
        texts = [candidates.corpus.memories[i].text for i in head]
        vectors = np.asarray(self.encoder.encode(texts, role="document"), dtype=np.float64)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = vectors / np.where(norms > 0, norms, 1.0)
        order, marginals = mmr_order(minmax(candidates.score[:n].astype(float)), vectors, self.lambda_mult)
        positions = np.concatenate([order, np.arange(n, len(candidates))])
        reordered = candidates.select(positions)
        marginal = np.concatenate([marginals, np.full(len(candidates) - n, np.nan)])
        rank_score = 1.0 / (1.0 + np.arange(len(candidates)))
        return reordered.with_score(self.name, rank_score, extra={"mmr_marginal": marginal})
