"""The arithmetic of fusing retrieval channels into one candidate list per query; the fusion stages
(retrieval/fusions/) and the stages that rescale scores (minmax) call it.

`rrf_fuse`: reciprocal rank fusion, score = sum over channels of w / (k + rank), k = 60 (Cormack et
al. 2009); rank-based, so channels on different score scales need no calibration.
`weighted_fuse`: weighted sum of per-query min-max normalised channel scores; a memory a channel
did not return contributes 0 from it.
Both keep every channel's raw score and rank as columns (NaN / 0 where a channel missed the memory).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from retrieval.types import Candidates, Corpus

Channels = Mapping[str, tuple[np.ndarray, np.ndarray]]


def _union(channels: Channels) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The union of the channels' memories, with each channel's raw score and 1-based rank (0 = missed)."""
    index = np.unique(np.concatenate([idx for idx, _ in channels.values()] or [np.empty(0, np.int64)]))
    columns: dict[str, np.ndarray] = {}
    for name, (idx, scores) in channels.items():
        pos = np.searchsorted(index, idx)
        raw = np.full(len(index), np.nan)
        raw[pos] = scores
        rank = np.zeros(len(index), dtype=np.int64)
        rank[pos] = np.arange(1, len(idx) + 1)
        columns[name], columns[f"{name}_rank"] = raw, rank
    return index.astype(np.int64), columns


def rrf_fuse(channels: Channels, *, k: int = 60, weights: Mapping[str, float] | None = None):
    index, columns = _union(channels)
    fused = np.zeros(len(index))
    for name in channels:
        rank = columns[f"{name}_rank"]
        w = 1.0 if weights is None else weights.get(name, 1.0)
        fused += np.where(rank > 0, w / (k + rank), 0.0)
    return index, fused, columns


def minmax(scores: np.ndarray) -> np.ndarray:
    """Scale to [0, 1] within one query; a constant list maps to 1 (all equally good)."""
    if len(scores) == 0:
        return scores
    scores = np.asarray(scores)
    lo, hi = scores.min(), scores.max()  # the methods: np.min's dispatch was a tenth of a rank stage's time
    return np.ones_like(scores) if hi == lo else (scores - lo) / (hi - lo)


def weighted_fuse(channels: Channels, *, weights: Mapping[str, float] | None = None):
    index, columns = _union(channels)
    fused = np.zeros(len(index))
    for name, (idx, scores) in channels.items():
        w = 1.0 / len(channels) if weights is None else weights.get(name, 0.0)
        norm = np.zeros(len(index))
        norm[np.searchsorted(index, idx)] = minmax(scores)
        columns[f"{name}_norm"] = norm
        fused += w * norm
    return index, fused, columns


def _candidates(corpus: Corpus, index, fused, columns) -> Candidates:
    # Sort by fused score; ties broken by corpus index so the order never depends on channel order.
    order = np.lexsort((index, -fused))
    cols = {**{k: v[order] for k, v in columns.items()}, "fused": fused[order], "score": fused[order]}
    return Candidates(corpus, index[order], cols)
