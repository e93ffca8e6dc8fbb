"""TREC run files (`qid Q0 docid rank score tag`), so trec_eval, ranx and ir_measures can re-check us.

Those tools re-sort by score and break ties by document id, which would reorder our tied
candidates (RRF produces many ties), and pytrec_eval resolves scores only to about float32
precision. So a score that does not sit clearly below the one above it is written 2e-6 (relative)
lower: the file's order is exactly the harness's order, and a written score differs from the
harness's only where it tied, in the sixth significant digit.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np

from retrieval.types import RankedList

TIE_GAP = 2e-6  # relative; float32 resolves ~1.2e-7


def strictly_decreasing(scores: np.ndarray) -> np.ndarray:
    return np.array(_strictly_decreasing(np.asarray(scores, dtype=np.float64).tolist()), dtype=np.float64)


def _strictly_decreasing(out: list[float]) -> list[float]:
    # Python floats, not numpy scalars: the same arithmetic, several times faster per element.
    for i in range(1, len(out)):
        gap = max(abs(out[i - 1]), 1e-9) * TIE_GAP
        if out[i] > out[i - 1] - gap:
            out[i] = out[i - 1] - gap
    return out


def write_run(ranked: Iterable[RankedList], path: str | Path, tag: str = "memeval") -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for r in ranked:
            scores = _strictly_decreasing(np.asarray(r.scores, dtype=np.float64).tolist())
            fh.writelines(
                f"{r.query_id} Q0 {doc} {rank} {score!r} {tag}\n"
                for rank, (doc, score) in enumerate(zip(r.memory_ids, scores, strict=True), 1)
            )


def read_run(path: str | Path) -> dict[str, list[str]]:
    """Ranked doc ids per query, ordered by the file's rank column."""
    rows: dict[str, list[tuple[int, str]]] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                qid, _, doc, rank, *_ = line.split()
                rows.setdefault(qid, []).append((int(rank), doc))
    return {q: [d for _, d in sorted(v)] for q, v in rows.items()}
