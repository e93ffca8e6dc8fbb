"""Names that become paths or file fields, checked once, before any work; and the check that what a
writer writes stays under its root.

A study plan's name names its report folder, a row's name its run folder, a variant's name is the
tag column of every `run.trec` line, a suite's and a variant's names make the MLflow run name and
dataset name, label names and values are columns and groups of `per_query.csv` and the report's tables,
`memeval-report --name` names the report folder. A name such as `..`, `a/b` or one holding a newline
would write outside its folder or break the file it is a field of. So each is checked here, by
`name_problem(kind, value)`, where the config, plan or suite is validated (config_check, study.plan,
suites.suite.check_suite, report.cli), and the run stops with exit 2 before anything is computed.

The rules (docs/suites.md, "Names"):
- a non-empty string of at most MAX_NAME_CHARS characters (MLflow's shortest limit a name reaches is
  500, its dataset name: a longer suite name would fail only after the whole run);
- no control, format or line-separator characters (U+0000-U+001F, U+007F-U+009F, zero-width and
  bidirectional marks, U+2028/9), none of which a file field or a folder name should hold;
- kinds that name a folder or file (plan, row, suite id, report): not `.` or `..`, no `/` or `\\`;
- kinds that are a whitespace-separated field of a file (a variant name is the TREC run tag): no
  whitespace at all.

`under_root(root, path)` is the writers' last line of defence: the path, resolved (symlinks and `..`
followed), must lie inside the root, resolved.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import Any

MAX_NAME_CHARS = 200
# What each kind of name becomes, and so which rules hold for it.
PATH_KINDS = frozenset({"plan", "row", "suite id", "report"})  # a folder name
FIELD_KINDS = frozenset({"variant"})  # a whitespace-separated file field (the TREC run tag)
KINDS = PATH_KINDS | FIELD_KINDS | {"suite", "label name", "label value"}
_CONTROL_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


class UnsafeNameError(ValueError):
    """A name that cannot become a path or a file field, or a path that would leave its root."""


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def name_problem(kind: str, value: Any) -> str | None:
    """Why `value` cannot be a name of this kind (plan, row, suite id, report, variant, suite, label
    name, label value), or None when it can."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind of name {kind!r} (known: {', '.join(sorted(KINDS))})")
    if not isinstance(value, str) or not value.strip():
        return f"must be a non-empty string, got {_show(value)}"
    if len(value) > MAX_NAME_CHARS:
        return f"a {kind} name of {len(value):,} characters, over the limit of {MAX_NAME_CHARS}"
    for position, char in enumerate(value):
        if unicodedata.category(char) in _CONTROL_CATEGORIES:
            return (
                f"must not contain control characters, got {_show(value)} "
                f"(U+{ord(char):04X} at position {position})"
            )
        if kind in FIELD_KINDS and char.isspace():
            return (
                f"must not contain whitespace, got {_show(value)} (U+{ord(char):04X} at position "
                f"{position}; a {kind} name is the tag field of each run.trec line, split on whitespace)"
            )
    if kind in PATH_KINDS:
        if value in (".", ".."):
            return f"a {kind} name names a folder: it may not be {value!r}"
        if "/" in value or "\\" in value:
            return f"a {kind} name names a folder: it may not contain / or \\, got {_show(value)}"
    return None


def check_name(kind: str, value: Any, where: str | None = None) -> str:
    """The name itself, or UnsafeNameError naming `where` (the config key or field it came from)."""
    problem = name_problem(kind, value)
    if problem is not None:
        raise UnsafeNameError(f"{where}: {problem}" if where else problem)
    return value


def under_root(root: str | Path, path: str | Path) -> Path:
    """`root / path`, after checking that it resolves (`..` and symlinks followed) inside `root`."""
    base = Path(root).resolve()
    target = (base / path).resolve()
    if target != base and base not in target.parents:
        raise UnsafeNameError(f"{path} resolves to {target}, outside its folder {base}: refused")
    return Path(root) / path
