"""CSV text cells that a spreadsheet shows as text, never runs as a formula; and reading them back.

Researchers open per_query.csv and ranking.csv in spreadsheets. A label or id from a suite such as
`=cmd|'/c calc'!A0` or `=HYPERLINK(...)` would be a formula there (CSV injection). Every CSV writer in
memeval passes its text cells through `safe_text` (OWASP's rule): a cell beginning with `=`, `+`, `-`,
`@`, a tab or a carriage return gets a leading `'`, which a spreadsheet hides and which makes the rest
text. A cell that itself begins with `'` gets one too, so the rule is reversible: the readers
(experiments.track.finished_runs.read_per_query, experiments.run_folder.ranking.read_ranking) pass text
cells through `original_text` and get the suite's exact ids and labels back. Numbers are not text
cells: -0.5 stays the number -0.5.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

# The first characters a spreadsheet reads as the start of a formula (OWASP), and the escape itself.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "'")


def safe_text(text: str) -> str:
    """A text cell as written: `'` before one that a spreadsheet would run as a formula."""
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def original_text(cell: str) -> str:
    """A text cell as read back: the value `safe_text` was given."""
    return cell[1:] if cell.startswith("'") else cell


def original_column(column: pd.Series) -> pd.Series:
    """A text column as read back: `original_text` of each str cell; missing cells stay missing."""
    return column.map(lambda v: original_text(v) if isinstance(v, str) else v)


def _safe(value: Any) -> Any:
    return safe_text(value) if isinstance(value, str) else value


def safe_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of a frame about to be written with `to_csv`: every str cell (and index entry) made safe,
    numbers untouched."""
    out = frame.copy()
    for column in out.columns:
        if out[column].dtype == object or pd.api.types.is_string_dtype(out[column].dtype):
            out[column] = out[column].map(_safe)
    if out.index.dtype == object or pd.api.types.is_string_dtype(out.index.dtype):
        out.index = out.index.map(_safe)
    return out
