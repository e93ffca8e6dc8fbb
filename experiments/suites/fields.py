"""The field rules every suite obeys, one copy each, shared by the loaders and `check_suite`.

Each rule is a function `value -> message | None` (None: fine), so a loader can attach the file, line
and field it knows. The rules (docs/suites.md, "Validation rules"):
- ids (memory, query, conversation, qrels columns): a non-empty string with no whitespace and no
  control or format characters (a TREC run or qrels file splits on whitespace: an id with a space
  would write a 7-column line), in Unicode NFC form. A non-NFC id is rejected, not normalised: the
  qrels must name the same bytes the records do, and silently rewriting ids would break that link.
- text: a non-empty string (not blank) of at most MAX_TEXT_CHARS characters;
- numbers: finite (JSON has no NaN or Infinity; Python's json reads them unless told not to);
- every string anywhere in a record: valid Unicode, no lone surrogate (`"\\ud800"` in JSON text),
  which could never be written back as UTF-8;
- integers in text files (qrels grades and iteration column): ASCII digits only (`int()` would
  accept full-width digits).
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Iterator, Mapping
from typing import Any

from experiments.names import name_problem

# The largest cutoff (a suite's k, a metric's @k, a run's depth, a stage's top_n): one bound, kept where the
# stages' ranges use it too.
from retrieval.stage import MAX_CUTOFF
from retrieval.types import RELATION_TYPES

MAX_TEXT_CHARS = 1_000_000
ASCII_INT = re.compile(r"-?[0-9]+")
# Unicode categories an id may not contain: control (Cc), format (Cf, e.g. zero-width space),
# separators (Zs, Zl, Zp: every kind of space and line break). Surrogates (Cs): see surrogates().
_BAD_ID_CATEGORIES = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})
_SURROGATE = re.compile("[\ud800-\udfff]")


def _show(value: Any) -> str:
    """A value for a message: repr (escapes control characters and surrogates), cut to 60 chars."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def id_problem(value: Any) -> str | None:
    if not isinstance(value, str) or value == "":
        return f"must be a non-empty string, got {_show(value)}"
    for position, char in enumerate(value):
        if char.isspace() or unicodedata.category(char) in _BAD_ID_CATEGORIES:
            return (
                f"must not contain whitespace or control characters, got {_show(value)} "
                f"(U+{ord(char):04X} at position {position}; TREC files split on whitespace)"
            )
    if not _SURROGATE.search(value) and not unicodedata.is_normalized("NFC", value):
        return (
            f"must be in Unicode NFC form, got {ascii(value):.60} "
            f"(NFC: {ascii(unicodedata.normalize('NFC', value)):.60}"
            "; ids are compared code point for code point, so they are not normalised silently)"
        )
    return None


def text_problem(value: Any) -> str | None:
    if not isinstance(value, str) or value.strip() == "":
        return f"must be a non-empty string, got {_show(value)}"
    if len(value) > MAX_TEXT_CHARS:
        return f"longer than {MAX_TEXT_CHARS:,} characters"
    return None


def string_problem(value: Any) -> str | None:
    return None if isinstance(value, str) else f"must be a string, got {_show(value)}"


def number_problem(value: Any) -> str | None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return f"must be a number, got {_show(value)}"
    if not math.isfinite(value):
        return f"must be a finite number, got {_show(value)}"
    return None


def scope_problem(value: Any) -> str | None:
    if not isinstance(value, Mapping) or not value:
        return f"must be a non-empty object of strings, got {_show(value)}"
    for name, part in value.items():
        if not isinstance(name, str) or not isinstance(part, str) or not name or not part:
            return f"must be a non-empty object of non-empty strings, got {_show(dict(value))}"
    return None


def str_map_problem(value: Any) -> str | None:
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        return f"must be an object of strings, got {_show(value)}"
    return None


def positive_int_problem(value: Any) -> str | None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        return f"must be a positive integer, got {_show(value)}"
    return None


def cutoff_problem(value: Any) -> str | None:
    """A rank cutoff (a suite's default k): an integer from 1 to MAX_CUTOFF."""
    problem = positive_int_problem(value)
    if problem is None and value > MAX_CUTOFF:
        return f"must be at most {MAX_CUTOFF:,}, got {_show(value)}"
    return problem


def label_values_problem(value: Any) -> str | None:
    """A query's labels: an object of label name -> value, each a name (experiments.names): a label value
    is a group of the report's tables and a cell of per_query.csv, so "" would be a group no table shows."""
    if (problem := str_map_problem(value)) is not None:
        return problem
    for name, group in value.items():
        problem = name_problem("label name", name) or name_problem("label value", group)
        if problem is not None:
            return f"{name!r:.40}: {problem}"
    return None


def ascii_int_problem(value: str) -> str | None:
    return None if ASCII_INT.fullmatch(value) else f"must be an integer (ASCII digits), got {_show(value)}"


