"""Cross-tier fusion: merge the tiered channel's RRF scores across tiers into one ranking.

    score = tiered x weight[tier] x boost x strength x confidence
    boost = high_confidence_weight where a stated confidence > high_confidence, else 1

Sits after `TieredRetriever` (retrieval/retrievers/tiered.py). A missing strength or confidence counts as
1.0; a tier with no configured weight gets 1.0. Every candidate carries its tier as the `tier` column
(object array), next to `tier_weight`, `strength`, `confidence`, so a report can explain the order.
The factors depend on the memory only, so they are computed once per corpus and looked up per query.
The tiered channel's raw bm25 / dense scores and ranks come along as columns (a similarity floor
after fusion can read `dense` as it does after bm25 + dense + rrf).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from retrieval.stage import Fusion, Range
from retrieval.tiering import pd_isnull, tier_labels, unit_factor
from retrieval.types import Candidates, Corpus

# Per-corpus tables of the per-memory factors (they depend on the memory only, not the query).
_TABLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@dataclass(frozen=True, kw_only=True)
class TierFusion(Fusion):
    name = "tier_fusion"
    ranges = {
        "weights": Range(ge=0),
        "high_confidence": Range(ge=0, le=1),
        "high_confidence_weight": Range(ge=0),
    }
    channel: str = "tiered"
    default_tier: str = "observation"
    weights: dict[str, float] = field(default_factory=dict)  # per-tier fusion weight (missing -> 1.0)
    high_confidence: float = 0.85  # confidence above this earns high_confidence_weight
    high_confidence_weight: float = 1.2
    factors: bool = True  # multiply by strength x confidence

    @functools.cached_property
    def _key(self) -> str:
        return self.fingerprint()

    def table(self, corpus: Corpus) -> dict[str, np.ndarray]:
        """Tier, tier weight (x boost), strength, confidence and the whole multiplier, per memory."""
        slot = _TABLES.setdefault(corpus, {})
        if self._key not in slot:
            everyone = np.arange(len(corpus))
            tiers = tier_labels(corpus, everyone, self.default_tier)
            weight = np.array([float(self.weights.get(t, 1.0)) for t in tiers])
            strength = unit_factor(corpus.column("strength"))
            stated = corpus.column("confidence")
            confidence = unit_factor(stated)
            # Only a stated confidence earns the boost; a missing one counts 1.0 as a factor, nothing more.
            boost = np.where(
                ~pd_isnull(stated) & (confidence > self.high_confidence), self.high_confidence_weight, 1.0
            )
            multiplier = weight * boost * (strength * confidence if self.factors else 1.0)
            slot[self._key] = {
                "tier": tiers,
                "tier_weight": weight * boost,
                "strength": strength,
                "confidence": confidence,
                "multiplier": multiplier,
            }
        return slot[self._key]

    def __call__(self, corpus: Corpus, channels: Mapping[str, tuple[np.ndarray, np.ndarray]]) -> Candidates:
        if set(channels) != {self.channel}:
            raise ValueError(f"tier_fusion merges the {self.channel!r} channel only, got {sorted(channels)}")
        hits = channels[self.channel]
        index, raw = hits
        index = np.asarray(index, dtype=np.int64)
        raw = np.asarray(raw, dtype=np.float64)
        table = self.table(corpus)
        fused = raw * table["multiplier"][index]
        order = np.lexsort((index, -fused))
        cols = {
            **getattr(hits, "columns", {}),  # bm25, dense and their ranks, when the tiered channel kept them
            self.channel: raw,
            f"{self.channel}_rank": np.arange(1, len(index) + 1),
            **{name: table[name][index] for name in ("tier", "tier_weight", "strength", "confidence")},
            "fused": fused,
            "score": fused,
        }
        return Candidates(corpus, index[order], {k: v[order] for k, v in cols.items()})
