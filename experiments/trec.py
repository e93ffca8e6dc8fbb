"""TREC run files (`qid Q0 docid rank score tag`), so trec_eval, ranx and ir_measures can re-check us.

Those tools re-sort by score and break ties by document id, which would reorder our tied
candidates (RRF produces many ties). A score equal to the one above it is written one float step
lower (numpy.nextafter), so the file's order is exactly the harness's order and every score still
reads as the same value to 15 digits.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np

from retrieval.types import RankedList


def strictly_decreasing(scores: np.ndarray) -> np.ndarray:
    out = np.asarray(scores, dtype=np.float64).copy()
    for i in range(1, len(out)):
        if not out[i] < out[i - 1]:
            out[i] = np.nextafter(out[i - 1], -np.inf)
    return out


def write_run(ranked: Iterable[RankedList], path: str | Path, tag: str = "memeval") -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for r in ranked:
            for rank, (doc, score) in enumerate(
                zip(r.memory_ids, strictly_decreasing(r.scores), strict=True), 1
            ):
                fh.write(f"{r.query_id} Q0 {doc} {rank} {float(score)!r} {tag}\n")


def read_run(path: str | Path) -> dict[str, list[str]]:
    """Ranked doc ids per query, ordered by the file's rank column."""
    rows: dict[str, list[tuple[int, str]]] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                qid, _, doc, rank, *_ = line.split()
                rows.setdefault(qid, []).append((int(rank), doc))
    return {q: [d for _, d in sorted(v)] for q, v in rows.items()}
