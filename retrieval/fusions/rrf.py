"""The `rrf` fusion stage: reciprocal rank fusion of the channels, score = sum over channels of
w / (k + rank) (retrieval.fusion_arithmetic.rrf_fuse); rank-based, so channels on different score
scales need no calibration."""

from __future__ import annotations

from dataclasses import dataclass

from retrieval.fusion_arithmetic import Channels, _candidates, rrf_fuse
from retrieval.stage import Fusion, Range
from retrieval.types import Candidates, Corpus


@dataclass(frozen=True, kw_only=True)
class RRFFusion(Fusion):
    name = "rrf"
    ranges = {"k": Range(gt=0), "weights": Range()}
    k: int = 60
    weights: dict[str, float] | None = None

    def __call__(self, corpus: Corpus, channels: Channels) -> Candidates:
        return _candidates(corpus, *rrf_fuse(channels, k=self.k, weights=self.weights))
