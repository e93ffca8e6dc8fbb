"""The records the retrieval system works on: memories, queries, columnar candidates, ranked lists.

Data flow: a suite's `Memory` and `Query` records enter the pipeline; ingest stages return new
memories; retrieval produces `Candidates` (columnar numpy arrays, one per query); rank stages return
new `Candidates`; the pipeline cuts them into a `RankedList` per query.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

import numpy as np

# Keys that ingest stages own. A suite's own metadata may not set them: a dataset that arrived
# already "tagged" would make a tagging stage's effect unmeasurable.
RESERVED_METADATA_KEYS = frozenset({"fact_role"})

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def scope_key(scope: Mapping[str, str]) -> str:
    """Canonical, injective string for a scope mapping; a query sees only memories with the same key.

    Canonical JSON of the sorted (name, value) pairs: any character in a name or value is escaped,
    so `{"a": "1|b=2"}` and `{"a": "1", "b": "2"}` can never share a key (a `k=v|k=v` join could).
    """
    pairs = sorted((str(k), str(v)) for k, v in scope.items())
    return json.dumps(pairs, ensure_ascii=True, separators=(",", ":"))


@dataclass(frozen=True, eq=False)
class Memory:
    """One stored memory (a message, an insight, a fact). Suites own every field but `annotations`."""

    id: str
    text: str
    scope: Mapping[str, str]
    created_at: str | None = None
    tier: str | None = None
    tags: tuple[str, ...] = ()
    importance: str | None = None
    confidence: float | None = None
    strength: float | None = None
    deleted: bool = False
    role: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    # Written by ingest stages only (e.g. fact_role, action_domain, embed_text).
    annotations: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)

    @functools.cached_property
    def scope_key(self) -> str:
        # Cached: a shard's cut and the partition read it for each memory (240,000 x 3 at BEAM 10M's
        # shape, 4.6 s of json.dumps per shard); `scope` is read-only, so the key cannot go stale.
        return scope_key(self.scope)

    def annotate(self, **values: Any) -> Memory:
        """A copy with extra stage-owned annotations (inputs are never mutated)."""
        return replace(self, annotations=MappingProxyType({**self.annotations, **values}))

    def get(self, name: str, default: Any = None) -> Any:
        """A field by name: record fields, then stage annotations, then suite metadata."""
        if name in _MEMORY_FIELDS:
            return getattr(self, name)
        if name in self.annotations:
            return self.annotations[name]
        return self.metadata.get(name, default)


_MEMORY_FIELDS = frozenset(Memory.__dataclass_fields__) - {"metadata", "annotations"}


# The nine typed relations of a concept graph (a memoir): `source <relation> target`.
RELATION_TYPES = (
    "part_of",
    "depends_on",
    "related_to",
    "contradicts",
    "refines",
    "alternative_to",
    "caused_by",
    "instance_of",
    "superseded_by",
)


# The canonical record of a memory: what suites are saved as, hashed by and validated on, and what a live
# memory system is sent at ingest (experiments/systems).
def memory_record(m: Memory) -> dict[str, Any]:
    record: dict[str, Any] = {"id": m.id, "text": m.text, "scope": dict(m.scope)}
    optional = {
        "created_at": m.created_at,
        "tier": m.tier,
        "tags": list(m.tags) or None,
        "importance": m.importance,
        "confidence": m.confidence,
        "strength": m.strength,
        "deleted": m.deleted or None,
        "role": m.role,
        "metadata": dict(m.metadata) or None,
    }
    record.update({k: v for k, v in optional.items() if v is not None})
    return record


@dataclass(frozen=True, eq=False)
class Concept:
    """A node of a scope's concept graph: a named thing, with the memories that mention it."""

    id: str
    name: str
    scope: Mapping[str, str]
    content: str = ""
    labels: tuple[str, ...] = ()
    memory_ids: tuple[str, ...] = ()

    @property
    def scope_key(self) -> str:
        return scope_key(self.scope)


@dataclass(frozen=True)
class Relation:
    """A typed, directed edge between two concepts of the same scope (one of RELATION_TYPES)."""

    source: str
    target: str
    relation: str


