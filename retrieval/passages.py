"""Long memories as overlapping passages, and passage scores folded back to their memory.

Used by the passage channel (retrieval/retrievers/passage.py): a memory longer than `size` words is
cut into windows of `size` words every `stride` words (the last window ends at the memory's end, so
its tail is always read); a memory of `size` words or fewer is one passage, its text unchanged, so
its embedding is the whole-message one already in the cache. Windows are in words (whitespace
split), not model tokens: the split is deterministic and the same for every scorer and model.
"""

from __future__ import annotations

import numpy as np


def split_passages(text: str, size: int, stride: int) -> list[str]:
    """Overlapping windows of `size` words, `stride` words apart; [text] when it has <= size words."""
    if size < 1 or not 1 <= stride <= size:
        raise ValueError(f"need size >= 1 and 1 <= stride <= size, got size={size}, stride={stride}")
    words = text.split()
    if len(words) <= size:
        return [text]
    starts = list(range(0, len(words) - size + 1, stride))
    if starts[-1] + size < len(words):
        starts.append(len(words) - size)
    return [" ".join(words[s : s + size]) for s in starts]


def aggregate_passages(scores: np.ndarray, owner: np.ndarray, n_memories: int, top_m: int) -> np.ndarray:
    """Each memory's score: the sum of its `top_m` best passage scores (top_m=1 is the max).

    `owner[i]` is the memory (0..n_memories-1) of passage i; every memory must own a passage.
    """
    scores = np.asarray(scores, dtype=np.float64)
    owner = np.asarray(owner, dtype=np.int64)
    order = np.lexsort((-scores, owner))  # by memory, best passage first
    grouped = owner[order]
    first = np.searchsorted(grouped, grouped, side="left")
    keep = np.arange(len(order)) - first < top_m
    out = np.zeros(n_memories)
    np.add.at(out, grouped[keep], scores[order][keep])
    return out