def label_names_problem(value: Any) -> str | None:
    """Declared label names (suite.yaml `labels`): a list of distinct non-empty strings."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(x, str) and x for x in value):
        return f"must be a list of label names (non-empty strings), got {_show(value)}"
    if len(set(value)) != len(value):
        return f"names a label twice: {_show(list(value))}"
    return next(filter(None, (name_problem("label name", x) for x in value)), None)


CLUSTER_UNITS = ("scope", "query")  # or `label.<name>` (experiments/evaluate/table.py: query_cluster)


def cluster_problem(value: Any) -> str | None:
    """A suite's statistical unit (suite.yaml `cluster`): `scope` (questions about one conversation are one
    cluster), `query` (each query stands alone: independent scenarios) or `label.<name>` (a label's value)."""
    if value in CLUSTER_UNITS:
        return None
    if isinstance(value, str) and value.startswith("label.") and not name_problem("label name", value[6:]):
        return None
    return f"must be one of {', '.join(CLUSTER_UNITS)} or label.<name>, got {_show(value)}"


def surrogates(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(field path, message) for every string (key or value) holding a lone surrogate, anywhere in value."""
    if not path and _encodes(value):  # fast path (C speed) for the usual, clean record or file
        return
    if isinstance(value, str):
        bad = _SURROGATE.search(value)
        if bad is not None:
            yield path, f"contains a lone surrogate U+{ord(bad.group()):04X} (not valid Unicode text)"
    elif isinstance(value, Mapping):
        for key, item in value.items():
            sub = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and _SURROGATE.search(key):
                yield path or "(field name)", f"field name {key!r} contains a lone surrogate"
                continue
            yield from surrogates(item, sub)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from surrogates(item, f"{path}[{i}]")


def _encodes(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False, default=str).encode("utf-8")
    except (UnicodeEncodeError, ValueError, TypeError, RecursionError):
        return False
    return True


class NonFiniteNumber(ValueError):
    """A JSON text holds NaN, Infinity, -Infinity, or a number too large for a float."""


def _non_finite_message(token: str) -> str:
    if token.lstrip("-") in ("NaN", "Infinity"):
        return f"{token} is not a JSON number (numbers must be finite)"
    return f"{token} is too large for a finite number"


def _reject_constant(token: str) -> Any:
    raise NonFiniteNumber(_non_finite_message(token))


def _finite_float(token: str) -> float:
    value = float(token)
    if not math.isfinite(value):
        raise NonFiniteNumber(_non_finite_message(token))
    return value


class DuplicateKey(ValueError):
    """A JSON object names one key twice (json keeps the last value without a word)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):  # rare: find the key
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return out


def json_loads(text: str) -> Any:
    """Strict JSON: NaN/Infinity and overflowing numbers raise NonFiniteNumber, a key twice in one object
    DuplicateKey (both ValueErrors)."""
    return json.loads(
        text, parse_constant=_reject_constant, parse_float=_finite_float, object_pairs_hook=_unique_keys
    )


class _Token(str):
    """A non-finite number kept as its source text, to find where it sits."""


class _Pairs(list):
    """A JSON object kept as its (key, value) pairs, to find where a key appears twice."""


def _duplicates(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(path of the object, key) for each key named twice in an object, anywhere in value."""
    if isinstance(value, _Pairs):
        seen: set[str] = set()
        for key, item in value:
            if key in seen:
                yield path, key
            seen.add(key)
            yield from _duplicates(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _duplicates(item, f"{path}[{i}]")


def _non_finite(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(value, _Token):
        yield path, str(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _non_finite(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _non_finite(item, f"{path}[{i}]")


def json_problems(err: Exception, text: str) -> list[tuple[int | None, str | None, str]]:
    """(line in text, field path, message) for an error json_loads raised on text."""
    if isinstance(err, json.JSONDecodeError):
        return [(err.lineno, None, f"malformed JSON: {err.msg} (column {err.colno})")]
    if isinstance(err, RecursionError):
        return [(None, None, "malformed JSON: nested too deeply")]
    if isinstance(err, DuplicateKey):  # the hook sees no position: parse again, keeping every pair
        try:
            found = list(_duplicates(json.loads(text, object_pairs_hook=_Pairs)))
        except (ValueError, RecursionError):
            found = []
        return [
            (None, f"{where}.{key}" if where else key, f"the key {key!r} appears twice in one object")
            for where, key in found or [("", str(err))]
        ]
    if isinstance(err, NonFiniteNumber):  # the hooks see no position: parse again, keeping the tokens
        try:
            data = json.loads(
                text,
                parse_constant=_Token,
                parse_float=lambda t: float(t) if math.isfinite(float(t)) else _Token(t),
            )
            found = list(_non_finite(data))
        except (ValueError, RecursionError):
            found = []
        if found:
            return [(None, where or None, _non_finite_message(token)) for where, token in found]
    return [(None, None, f"malformed JSON: {err}")]


def relation_type_problem(value: Any) -> str | None:
    """One of the nine concept-graph relation types (retrieval.types.RELATION_TYPES)."""
    if value not in RELATION_TYPES:
        return f"must be one of {', '.join(RELATION_TYPES)}, got {_show(value)}"
    return None


def unit_number_problem(value: Any) -> str | None:
    """A finite number in [0, 1] (feedback importance: a weight)."""
    problem = number_problem(value)
    if problem is None and not 0 <= value <= 1:
        return f"must be between 0 and 1, got {_show(value)}"
    return problem


def id_list_problem(value: Any) -> str | None:
    """A list of ids (e.g. the memories a concept links), each following the id rules, none twice."""
    if not isinstance(value, (list, tuple)):
        return f"must be a list of ids, got {_show(value)}"
    for item in value:
        if (problem := id_problem(item)) is not None:
            return f"item {_show(item)}: {problem}"
    if len(set(value)) != len(value):
        return f"names an id twice: {_show(list(value))}"
    return None
