"""What a run may reuse instead of recomputing, and the order it looks in: the policy (Reuse), the
retrieval-prefix candidates on disk (CandidateCache) and, within one process (a multirun's jobs), corpora,
indexes, candidates, rank levels and built stages (ProcessMemo). retrieval.pipeline.Pipeline.run asks
Reuse only; the keys (suite hash, the `retrieval` source hash and stage fingerprints) are made there, so a
code or config change never reads an old entry. The design and the benchmark behind it: docs/sweeps.md.
"""

from __future__ import annotations

import functools
import json
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from retrieval import cache_io


@dataclass(frozen=True)
class CandidateCache:
    """On-disk store of retrieval-prefix candidates, one checksummed `.npz` per prefix fingerprint.

    The candidates `{query id: (index, columns, timings)}` are stored as plain arrays: one array per
    (column, dtype), the queries' rows end to end, and a JSON layout (query ids, row counts, column
    names, timings) in a text array. Nothing is pickled, so a planted entry cannot run code; one that
    does not decode to that layout is corrupt. A torn or corrupt entry is reported, deleted and
    recomputed; an unwritable folder means no caching.
    """

    folder: str | Path

    def _path(self, key: str) -> Path:
        return Path(self.folder) / f"{key}.npz"

    def load(self, key: str) -> dict | None:
        path = self._path(key)
        arrays = cache_io.load_arrays(path)
        if arrays is None:
            return None
        try:
            return _candidates_from_arrays(arrays)
        except (KeyError, ValueError, TypeError, IndexError) as err:
            cache_io.discard(path, f"not a candidates layout: {err}")
            return None

    def save(self, key: str, value: dict) -> bool:
        arrays = _candidates_to_arrays(value)
        return arrays is not None and cache_io.save_arrays(self._path(key), **arrays)


_PLAIN_KINDS = frozenset("biufcUS")  # dtypes np.load reads without pickle


def _candidates_to_arrays(prefix: Mapping[str, tuple]) -> dict[str, np.ndarray] | None:
    """{query id: (index, columns, timings)} -> plain arrays; None when a column is not a plain 1-D
    array of the candidates' length (not cacheable, so not cached)."""
    groups: dict[tuple[str, str], list[np.ndarray]] = {}
    queries = []
    for qid, (index, columns, timings) in prefix.items():
        named = {"\0index": np.asarray(index), **{k: np.asarray(v) for k, v in columns.items()}}
        refs = []
        for name, values in named.items():
            if values.dtype.kind not in _PLAIN_KINDS or values.shape != (len(index),):
                return None
            group = (name, values.dtype.str)
            refs.append([name, list(groups).index(group) if group in groups else len(groups)])
            groups.setdefault(group, []).append(values)
        queries.append([qid, len(index), refs, {k: float(v) for k, v in timings.items()}])
    layout = {"queries": queries, "groups": [list(g) for g in groups]}
    arrays = {f"g{i}": np.concatenate(parts) for i, parts in enumerate(groups.values())}
    return {"layout": np.array(json.dumps(layout)), **arrays}


def _candidates_from_arrays(arrays: Mapping[str, np.ndarray]) -> dict:
    layout = json.loads(str(arrays["layout"][()]))
    cursor = [0] * len(layout["groups"])
    out = {}
    for qid, n, refs, timings in layout["queries"]:
        named = {}
        for name, group in refs:
            values = arrays[f"g{group}"][cursor[group] : cursor[group] + n]
            if len(values) != n:
                raise ValueError(f"column {name!r} of query {qid!r} is cut short")
            named[name] = values.copy()  # owned arrays, as computed ones are: stages may edit them
            cursor[group] += n
        index = named.pop("\0index")
        out[qid] = (index, named, {k: float(v) for k, v in timings.items()})
    if any(c != len(arrays[f"g{i}"]) for i, c in enumerate(cursor)):
        raise ValueError("rows left over after the last query")
    return out


@dataclass(frozen=True)
class ProcessMemo:
    """What one process reuses between runs (the jobs of a multirun): ingested corpora, built indexes
    and retrieval-prefix candidates, keyed by suite hash + fingerprints; a few entries per kind (LRU).
    """

    max_entries: int = 4
    _kinds: dict = field(default_factory=dict, repr=False)

    def get(self, kind: str, key: Any) -> Any | None:
        entries = self._kinds.setdefault(kind, OrderedDict())
        if key not in entries:
            return None
        entries.move_to_end(key)
        return entries[key]

    def put(self, kind: str, key: Any, value: Any) -> Any:
        entries = self._kinds.setdefault(kind, OrderedDict())
        entries[key] = value
        while len(entries) > self.max_entries:
            entries.popitem(last=False)
        return value

    def get_or_make(self, kind: str, key: Any, make: Callable[[], Any]) -> Any:
        value = self.get(kind, key)
        return self.put(kind, key, make()) if value is None else value


@dataclass(frozen=True)
class Reuse:
    """The reuse policy of one run: what it may take instead of computing, looked up in this order.

    - corpus and indexes: the process memo (a multirun's earlier job on the same suite and stages);
    - retrieval-prefix candidates: the process memo, then the disk cache, else retrieved and kept in both;
    - rank stages: the deepest level whose chain of fingerprints the memo holds; the stages after it run.

    Nothing is reused without a suite hash (nothing to key it by), nor for a pipeline with a live channel
    (a service's answers may change while its config does not: they come from the service or its cassette).
    """

    memo: ProcessMemo | None = None
    cache: CandidateCache | None = None

    @classmethod
    def of(
        cls, memo: ProcessMemo | None, cache: CandidateCache | None, suite_hash: str | None, live: bool
    ) -> Reuse:
        if live or not suite_hash:
            return cls()
        return cls(memo, cache)

    @property
    def shares(self) -> bool:
        """Whether what a run computes is kept for later runs (so a stage must work on copies)."""
        return self.memo is not None

    def made(self, kind: str, key: Any, make: Callable[[], Any]) -> Any:
        """A corpus or an index: the memo's, else made (and kept)."""
        return self.memo.get_or_make(kind, key, make) if self.memo is not None else make()

    def prefix(self, key: str, retrieve: Callable[[], dict]) -> tuple[dict, str | None]:
        """The prefix candidates and where they came from ("process memo", "disk", None: retrieved now)."""
        found, source = (
            (self.memo.get("prefix", key), "process memo") if self.memo is not None else (None, None)
        )
        if found is None and self.cache is not None:
            found, source = self.cache.load(key), "disk"
        if found is None:
            found, source = retrieve(), None
            if self.cache is not None:
                self.cache.save(key, found)
        if self.memo is not None:
            self.memo.put("prefix", key, found)
        return found, source

    def deepest_rank_level(self, chain: list[str], prefix: Any) -> tuple[Any, int]:
        """(candidates after rank stage `level`, level) for the deepest level the memo holds, else
        (`prefix`, 0). `chain[level]`: the key after `level` rank stages (chain[0] is the prefix's)."""
        for level in range(len(chain) - 1, 0, -1) if self.memo is not None else ():
            hit = self.memo.get("rank", chain[level])
            if hit is not None:
                return hit, level
        return prefix, 0

    def keep_rank_level(self, key: str, state: Any) -> None:
        if self.memo is not None:
            self.memo.put("rank", key, state)


@functools.cache
def process_memo() -> ProcessMemo:
    """This process's loaded suites, corpora, indexes and candidates, shared by the jobs of a multirun.

    Here, not in the runner: `python -m experiments.run` makes the runner `__main__`, which joblib
    workers cannot import by name.
    """
    return ProcessMemo()
