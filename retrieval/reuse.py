"""What a run may reuse instead of recomputing, and the order it looks in: the policy (Reuse), the
retrieval-prefix candidates on disk (CandidateCache) and, within one process (a multirun's jobs), corpora,
indexes, candidates, rank levels and built stages (ProcessMemo). retrieval.pipeline.Pipeline.run asks
Reuse only; the keys (suite hash, the `retrieval` source hash and stage fingerprints) are made there, so a
code or config change never reads an old entry. The design and the benchmark behind it: docs/sweeps.md.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
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

    def prefix(
        self,
        key: str,
        retrieve: Callable[[], dict],
        scoped: Callable[[], tuple[ScopedPrefix, Sequence[str]]] | None = None,
    ) -> tuple[dict, str | None, dict[str, int] | None]:
        """The prefix candidates, where they came from ("process memo", "disk", None: retrieved now) and,
        when the whole suite's entry was missing and `scoped` is given, how many scopes came from their
        own disk entries and how many were retrieved ({"reused": r, "retrieved": n}; source "disk" only
        when every scope came from disk)."""
        found, source, scopes = (
            (self.memo.get("prefix", key), "process memo", None)
            if self.memo is not None
            else (None, None, None)
        )
        if found is None and self.cache is not None:
            found, source = self.cache.load(key), "disk"
        if found is None:
            if self.cache is not None and scoped is not None:
                split, order = scoped()
                found, scopes = split.assemble(self.cache, order)
                source = "disk" if scopes["retrieved"] == 0 else None
            else:
                found, source = retrieve(), None
            if self.cache is not None:
                self.cache.save(key, found)
        if self.memo is not None:
            self.memo.put("prefix", key, found)
        return found, source, scopes

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


def _plain(value: Any) -> Any:
    """JSON for what memories, queries and annotations hold (mappings, tuples, sets, arrays)."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    return repr(value)


def _canonical(value: Any) -> bytes:
    text = json.dumps(value, default=_plain, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return text.encode("utf-8", "surrogatepass") + b"\n"


def scope_digests(corpus: Any, queries: Sequence[Any], knowledge: Any = None) -> dict[str, str]:
    """sha256 of what one scope's prefix candidates depend on, per scope that has queries: its memories
    as ingested (every field and annotation, in corpus order: an ingest stage that looks across scopes
    shows up here), its queries (every field, in run order) and, when the suite has any, the concept
    graphs and feedback (all of it: their records name scopes only through their concepts)."""
    by_scope: dict[str, list[Any]] = {}
    for q in queries:
        by_scope.setdefault(q.scope_key, []).append(q)
    shared = hashlib.sha256(_canonical(knowledge) if knowledge else b"").hexdigest()
    out = {}
    for key, scope_queries in by_scope.items():
        digest = hashlib.sha256(shared.encode() + b"\0memories\0")
        for i in corpus.partition(key):
            digest.update(_canonical(corpus.memories[int(i)]))
        digest.update(b"\0queries\0")
        for q in scope_queries:
            digest.update(_canonical(q))
        out[key] = digest.hexdigest()
    return out


@dataclass(frozen=True)
class ScopedPrefix:
    """The prefix candidates split by scope, each scope on disk under its own key, so a re-run after one
    conversation changed retrieves that conversation only (scopes are retrieved independently: every
    channel indexes per scope, docs/caching.md). Entries hold positions local to the scope (the n-th
    memory of the scope), so a scope keeps its entry when another scope grows or shrinks."""

    keys: Mapping[str, str]  # scope -> its entry's key
    parts: Mapping[str, np.ndarray]  # scope -> corpus positions of its memories, ascending
    queries: Mapping[str, list[str]]  # scope -> its query ids, in run order
    retrieve: Callable[[list[str]], dict]  # scopes -> {query id: (index, columns, timings)}, corpus positions

    def assemble(self, cache: CandidateCache, order: Sequence[str]) -> tuple[dict, dict[str, int]]:
        """Every query's candidates: scopes found on disk, the rest retrieved (together) and stored."""
        found, missing = {}, []
        for scope, key in self.keys.items():
            entry = cache.load(f"scope-{key}")
            if entry is None or set(entry) != set(self.queries[scope]):
                missing.append(scope)
                continue
            part = self.parts[scope]
            for q, (index, columns, times) in entry.items():  # not measured in this run: NaN, never replayed
                found[q] = (part[index], columns, dict.fromkeys(times, float("nan")))
        fresh = self.retrieve(missing) if missing else {}
        for scope in missing:
            part, local = self.parts[scope], {}
            for q in self.queries[scope]:
                index, columns, times = fresh[q]
                at = np.searchsorted(part, index)
                inside = len(part) > 0 and np.array_equal(part[np.minimum(at, len(part) - 1)], index)
                if len(index) and not inside:
                    break  # a candidate outside the query's scope (an outside run file): not stored
                local[q] = (at.astype(np.int64), columns, times)
            else:
                cache.save(f"scope-{self.keys[scope]}", local)
        found.update(fresh)
        return {q: found[q] for q in order}, {
            "reused": len(self.keys) - len(missing),
            "retrieved": len(missing),
        }


@functools.cache
def process_memo() -> ProcessMemo:
    """This process's loaded suites, corpora, indexes and candidates, shared by the jobs of a multirun.

    Here, not in the runner: `python -m experiments.run` makes the runner `__main__`, which joblib
    workers cannot import by name.
    """
    return ProcessMemo()