@dataclass(frozen=True, eq=False)
class Feedback:
    """A recorded correction: on `topic` the agent predicted `prediction`; the truth is `correction`.
    `memory_ids` are the memories the correction is about; `importance` (0..1) weighs it."""

    id: str
    topic: str
    prediction: str
    correction: str
    scope: Mapping[str, str]
    context: str = ""
    importance: float = 1.0
    created_by: str = ""
    memory_ids: tuple[str, ...] = ()

    @property
    def scope_key(self) -> str:
        return scope_key(self.scope)


@dataclass(frozen=True, eq=False)
class Knowledge:
    """What a system holds besides memories: concept graphs and feedback records (each scoped)."""

    concepts: tuple[Concept, ...] = ()
    relations: tuple[Relation, ...] = ()
    feedback: tuple[Feedback, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.concepts or self.relations or self.feedback)


@dataclass(frozen=True, eq=False)
class Query:
    """One evaluation query with its scope, labels (ability, category...) and optional tool context."""

    id: str
    text: str
    scope: Mapping[str, str]
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    now: str | None = None
    context: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    noise_patterns: tuple[str, ...] = ()
    expected_domains: tuple[str, ...] = ()
    # The gold answer the answer stage's judges score against (experiments/answer/): not part of what
    # retrieval sees nor of the suite's content hash, so a suite gaining them keeps its hash.
    answer: str | None = None
    rubric: tuple[str, ...] = ()  # BEAM: the items a judge checks one by one
    adversarial_answer: str | None = None  # LoCoMo category 5: the distractor, kept apart from the gold

    @property
    def scope_key(self) -> str:
        return scope_key(self.scope)


class Corpus:
    """The ingested memories as a columnar table, partitioned by scope.

    Rank stages read memory attributes through `column(name)[candidates.index]`, so they stay
    vectorised. Columns are built lazily, once.

    Rows from `suite_size` on are *foreign*: ids a live system returned that the suite does not hold
    (`add_foreign`). Each keeps its rank in the channel that returned it, as a hit no qrels can judge
    relevant (run.trec writes the id the system returned). A foreign row is in no scope's partition (no
    other channel returns it) and has nothing but its id and the text returned: no stage attribute to
    boost it by, NaN in numeric columns.
    """

    def __init__(self, memories: tuple[Memory, ...], knowledge: Knowledge | None = None):
        self.memories = memories
        self.suite_size = len(memories)
        self.knowledge = knowledge or Knowledge()  # the suite's concept graphs and feedback records
        self._derived: dict[str, Any] = {}
        self._foreign: dict[str, int] = {}
        self._foreign_lock = threading.Lock()
        self.ids = np.array([m.id for m in memories], dtype=object)
        keys = np.array([m.scope_key for m in memories], dtype=object)
        self._partitions: dict[str, np.ndarray] = {}
        if len(keys):
            order = np.argsort(keys, kind="stable")
            uniq, starts = np.unique(keys[order], return_index=True)
            for key, part in zip(uniq, np.split(order, starts[1:]), strict=True):
                self._partitions[str(key)] = part
        self._columns: dict[str, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.memories)

    @property
    def scopes(self) -> list[str]:
        return list(self._partitions)

    def partition(self, key: str) -> np.ndarray:
        """Indices (ascending) of the memories in one scope; empty for an unknown scope."""
        return self._partitions.get(key, np.empty(0, dtype=np.int64))

    def column(self, name: str) -> np.ndarray:
        if name not in self._columns:
            values = [m.get(name) for m in self.memories[: self.suite_size]]
            arr = np.array(values, dtype=object)
            if values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
                arr = arr.astype(np.float64)
            if len(self.memories) > self.suite_size:  # foreign rows: NaN in a numeric column, else None
                foreign = [m.get(name) for m in self.memories[self.suite_size :]]
                numeric = arr.dtype == np.float64
                filler = np.full(len(foreign), np.nan) if numeric else np.array(foreign, dtype=object)
                arr = np.concatenate([arr, filler])
            self._columns[name] = arr
        return self._columns[name]

    def add_foreign(self, hits: Sequence[tuple[str, str | None]]) -> list[int]:
        """Rows for ids a live system returned that the suite does not hold, as (id, text returned): one
        row per distinct id (a second query returning it gets the same row). Thread-safe; the rows exist
        before any fusion or rank stage reads the corpus (a channel adds them while it is asked)."""
        with self._foreign_lock:
            new = [(str(i), t) for i, t in dict(hits).items() if str(i) not in self._foreign]
            if new:
                start = len(self.memories)
                rows = tuple(Memory(id=i, text=t or "", scope=_EMPTY) for i, t in new)
                self._foreign.update({m.id: start + n for n, m in enumerate(rows)})
                self.memories = self.memories + rows
                self.ids = np.concatenate([self.ids, np.array([m.id for m in rows], dtype=object)])
                self._columns.clear()  # rebuilt with the new rows when next read
            return [self._foreign[str(i)] for i, _ in hits]

    @property
    def foreign_memories(self) -> tuple[Memory, ...]:
        """The foreign rows (see the class docstring), in the order they were added."""
        return self.memories[self.suite_size :]

    def derived(self, key: str, make: Any) -> Any:
        """A structure built once from this corpus (e.g. the concept-graph index), shared by the stages
        that read it; `key` must name everything `make` depends on (stage config included)."""
        if key not in self._derived:
            self._derived[key] = make()
        return self._derived[key]

    def texts(self) -> list[str]:
        """The text each retriever indexes: an ingest stage may set `embed_text` (enrichment)."""
        return [m.annotations.get("embed_text", m.text) for m in self.memories]


