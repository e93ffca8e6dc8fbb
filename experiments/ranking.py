"""ranking.csv: the top of each query's ranking with every score column, beside a run's run.trec.

A TREC run file keeps only the final score; a report that explains a ranking needs the columns that
put each memory there (bm25, dense, fused, every rank stage's own column). `experiments.run` writes,
per query, the top `k` (the largest cutoff among the run's metrics, at least the suite's k) plus every
judged-relevant memory ranked lower, one row each: query_id, rank, memory_id, relevance (its grade,
0 when judged not relevant, empty when unjudged), then `score` and the other columns in pipeline order.
The comparison report's per-query drill-down reads it back (`read_ranking`).
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.float_text import float_reprs
from retrieval.types import RankedList

FILENAME = "ranking.csv"
FIXED = ("query_id", "rank", "memory_id", "relevance")
_CUTOFF = re.compile(r"@([0-9]+)$")


def saved_depth(metrics: Iterable[str], suite_k: int) -> int:
    """How many ranks per query the file keeps: enough for every cutoff the run reports."""
    cutoffs = [int(m.group(1)) for m in map(_CUTOFF.search, metrics) if m]
    return max([int(suite_k), *cutoffs])


def _cell(value: object) -> object:
    if isinstance(value, float | np.floating):
        return "" if np.isnan(value) else repr(float(value))
    if isinstance(value, np.generic):
        return value.item()
    return value


def write_ranking(
    ranked: Sequence[RankedList], qrels: Mapping[str, Mapping[str, int]], path: str | Path, k: int
) -> None:
    columns: list[str] = ["score"]
    for r in ranked:  # every column any query has, in pipeline order; score first
        columns += [c for c in r.columns if c not in columns]
    # Written column by column over all queries (one `float_reprs` call a column): cell by cell, this file
    # was most of a sweep job's write time.
    fixed: list[list[object]] = [[], [], [], []]
    cells: dict[str, list[object]] = {c: [] for c in columns}
    for r in ranked:
        judged = qrels.get(r.query_id, {})
        relevant = {m for m, grade in judged.items() if (grade or 0) > 0}
        keep = list(range(min(k, len(r.memory_ids))))
        keep += [i for i, m in enumerate(r.memory_ids[k:], k) if m in relevant] if relevant else []
        fixed[0] += [r.query_id] * len(keep)
        fixed[1] += [i + 1 for i in keep]
        fixed[2] += [r.memory_ids[i] for i in keep]
        fixed[3] += ["" if (g := judged.get(r.memory_ids[i])) is None else g for i in keep]
        for c in columns:
            column = r.columns.get(c)
            cells[c].append([""] * len(keep) if column is None else _kept(column, keep))
    with open(path, "w", encoding="utf-8", newline="") as fh:
        out = csv.writer(fh)
        out.writerow([*FIXED, *columns])
        out.writerows(zip(*fixed, *(_texts(cells[c]) for c in columns), strict=True))


def _kept(column, keep: list[int]) -> object:
    """A column's kept cells: a float array stays an array (printed with the others), the rest as cells."""
    if isinstance(column, np.ndarray) and column.dtype.kind == "f":
        return column[keep]
    if isinstance(column, np.ndarray) and column.dtype.kind in "iub":  # tolist gives Python scalars
        return column[keep].tolist()
    values = column[keep].tolist() if isinstance(column, np.ndarray) else [column[i] for i in keep]
    return [_cell(v) for v in values]


def _texts(parts: list) -> list[object]:
    """One column's cells over all queries; float arrays as `repr` text (all in one call), NaN empty."""
    arrays = [p for p in parts if isinstance(p, np.ndarray)]
    values = np.concatenate(arrays) if arrays else np.zeros(0)
    texts = float_reprs(values)
    if np.isnan(values).any():
        texts = ["" if t == "nan" else t for t in texts]
    if len(arrays) == len(parts):
        return texts
    out: list[object] = []
    at = 0
    for part in parts:
        if isinstance(part, np.ndarray):
            out += texts[at : at + len(part)]
            at += len(part)
        else:
            out += part
    return out


def read_ranking(path: str | Path) -> pd.DataFrame:
    """ranking.csv as written: ids are strings (never parsed as numbers or NA), score columns numeric
    where they are numbers; rows in (query, rank) order."""
    frame = pd.read_csv(
        path,
        dtype={"query_id": str, "memory_id": str},
        keep_default_na=False,
        na_values={c: [""] for c in ("relevance",)},
    )
    for column in frame.columns[len(FIXED) :]:
        numeric = pd.to_numeric(frame[column].replace("", np.nan), errors="coerce")
        if numeric.notna().sum() == (frame[column] != "").sum():  # every non-empty cell is a number
            frame[column] = numeric
    return frame
