"""per_query.csv read back: one row per query (its labels, what it returned, its metric values)."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd

from experiments.csv_cells import original_column, original_text

FILENAME = "per_query.csv"


def read_per_query(source: str | Path | io.StringIO) -> pd.DataFrame:
    """per_query.csv as written (a path, or its text in a StringIO): ids and labels are strings, always
    (a query id `NA`, `null` or `1.0` stays that id: pandas' default NA parsing would make the first two
    NaN). Only an empty cell is missing (what `to_csv` writes for NaN/None)."""
    header = pd.read_csv(source, nrows=0).columns
    if isinstance(source, io.StringIO):
        source.seek(0)
    as_text = {c: str for c in header if c in ("query_id", "cluster") or c.startswith("label.")}
    frame = pd.read_csv(source, index_col="query_id", dtype=as_text, keep_default_na=False, na_values=[""])
    frame.index = frame.index.astype(str).map(original_text)  # the text the writer made spreadsheet-safe
    for column in (c for c in frame.columns if c.startswith("label.")):
        frame[column] = original_column(frame[column])
    return frame