class _CandidateRows:
    """What Candidates and CandidateBatch share: rows of corpus `index` with score `columns`."""

    corpus: Corpus
    index: np.ndarray
    columns: Mapping[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.index)

    @property
    def score(self) -> np.ndarray:
        return self.columns["score"]

    def attribute(self, name: str) -> np.ndarray:
        """A memory attribute aligned with the rows (e.g. fact_role, tags, created_at)."""
        return self.corpus.column(name)[self.index]


@dataclass(frozen=True, eq=False)
class Candidates(_CandidateRows):
    """One query's candidates, columnar: corpus indices plus every score column, in rank order.

    `columns["score"]` is the ranking score; stages add a column for their own contribution and
    set a new score, so a report can explain any ranking from the kept columns.
    """

    corpus: Corpus
    index: np.ndarray
    columns: Mapping[str, np.ndarray]

    def with_score(
        self, column: str, score: np.ndarray, *, extra: Mapping[str, np.ndarray] = _EMPTY
    ) -> Candidates:
        """Record a stage's score column and make it the ranking score, re-sorted (stable)."""
        score = np.asarray(score, dtype=np.float64)
        cols = {**self.columns, **extra, column: score, "score": score}
        return Candidates(self.corpus, self.index, cols).sorted()

    def sorted(self) -> Candidates:
        # Stable descending sort: ties keep their previous order, so re-sorting is deterministic.
        order = np.argsort(-self.score, kind="stable")
        return self.select(order)

    def select(self, which: np.ndarray) -> Candidates:
        """Keep a subset (boolean mask or positions), in the given order."""
        return Candidates(self.corpus, self.index[which], {k: v[which] for k, v in self.columns.items()})

    def top(self, k: int) -> Candidates:
        return self.select(np.arange(min(k, len(self))))


