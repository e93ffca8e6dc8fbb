"""The type check of config values against a stage's field annotations: the harness runs it on every
stage's values before the stage class sees them (experiments/configure/build.py), so a stage's own range
checks only ever see values of the right type, and one error lists every mistyped field.

Sits under the stage protocol (retrieval/stage.py): it reads a dataclass's annotations and knows the
types stage fields use (numbers, strings, literals, unions, lists, tuples, mappings, nested stages).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Union

import numpy as np


@functools.cache
def type_hints(cls: type) -> dict[str, Any]:
    """Resolved annotations of a dataclass (string annotations too); one that cannot be resolved is Any."""
    try:
        return typing.get_type_hints(cls)
    except Exception:  # an annotation naming something only imported for type checking
        hints: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            namespace = vars(sys.modules[klass.__module__]) if klass.__module__ in sys.modules else {}
            for name, annotation in vars(klass).get("__annotations__", {}).items():
                try:
                    text = annotation if isinstance(annotation, str) else None
                    hints[name] = annotation if text is None else eval(text, dict(namespace))
                except Exception:
                    hints[name] = Any
        return hints


def describe_type(hint: Any) -> str:
    """`float | None` -> 'float or None', `tuple[str, ...]` -> 'list of str', Literal -> 'one of ...'."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is type(None):
        return "None"
    if origin in (Union, types.UnionType):
        return " or ".join(describe_type(a) for a in args)
    if origin is Literal:
        return "one of " + ", ".join(map(repr, args))
    if origin in (list, tuple, Sequence) or hint in (list, tuple, Sequence):
        item = args[0] if args else Any
        return "list" if item is Any else f"list of {describe_type(item)}"
    if origin in (dict, Mapping) or hint in (dict, Mapping):
        if len(args) != 2:
            return "mapping"
        return f"mapping of {describe_type(args[0])} to {describe_type(args[1])}"
    return getattr(hint, "__name__", str(hint))


_NUMBER = (int, float, np.integer, np.floating)
_PLAIN = (str, int, float, bool, list, tuple, dict, type(None))


def value_problems(value: Any, hint: Any) -> list[tuple[str, str]]:
    """(sub-path, problem) pairs for a value that does not fit `hint`; sub-path '' is the value itself.

    Checks int (bool is not one), float (int accepted; NaN and inf rejected), bool, str, Literal, unions and
    Optional, lists/tuples/sequences and mappings of those, and dataclass components (the encoder, the
    scorer...) field by field. A class that is not a dataclass is checked with isinstance only when the
    value is a plain config value (a string, number, list...): any other object may be a duck-typed
    stand-in. Annotations it does not know are not checked.
    """
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    wrong = [("", f"expected {describe_type(hint)}, got {value!r}")]
    if hint is Any or hint is object:
        return []
    if hint is type(None):
        return [] if value is None else wrong
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return []
        options = [a for a in args if a is not type(None)]
        found = [value_problems(value, a) for a in options]
        if any(not problems for problems in found):
            return []
        return found[0] if len(options) == 1 else wrong  # one option: its own, more precise, problem
    if origin is Literal:
        return [] if any(value == a and type(value) is type(a) for a in args) else wrong
    if hint is bool:
        return [] if isinstance(value, (bool, np.bool_)) else wrong
    if hint is int:
        return [] if isinstance(value, (int, np.integer)) and not isinstance(value, bool) else wrong
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, _NUMBER):
            return wrong
        return [] if math.isfinite(value) else [("", f"expected a finite float, got {value}")]
    if hint is str:
        return [] if isinstance(value, str) else wrong
    if origin in (list, tuple, Sequence) or hint in (list, tuple, Sequence):
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            return wrong
        if origin is tuple and args and args[-1] is not Ellipsis:  # a fixed-length tuple
            if len(value) != len(args):
                return [("", f"expected {len(args)} items, got {value!r}")]
            item_hints = list(args)
        else:
            item_hints = [args[0] if args else Any] * len(value)
        return [
            (f"[{i}]{sub}", problem)
            for i, (item, item_hint) in enumerate(zip(value, item_hints, strict=True))
            for sub, problem in value_problems(item, item_hint)
        ]
    if origin in (dict, Mapping) or hint in (dict, Mapping):
        if not isinstance(value, Mapping):
            return wrong
        key_hint, item_hint = args if len(args) == 2 else (Any, Any)
        out = []
        for key, item in value.items():
            out += [(f"[{key!r}]", f"key: {p}") for _, p in value_problems(key, key_hint)]
            out += [(f"[{key!r}]{sub}", p) for sub, p in value_problems(item, item_hint)]
        return out
    if isinstance(hint, type):
        if isinstance(value, hint):
            if dataclasses.is_dataclass(value):
                return [(f".{name}", problem) for name, problem in field_type_problems(value)]
            return []
        return wrong if isinstance(value, _PLAIN) else []
    return []


def field_type_problems(obj: Any, values: Mapping[str, Any] | None = None) -> list[tuple[str, str]]:
    """(field, problem) for each field of a dataclass (or `values` meant for its class) not fitting its
    annotation; with `values`, names that are no field of the class are problems too."""
    cls = obj if isinstance(obj, type) else type(obj)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    if values is None:
        values = {name: getattr(obj, name) for name in fields}
    hints = type_hints(cls)
    out = []
    for name, value in values.items():
        if name not in fields:
            out.append((name, f"not a field of {cls.__name__} (fields: {', '.join(sorted(fields))})"))
            continue
        out += [(f"{name}{sub}", problem) for sub, problem in value_problems(value, hints.get(name, Any))]
    return out
