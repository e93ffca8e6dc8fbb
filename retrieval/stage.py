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
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

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


def own_range_problems(obj: object) -> list[tuple[str, str]]:
    """`range_problems` of an object's own fields against its class's `ranges` (a stage, a live adapter)."""
    ranges = stage_ranges(type(obj))
    return range_problems({name: getattr(obj, name) for name in ranges}, ranges)


@dataclass(frozen=True, kw_only=True)
class Stage(abc.ABC):
    """Base of every stage: a name for reports, a config, an on/off switch, a fingerprint.

    A stage checks its own values on construction: `ranges` (merged along the class hierarchy) names the
    allowed range of its numeric fields, and `config_problems` adds rules a range cannot say (top_k <=
    top_n). Both raise one FieldError naming every bad field. Types are checked by
    retrieval.field_types.field_type_problems (the harness runs it on a config's values before it
    builds a stage).
    """

    name: ClassVar[str] = "stage"
    ranges: ClassVar[Mapping[str, Range]] = {}
    enabled: bool = True

    def __post_init__(self) -> None:
        problems = own_range_problems(self) + self.config_problems()
        if problems:
            raise FieldError(problems)

    def config_problems(self) -> list[tuple[str, str]]:
        """(field, problem) pairs for rules across fields or beyond a Range; none by default."""
        return []

    def fingerprint(self) -> str:
        return fingerprint_of(self)

    def memory_fields(self) -> tuple[str, ...]:
        """The Memory fields this stage's effect rests on (`role` for a tagger of user messages): where no
        memory carries one, the stage silently does nothing, which a live service's caller should hear of
        (experiments/serve/service.py warns). None by default."""
        return ()


@dataclass(frozen=True, kw_only=True)
class IngestStage(Stage):
    @abc.abstractmethod
    def __call__(self, memories: Sequence[Memory]) -> list[Memory]:
        """Abstract: each ingest stage defines its rule."""


class ChannelIndex(Protocol):
    def search(self, query: Query) -> tuple[np.ndarray, np.ndarray]:
        """Corpus indices of the query's own scope, best first, with their channel scores."""
        ...


# The optional hooks of an index, each asked by the pipeline (retrieval/pipeline.py) of the indexes that
# have it, by `isinstance`: an index offers a hook by defining its methods, it need not name the protocol.
@runtime_checkable
class ChecksQueries(Protocol):
    """An index built from outside data (a TREC run file) checks the queries it will be asked, once."""

    def check_queries(self, queries: Sequence[Query]) -> None: ...


@runtime_checkable
class Prefetches(Protocol):
    """An index answered by a service (a live system's channel) asks it for every query at once,
    concurrently, and times each query by its own wall latency at the service, not by the lookup."""

    def prefetch(self, queries: Sequence[Query]) -> None: ...

    def latency_ms(self, query: Query) -> float: ...


@runtime_checkable
class Reports(Protocol):
    """An index that reports its own cost (a live system's latency, ingest, errors), kept in
    `RunOutput.channel_reports`."""

    def report(self) -> dict[str, Any]: ...


@dataclass(frozen=True, kw_only=True)
class Retriever(Stage):
    """One retrieval channel; `channel` names its score column (bm25, dense...). A `live` channel is answered
    by a service whose answers may change while its config does not: never from a cache or memo."""

    ranges = {"top_n": Range(ge=1, le=MAX_CUTOFF)}
    live: ClassVar[bool] = False
    # A channel whose index adds rows to the corpus when built (foreign ids read from a file): never from a
    # cache, which would skip that build (retrieval/retrievers/ranked_file.py).
    builds_rows: ClassVar[bool] = False
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
