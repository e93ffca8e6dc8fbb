"""The stage protocol: the small pluggable pieces a retrieval variant is made of.

Four kinds, in pipeline order:
  IngestStage(memories) -> memories          enrich memories once (tagging, classification...)
  Retriever.build(corpus) -> index; index.search(query) -> (indices, scores)   one channel
  Fusion({channel: (indices, scores)}) -> Candidates                         combine channels
  RankStage(query, candidates) -> candidates   boosts, gates, filters, rerank...

A stage is a frozen keyword-only dataclass whose fields are its config; its fingerprint is its
class plus that config, so caches can tell exactly what changed. Stages never read files, globals or
the environment. Every stage has `enabled`: a disabled stage is dropped from the pipeline, so a
flag flip gives results bit-identical to the stage being absent.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import hashlib
import json
import math
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol, Union

import numpy as np

from retrieval.types import CandidateBatch, Candidates, Corpus, Memory, Query

# The largest rank cutoff anywhere (a top_n, a run's depth, a suite's k, a metric's @k): a typo such as
# top_n=1e20 is refused by the config check, not met as an OverflowError deep in numpy.
MAX_CUTOFF = 1_000_000


def _canonical(value: Any) -> Any:
    """JSON-able form of a config value; components with their own fingerprint contribute that."""
    if hasattr(value, "fingerprint") and callable(value.fingerprint):
        return {"fingerprint": value.fingerprint()}
    if dataclasses.is_dataclass(value):
        return {f.name: _canonical(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)  # 0.0 and 0 configure the same stage (NaN and inf are not integral)
    return value


def fingerprint_of(obj: Any) -> str:
    cls = type(obj)
    payload = {"class": f"{cls.__module__}.{cls.__qualname__}"}
    if dataclasses.is_dataclass(obj):
        payload["config"] = {f.name: _canonical(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


class FieldError(ValueError):
    """Bad values of a stage's (or component's) fields: every (field, problem) found, not just the first."""

    def __init__(self, problems: Sequence[tuple[str, str]]):
        self.problems = list(problems)
        super().__init__("; ".join(f"{name}: {problem}" for name, problem in self.problems))


@dataclass(frozen=True)
class Range:
    """Allowed values of a numeric field (or of every value of a mapping field, e.g. weights): finite, and
    within the bounds given. A value of another type is left to the type check (`field_type_problems`)."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    def problem(self, value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            return None
        if not math.isfinite(value):
            return f"must be a finite number, got {value}"
        for bound, ok, sign in (
            (self.ge, lambda b: value >= b, ">="),
            (self.gt, lambda b: value > b, ">"),
            (self.le, lambda b: value <= b, "<="),
            (self.lt, lambda b: value < b, "<"),
        ):
            if bound is not None and not ok(bound):
                return f"must be {sign} {bound:g}, got {value}"
        return None


def stage_ranges(cls: type) -> dict[str, Range]:
    """A stage class's `ranges`, merged along its class hierarchy (a subclass may narrow a base's)."""
    merged: dict[str, Range] = {}
    for klass in reversed(cls.__mro__):
        merged.update(vars(klass).get("ranges", {}))
    return merged


def range_problems(values: Mapping[str, Any], ranges: Mapping[str, Range]) -> list[tuple[str, str]]:
    """(field, problem) for each value outside its field's Range; None (an Optional left unset) passes."""
    out = []
    for name, allowed in ranges.items():
        if name not in values:
            continue
        value = values[name]
        items = value.items() if isinstance(value, Mapping) else [(None, value)]
        for key, item in items:
            problem = allowed.problem(item)
            if problem is not None:
                out.append((name if key is None else f"{name}[{key!r}]", problem))
    return out


@dataclass(frozen=True, kw_only=True)
class Stage(abc.ABC):
    """Base of every stage: a name for reports, a config, an on/off switch, a fingerprint.

    A stage checks its own values on construction: `ranges` (merged along the class hierarchy) names the
    allowed range of its numeric fields, and `config_problems` adds rules a range cannot say (top_k <=
    top_n). Both raise one FieldError naming every bad field. Types are checked by `field_type_problems`
    (Pipeline.from_config runs it on a config's values before it builds a stage).
    """

    name: ClassVar[str] = "stage"
    ranges: ClassVar[Mapping[str, Range]] = {}
    enabled: bool = True

    def __post_init__(self) -> None:
        ranges = stage_ranges(type(self))
        problems = range_problems({name: getattr(self, name) for name in ranges}, ranges)
        problems += self.config_problems()
        if problems:
            raise FieldError(problems)

    def config_problems(self) -> list[tuple[str, str]]:
        """(field, problem) pairs for rules across fields or beyond a Range; none by default."""
        return []

    def fingerprint(self) -> str:
        return fingerprint_of(self)