@dataclass(frozen=True, eq=False)
class CandidateBatch(_CandidateRows):
    """Many queries' candidates laid end to end, query i's at rows `bounds[i]:bounds[i + 1]`, each query's
    in rank order: what a `BatchRankStage` ranks for every query in a few array operations, where one
    query at a time pays numpy's per-call overhead for every query and stage.

    Its operations keep each query's rule: `minmax` and `running_count` work within each query, and
    `with_score` re-sorts within each query (stable), as `Candidates` does for one query, to the bit.
    """

    corpus: Corpus
    index: np.ndarray
    columns: Mapping[str, np.ndarray]
    bounds: np.ndarray

    @classmethod
    def of(cls, corpus: Corpus, parts: Sequence[tuple[np.ndarray, Mapping[str, np.ndarray]]]):
        """The batch of (index, columns) per query; None unless every query has the same columns, in the
        same order and dtypes (1-D), which laying them end to end keeps as they are."""
        if not parts:
            return None
        first = parts[0][1]
        dtypes = {name: getattr(column, "dtype", None) for name, column in first.items()}
        for _, columns in parts:
            if list(columns) != list(first):
                return None
            for name, column in columns.items():
                if not isinstance(column, np.ndarray) or column.ndim != 1 or column.dtype != dtypes[name]:
                    return None
        sizes = [len(index) for index, _ in parts]
        bounds = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum(sizes, out=bounds[1:])
        index = np.concatenate([index for index, _ in parts])
        columns = {name: np.concatenate([c[name] for _, c in parts]) for name in first}
        return cls(corpus, index, columns, bounds)

    def query_of_row(self) -> np.ndarray:
        """Each row's query number (the smallest integer type that holds them: a faster stable sort)."""
        dtype = np.min_scalar_type(max(len(self.bounds) - 2, 0))
        return np.repeat(np.arange(len(self.bounds) - 1, dtype=dtype), np.diff(self.bounds))

    def minmax(self, values: np.ndarray) -> np.ndarray:
        """`retrieval.fusion_arithmetic.minmax` of each query's values: the same arithmetic, every query
        at once."""
        values = np.asarray(values)
        sizes = np.diff(self.bounds)
        starts = self.bounds[:-1][sizes > 0]
        if not len(starts):
            return values.copy()
        lo = np.repeat(np.minimum.reduceat(values, starts), sizes[sizes > 0])
        hi = np.repeat(np.maximum.reduceat(values, starts), sizes[sizes > 0])
        with np.errstate(invalid="ignore", divide="ignore"):  # constant queries: ones, as minmax
            return np.where(hi == lo, np.ones_like(values), (values - lo) / (hi - lo))

    def running_count(self, flags: np.ndarray) -> np.ndarray:
        """Within each query, how many rows so far (this one included) are flagged: a per-query cumsum."""
        total = np.cumsum(flags)
        before = np.concatenate([[0], total])[self.bounds[:-1]]
        return total - np.repeat(before, np.diff(self.bounds))

    def with_score(
        self, column: str, score: np.ndarray, *, extra: Mapping[str, np.ndarray] = _EMPTY
    ) -> CandidateBatch:
        """`Candidates.with_score` for every query: the new score column, each query re-sorted (stable)."""
        score = np.asarray(score, dtype=np.float64)
        cols = {**self.columns, **extra, column: score, "score": score}
        sizes = np.diff(self.bounds)
        starts = self.bounds[:-1][sizes > 0]
        if len(starts) and len(score) == len(starts) * sizes.max():
            # Every query with rows has as many (the usual batch): one stable sort along each row of a
            # (query, rank) matrix instead of the two flat sorts below, the same order
            # (tests/retrieval/test_candidate_batch.py).
            order = np.argsort(-score.reshape(len(starts), -1), axis=1, kind="stable")
            order = (order + starts[:, None]).reshape(-1)
        else:
            # Stable sorts: by score over all rows, then by query, which keeps each query's rows in that
            # order (ties as they were). np.lexsort gives the same order, more slowly.
            by_score = np.argsort(-score, kind="stable")
            order = by_score[np.argsort(self.query_of_row()[by_score], kind="stable")]
        columns = {k: v[order] for k, v in cols.items()}
        return CandidateBatch(self.corpus, self.index[order], columns, self.bounds)

    def top(self, k: int) -> CandidateBatch:
        """Each query's best k rows (`Candidates.top` for every query), in new arrays."""
        sizes = np.diff(self.bounds)
        keep = np.arange(len(self.index)) - np.repeat(self.bounds[:-1], sizes) < k
        bounds = np.zeros_like(self.bounds)
        np.cumsum(np.minimum(sizes, k), out=bounds[1:])
        return CandidateBatch(
            self.corpus, self.index[keep], {c: v[keep] for c, v in self.columns.items()}, bounds
        )

    def split(self) -> list[tuple[np.ndarray, dict[str, np.ndarray]]]:
        """(index, columns) of each query, in order (views of the batch's arrays)."""
        edges = self.bounds.tolist()
        return [
            (self.index[a:b], {k: v[a:b] for k, v in self.columns.items()})
            for a, b in zip(edges[:-1], edges[1:], strict=True)
        ]


@dataclass(frozen=True, eq=False)
class RankedList:
    """The pipeline's answer to one query: memory ids best first, with score breakdown and timings."""

    query_id: str
    memory_ids: tuple[str, ...]
    scores: np.ndarray
    columns: Mapping[str, np.ndarray]
    timings_ms: Mapping[str, float]

    @property
    def latency_ms(self) -> float:
        return float(sum(self.timings_ms.values()))
