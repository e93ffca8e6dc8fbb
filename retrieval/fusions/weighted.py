"""The `weighted` fusion stage: a weighted sum of per-query min-max normalised channel scores
(retrieval.fusion_arithmetic.weighted_fuse); a memory a channel did not return contributes 0 from it."""

from __future__ import annotations

from dataclasses import dataclass, field

from retrieval.fusion_arithmetic import Channels, _candidates, weighted_fuse
from retrieval.stage import Fusion, Range
from retrieval.types import Candidates, Corpus


@dataclass(frozen=True, kw_only=True)
class WeightedFusion(Fusion):
    name = "weighted"
    ranges = {"weights": Range()}
    weights: dict[str, float] = field(default_factory=lambda: {"bm25": 0.5, "dense": 0.5})

    def __call__(self, corpus: Corpus, channels: Channels) -> Candidates:
        return _candidates(corpus, *weighted_fuse(channels, weights=self.weights))
