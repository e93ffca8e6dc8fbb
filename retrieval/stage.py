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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np

from retrieval.types import Candidates, Corpus, Memory, Query


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
    if isinstance(value, float) and value == int(value):
        return int(value)  # 0.0 and 0 configure the same stage
    return value


def fingerprint_of(obj: Any) -> str:
    cls = type(obj)
    payload = {"class": f"{cls.__module__}.{cls.__qualname__}"}
    if dataclasses.is_dataclass(obj):
        payload["config"] = {f.name: _canonical(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass(frozen=True, kw_only=True)
class Stage(abc.ABC):
    """Base of every stage: a name for reports, a config, an on/off switch, a fingerprint."""

    name: ClassVar[str] = "stage"
    enabled: bool = True

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
