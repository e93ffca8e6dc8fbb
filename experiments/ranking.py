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
    with open(path, "w", encoding="utf-8", newline="") as fh:
        out = csv.writer(fh)
        out.writerow([*FIXED, *columns])
        for r in ranked:
            judged = qrels.get(r.query_id, {})
            keep = [i for i, m in enumerate(r.memory_ids) if i < k or (judged.get(m) or 0) > 0]
            # Each column's kept cells at once (tolist gives Python scalars): per-cell numpy indexing was
            # most of a sweep job's write time.
            cells = [_cells(r.columns[c], keep) if c in r.columns else [""] * len(keep) for c in columns]
            for j, i in enumerate(keep):
                grade = judged.get(r.memory_ids[i])
                out.writerow(
                    [
                        r.query_id,
                        i + 1,
                        r.memory_ids[i],
                        "" if grade is None else grade,
                        *(c[j] for c in cells),
                    ]
                )


def _cells(column, keep: list[int]) -> list[object]:
    if isinstance(column, np.ndarray) and column.dtype.kind == "f":  # what _cell does to each float
        return ["" if v != v else repr(v) for v in column[keep].tolist()]
    values = column[keep].tolist() if isinstance(column, np.ndarray) else [column[i] for i in keep]
    return [_cell(v) for v in values]


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
