"""Rules shared by the decay and prune stages: memory age, recency, ICM importance, access counts.

    recency    = floor + (1 - floor) * exp(-age_days / half_life_days)   (per memory kind, capped at 1)
    importance = base[level]                                     for critical and high
               = base[level] / (1 + access_count * access_step)  for medium and low

Access counts come from a suite's metadata (`access_count`, or `access_history`: timestamps, counted
up to the query's `now`) or from replaying the query stream through an `AccessLedger`.

The ledger is the one piece of state across queries, and it is kept apart on purpose: a component
injected into the decay stage (like the encoder), holding one count vector per corpus object, so a
new run (a new Corpus) starts from zero and a sweep's runs never see each other's counts. The pipeline
ranks queries one by one in suite order; the decay stage reads the counts left by the queries before
(never the current one: no self-reinforcement within a query), then records the ids it returns in its
top `top_k`. Deterministic for a given suite order; rank stages after decay do not change the counts.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np

from retrieval.types import Corpus, Query

DECAYING_LEVELS = ("medium", "low")
DEFAULT_WEIGHTS = {"critical": 1.0, "high": 0.8, "medium": 0.6, "low": 0.4}


def epoch_days(value: str | None) -> float:
    """ISO date or datetime -> days since 1970-01-01 (naive = UTC); missing or bad -> NaN."""
    if not value:
        return float("nan")
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        return float("nan")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp() / 86400.0


_DAYS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # corpus -> created_at in epoch days


def created_days(corpus: Corpus) -> np.ndarray:
    if corpus not in _DAYS:
        _DAYS[corpus] = np.array([epoch_days(m.created_at) for m in corpus.memories])
    return _DAYS[corpus]


def recency(age_days: np.ndarray, floor: np.ndarray, half_life: np.ndarray) -> np.ndarray:
    """floor + (1 - floor) exp(-age / half_life), capped at 1; unknown age (NaN) -> 1 (no decay)."""
    age = np.where(np.isnan(age_days), 0.0, age_days)
    value = floor + (1.0 - floor) * np.exp(-age / half_life)
    return np.minimum(1.0, value)


def importance_weight(
    levels: np.ndarray, access: np.ndarray, weights: Mapping[str, float], access_step: float
) -> np.ndarray:
    """ICM weight per memory; a level with no configured weight (or None) -> 1.0."""
    base = np.array([float(weights.get(lv, 1.0)) if lv is not None else 1.0 for lv in levels])
    decaying = np.isin(levels.astype(str), DECAYING_LEVELS)
    return np.where(decaying, base / (1.0 + access * access_step), base)


def metadata_access(corpus: Corpus, index: np.ndarray, query: Query) -> np.ndarray:
    """Access counts from suite metadata: `access_count`, else `access_history` entries up to query.now."""
    now = epoch_days(query.now)
    out = np.zeros(len(index))
    for pos, i in enumerate(index):
        m = corpus.memories[i]
        count = m.metadata.get("access_count")
        if count is None and m.metadata.get("access_history"):
            days = np.array([epoch_days(t) for t in m.metadata["access_history"]])
            count = int(np.sum(days <= now)) if not np.isnan(now) else len(days)
        out[pos] = float(count or 0)
    return out


@dataclass(frozen=True, kw_only=True)
class AccessLedger:
    """Replayed access counts: how often each memory was returned to the queries before this one."""

    top_k: int = 10
    _counts: weakref.WeakKeyDictionary = field(
        default_factory=weakref.WeakKeyDictionary, repr=False, compare=False
    )

    def fingerprint(self) -> str:
        return f"AccessLedger(top_k={self.top_k})"

    def counts(self, corpus: Corpus, index: np.ndarray) -> np.ndarray:
        vector = self._counts.get(corpus)
        return np.zeros(len(index)) if vector is None else vector[index].astype(np.float64)

    def record(self, corpus: Corpus, returned: np.ndarray) -> None:
        if corpus not in self._counts:
            self._counts[corpus] = np.zeros(len(corpus), dtype=np.int64)
        self._counts[corpus][returned[: self.top_k]] += 1
