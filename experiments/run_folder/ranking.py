"""ranking.csv: the top of each query's ranking with every score column, beside a run's run.trec.

A TREC run file keeps only the final score; a report that explains a ranking needs the columns that
put each memory there (bm25, dense, fused, every rank stage's own column). `experiments.run` writes,
per query, the top `k` (the largest cutoff among the run's metrics, at least the suite's k) plus every
judged-relevant memory ranked lower, one row each: query_id, rank, memory_id, relevance (its grade,
0 when judged not relevant, empty when unjudged), then `score` and the other columns in pipeline order.
The comparison report's per-query drill-down reads it back (`read_ranking`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.csv_cells import original_column, original_text, safe_text
from experiments.run_folder.float_text import float_reprs
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
    # Built column by column over all queries, then joined into lines: cell by cell (and csv.writer's
    # per-cell work), this file was the largest part of a sweep job's write time. The text is exactly what
    # csv.writer writes (tests/run/test_run_files.py compares the two on hostile ids and cells).
    keeps: list[list[int]] = []
    fixed: list[list[str]] = [[], [], [], []]
    for r in ranked:
        judged = qrels.get(r.query_id, {})
        keep = list(range(min(k, len(r.memory_ids))))
        keep += _positions_below(r.memory_ids, [m for m, grade in judged.items() if (grade or 0) > 0], k)
        keeps.append(keep)
        ids = [r.memory_ids[i] for i in keep]
        fixed[0] += [_quoted(safe_text(str(r.query_id)))] * len(keep)
        fixed[1] += [str(i + 1) for i in keep]
        fixed[2] += [_quoted(safe_text(m) if isinstance(m, str) else _text(m)) for m in ids]
        fixed[3] += ["" if (g := judged.get(m)) is None else _quoted(_text(g)) for m in ids]
    rows = _Rows(keeps, [len(r.memory_ids) for r in ranked])
    texts = [_column_texts([r.columns.get(c) for r in ranked], rows) for c in columns]
    lines = [
        ",".join(_quoted(safe_text(c)) for c in [*FIXED, *columns]),
        *map(",".join, zip(*fixed, *texts, strict=True)),
    ]
    with open(path, "w", encoding="utf-8", newline="") as fh:
        fh.write(_EOL.join(lines) + _EOL)


def _positions_below(ids: Sequence[str], wanted: list[str], k: int) -> list[int]:
    """Positions, ascending, of the `wanted` ids ranked at k or below (a ranking holds each id once):
    a few C-level searches, where testing every id below k was most of this file's time."""
    found = []
    for m in wanted:
        try:
            found.append(ids.index(m, k))
        except ValueError:  # not ranked below k
            continue
    return sorted(found)


_EOL = "\r\n"  # csv.writer's line terminator
_SPECIAL = re.compile('[,"\r\n]')


def _quoted(text: str) -> str:
    """A cell as csv.writer's minimal quoting writes it: quoted when it holds a comma, quote or line break."""
    return '"' + text.replace('"', '""') + '"' if _SPECIAL.search(text) else text


def _text(value: object) -> str:
    """A cell's text as csv.writer makes it (None empty, a float its repr, anything else str), a text cell
    made safe for spreadsheets (experiments.csv_cells)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return safe_text(value)
    return repr(value) if isinstance(value, float) else str(value)


class _Rows:
    """Which cells of each query's columns the file keeps, as positions in the columns laid end to end."""

    def __init__(self, keeps: list[list[int]], sizes: list[int]) -> None:
        self.keeps, self.sizes = keeps, sizes
        self.picks = _positions(keeps, sizes)

    def positions(self, sizes: list[int]) -> np.ndarray:
        """The kept positions for columns of these lengths (the ranked ids' lengths, nearly always)."""
        return self.picks if sizes == self.sizes else _positions(self.keeps, sizes)


def _positions(keeps: list[list[int]], sizes: list[int]) -> np.ndarray:
    starts = (np.cumsum(sizes, dtype=np.int64) - np.asarray(sizes, dtype=np.int64)).tolist()
    return np.array(
        [i + start for keep, start in zip(keeps, starts, strict=True) for i in keep], dtype=np.intp
    )


def _column_texts(parts: list, rows: _Rows) -> list[str]:
    """One column's cells over all queries (`parts`: each query's column or None), in row order: floats
    as repr text (NaN empty), a query without the column empty."""
    kinds = {p.dtype.kind if isinstance(p, np.ndarray) and p.ndim == 1 else None for p in parts}
    if len(kinds) == 1 and (kind := kinds.pop()) in ("f", "i", "u", "b"):
        # The common case: every query has it as an array of one kind. One gather, one formatting pass.
        values = np.concatenate(parts)[rows.positions([len(p) for p in parts])]
        return _floats(values) if kind == "f" else list(map(str, values.tolist()))
    out: list[str] = []
    for part, keep in zip(parts, rows.keeps, strict=True):
        if part is None:
            out += [""] * len(keep)
        elif isinstance(part, np.ndarray) and part.dtype.kind == "f":
            out += _floats(part[keep])
        else:
            values = part[keep].tolist() if isinstance(part, np.ndarray) else [part[i] for i in keep]
            out += [_quoted(_text(_cell(v))) for v in values]
    return out


def _floats(values: np.ndarray) -> list[str]:
    texts = float_reprs(values)
    return ["" if t == "nan" else t for t in texts] if np.isnan(values).any() else texts


def read_ranking(path: str | Path) -> pd.DataFrame:
    """ranking.csv as written: ids are strings (never parsed as numbers or NA), score columns numeric
    where they are numbers, text cells as they were before writing made them safe for spreadsheets
    (experiments.csv_cells); rows in (query, rank) order."""
    frame = pd.read_csv(
        path,
        dtype={"query_id": str, "memory_id": str},
        keep_default_na=False,
        na_values={c: [""] for c in ("relevance",)},
    )
    frame.columns = [original_text(str(c)) for c in frame.columns]
    for column in ("query_id", "memory_id"):
        frame[column] = original_column(frame[column])
    for column in frame.columns[len(FIXED) :]:
        numeric = pd.to_numeric(frame[column].replace("", np.nan), errors="coerce")
        if numeric.notna().sum() == (frame[column] != "").sum():  # every non-empty cell is a number
            frame[column] = numeric
        elif frame[column].dtype == object or pd.api.types.is_string_dtype(frame[column].dtype):
            frame[column] = original_column(frame[column])
    return frame