@dataclass(frozen=True, kw_only=True)
class IngestStage(Stage):
    @abc.abstractmethod
    def __call__(self, memories: Sequence[Memory]) -> list[Memory]:
        """Abstract: each ingest stage defines its rule."""


class ChannelIndex(Protocol):
    def search(self, query: Query) -> tuple[np.ndarray, np.ndarray]:
        """Corpus indices of the query's own scope, best first, with their channel scores."""
        ...


@dataclass(frozen=True, kw_only=True)
class Retriever(Stage):
    """One retrieval channel; `channel` names its score column (bm25, dense...)."""

    ranges = {"top_n": Range(ge=1, le=MAX_CUTOFF)}
    channel: str
    top_n: int = 100

    @abc.abstractmethod
    def build(self, corpus: Corpus) -> ChannelIndex:
        """Abstract: each retriever builds its own index."""


@dataclass(frozen=True, kw_only=True)
class Fusion(Stage):
    @abc.abstractmethod
    def __call__(self, corpus: Corpus, channels: Mapping[str, tuple[np.ndarray, np.ndarray]]) -> Candidates:
        """Abstract: rrf or weighted."""


@dataclass(frozen=True, kw_only=True)
class RankStage(Stage):
    @abc.abstractmethod
    def __call__(self, query: Query, candidates: Candidates) -> Candidates:
        """Abstract: each rank stage defines its rule."""


@dataclass(frozen=True, kw_only=True)
class BatchRankStage(RankStage):
    """A rank stage whose rule reads the candidates only, never the query, written once for many queries
    laid end to end (`rank_all`): the pipeline runs it over every query in a few array operations where
    its timings per query are not measured anyway (a sweep job, a run from cached candidates). One query
    is a batch of one; a query without candidates keeps them as they were, as a per-query rule does."""

    @abc.abstractmethod
    def rank_all(self, candidates: CandidateBatch) -> CandidateBatch:
        """Abstract: the rule, over every query's candidates at once (within each query)."""

    def rank_each(self, corpus: Corpus, parts: Sequence[tuple[np.ndarray, Mapping[str, np.ndarray]]]):
        """Each query's (index, columns) ranked, in order; None when their columns differ (laid end to end
        they would not keep their dtypes), for the caller to go query by query."""
        batch = CandidateBatch.of(corpus, parts)
        return None if batch is None else self.rank_laid_out(batch, parts)[0]

    def rank_laid_out(self, batch: CandidateBatch, parts: Sequence) -> tuple[list, CandidateBatch | None]:
        """`rank_each` of `parts` already laid end to end in `batch`: (each query's (index, columns), the
        batch they are laid out in, for a next batch stage to take as it is; None where a query without
        candidates kept its own columns, so that they no longer line up)."""
        ranked = self.rank_all(batch)
        if ranked is batch:  # left as it was (an off switch): the very inputs
            return list(parts), batch
        if (np.diff(batch.bounds) > 0).all():
            return ranked.split(), ranked
        return [
            part if not len(part[0]) else new for part, new in zip(parts, ranked.split(), strict=True)
        ], None

    def __call__(self, query: Query, candidates: Candidates) -> Candidates:
        ranked = self.rank_each(candidates.corpus, [(candidates.index, candidates.columns)])
        if ranked is None:
            raise ValueError(f"{self.name}: candidate columns must be 1-D arrays")
        ((index, columns),) = ranked
        if index is candidates.index:
            return candidates
        return Candidates(candidates.corpus, index, columns)


def top_n(scores: np.ndarray, n: int) -> np.ndarray:
    """Positions of the n best scores, best first; ties keep index order (deterministic)."""
    n = min(n, len(scores))
    if n == 0:
        return np.empty(0, dtype=np.int64)
    if n < len(scores):
        part = np.argpartition(-scores, n - 1)[:n]
        # argpartition's choice among equal scores at the boundary is arbitrary: widen to all of them.
        cutoff = scores[part].min()
        part = np.flatnonzero(scores >= cutoff)
    else:
        part = np.arange(len(scores))
    order = part[np.lexsort((part, -scores[part]))]
    return order[:n]


# --- Type check of config values against a stage's annotations (Pipeline.from_config runs it) -----------


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
