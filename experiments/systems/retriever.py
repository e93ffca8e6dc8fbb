"""System channel: a live memory service (HTTP, MCP, a Python library) as one retrieval channel.

    memeval-run variant=system system=memeval_serve system.base_url=http://127.0.0.1:8000

`build(corpus)` puts the suite into the service, scope by scope: `reset`, `ingest` (the suite's own ids,
so a retry or a resumed run never stores a memory twice), `wait_until_searchable`, each timed. The
pipeline then calls `prefetch(queries)` once: every query is sent to the service from a pool of
`concurrency` threads, and each query's own wall latency (network and retries included) becomes the
channel's timing for it (retrieval/pipeline.py). `search(query)` hands back the prefetched answer as
corpus indices and scores, so fusion, rank stages, metrics, reports and the gate apply unchanged.

What the service returns is checked, never trusted silently, and never moves a hit below it up: an id the
suite does not hold keeps its rank as a hit no qrels judge relevant (a foreign row of the corpus, written
to run.trec as the id the service gave; counted: "12 returned ids are not in the suite"); a memory of
another scope than the query's keeps its rank too and is a leak (counted once, by the run's top-level
`scope_leaks`: experiments/evaluate/table.py); a repeated id keeps its first rank. A score that is NaN,
infinite or not a number is an error naming the query.
`report()` is the cost: latency p50/p95, ingest throughput, time until searchable, errors, timeouts,
retries, unknown ids and the returned texts (experiments/systems/outputs.py makes the `system` section of
metrics.json of it).

Caching: a system channel is `live`: its answers may change while its config does not (the service is
redeployed), so the pipeline never answers it from the candidate cache or the process memo, in any
mode. A replay (`mode=replay`) is answered by its cassette, which is itself the record
(experiments/systems/cassette.py); a record run re-asks only what its cassette lacks.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from experiments.systems.cassette import FORMAT, Cassette, RecordedSystem
from experiments.systems.protocol import Hit, LiveSystemError, MemorySystem, SearchRequest
from experiments.systems.python_adapter import guarded
from retrieval.progress import SERVICE_INDEX, SERVICE_INGEST, phase
from retrieval.stage import Range, Retriever, fingerprint_of
from retrieval.types import Corpus, Query

Mode = Literal["live", "record", "replay"]
_NOT_IDENTITY = ("system", "call_timeout_s")  # the adapter has its own identity; a bound changes no answer


def system_identity(system: Any) -> str:
    """What an adapter answers by (endpoints, templates, paths; never a secret nor the base URL): its own
    `fingerprint()` when it has one, else its dataclass config."""
    fingerprint = getattr(system, "fingerprint", None)
    return fingerprint() if callable(fingerprint) else fingerprint_of(system)


def _service_identity(system: Any) -> dict[str, str]:
    """What the adapter learnt of the service at its start-up check (`service_identity()`; {} without)."""
    identity = getattr(system, "service_identity", None)
    return identity() if callable(identity) else {}


class _SystemIndex:
    def __init__(self, corpus: Corpus, retriever: SystemRetriever):
        self._retriever = retriever
        self._corpus = corpus
        self._position = {str(mid): i for i, mid in enumerate(corpus.ids)}
        system: Any = retriever.adapter
        check_scopes = getattr(system, "check_scopes", None)
        if callable(check_scopes):  # `{scope.<name>}` of a key a scope lacks: refused before any call
            check_scopes([corpus.memories[corpus.partition(key)[0]].scope for key in corpus.scopes])
        self._recorded: RecordedSystem | None = None
        if retriever.mode != "live":
            cassette = Cassette(retriever.cassette or "", writable=retriever.mode == "record")
            system = self._recorded = RecordedSystem(
                retriever.adapter,
                cassette,
                system_identity(retriever.system),
                replay=retriever.mode == "replay",
            )
        self._system = system
        stats = getattr(retriever.system, "stats", None)
        self._stats_before = stats.snapshot() if stats is not None else None
        self._answers: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._latency: dict[str, float] = {}
        self._latency_recorded = 0  # queries whose latency is the cassette's (answered from it)
        self._texts: dict[str, list[str | None]] = {}
        self._problems = {"unknown_ids": 0, "duplicate_ids": 0, "hits_without_text": 0}
        self._unknown_examples: list[str] = []
        self._lock = threading.Lock()
        self._ingest_s = 0.0
        self._searchable_s = 0.0
        self._ingested = 0
        total, n = len(corpus.memories), len(corpus.scopes)
        for k, key in enumerate(corpus.scopes, 1):
            part = corpus.partition(key)
            memories = [corpus.memories[i] for i in part]
            scope = memories[0].scope
            # Told, so the console is never silent while a service ingests or indexes for minutes
            # (experiments/run/phase_lines.py prints these even with the bars on: no bar covers them).
            phase(SERVICE_INGEST, self._ingested, total, (k, n))
            t = time.perf_counter()
            system.reset(scope)
            system.ingest(scope, memories)
            self._ingest_s += time.perf_counter() - t
            phase(SERVICE_INDEX, self._ingested, total, (k, n))
            t = time.perf_counter()
            system.wait_until_searchable(scope, memories)
            self._searchable_s += time.perf_counter() - t
            self._ingested += len(memories)

    def _ask(self, query: Query) -> None:
        request = SearchRequest(
            query_id=query.id,
            text=query.text,
            scope=dict(query.scope),
            k=self._retriever.top_n,
            as_of=query.now,
            overrides=dict(self._retriever.override),
        )
        recorded = False
        if self._recorded is not None:  # the service's own latency: measured live, or as recorded
            hits, elapsed, recorded = self._recorded.search_timed(request)
        else:
            t = time.perf_counter()
            hits = self._system.search(request)
            elapsed = (time.perf_counter() - t) * 1000
        answer, texts = self._to_candidates(query, hits)
        with self._lock:
            self._answers[query.id] = answer
            self._latency[query.id] = elapsed
            self._latency_recorded += recorded
            self._texts[query.id] = texts

    def _to_candidates(
        self, query: Query, hits: Sequence[Hit]
    ) -> tuple[tuple[np.ndarray, np.ndarray], list[str | None]]:
        """The service's hits as corpus rows, each at the rank the service gave it: an id the suite does not
        hold becomes a foreign row (`Corpus.add_foreign`) and a memory of another scope stays that memory,
        both counted and never relevant to this query; only a repeated id is dropped (it keeps its first
        rank). A score that is not a finite number is an error naming the query."""
        index: list[int] = []
        scores: list[float] = []
        texts: list[str | None] = []  # kept as they came: words are counted at the suite's k only
        foreign: list[tuple[int, str, str | None]] = []  # (place in `index`, id, text)
        seen: set[str] = set()
        problems = dict.fromkeys(self._problems, 0)
        examples = []
        for rank, hit in enumerate(hits[: self._retriever.top_n], 1):
            # A system that gives no score: its order is its ranking (1/rank keeps it for fusion).
            score = _finite_score(query, rank, hit) if hit.score is not None else 1.0 / rank
            hit_id = str(hit.id)
            if hit_id in seen:
                problems["duplicate_ids"] += 1
                continue
            seen.add(hit_id)
            position = self._position.get(hit_id)
            if position is None:
                problems["unknown_ids"] += 1
                examples.append(f"{query.id}: {hit.id}")
                foreign.append((len(index), hit_id, hit.text))
                position = -1  # its foreign row, made below for all of them at once
            index.append(position)
            scores.append(score)
            texts.append(hit.text)
            problems["hits_without_text"] += hit.text is None
        if foreign:
            rows = self._corpus.add_foreign([(i, t) for _, i, t in foreign])
            for (place, _, _), row in zip(foreign, rows, strict=True):
                index[place] = row
        with self._lock:
            for name, n in problems.items():
                self._problems[name] += n
            self._unknown_examples.extend(examples[: 5 - len(self._unknown_examples)])
        return (np.array(index, dtype=np.int64), np.array(scores, dtype=np.float64)), texts

    def prefetch(self, queries: Sequence[Query]) -> None:
        """Ask the service for every query, `concurrency` at a time; the first failure stops the run."""
        todo = [q for q in queries if q.id not in self._answers]
        with ThreadPoolExecutor(max_workers=self._retriever.concurrency, thread_name_prefix="system") as pool:
            futures = [pool.submit(self._ask, q) for q in todo]
            done, pending = wait(futures, return_when=FIRST_EXCEPTION)
            for future in pending:
                future.cancel()
            for future in futures:
                if future.done() and not future.cancelled() and future.exception() is not None:
                    raise future.exception()  # type: ignore[misc]

    def search(self, query: Query) -> tuple[np.ndarray, np.ndarray]:
        if query.id not in self._answers:
            self._ask(query)
        index, scores = self._answers[query.id]
        return index.copy(), scores.copy()

    def latency_ms(self, query: Query) -> float:
        """The query's own wall time at the service (prefetched concurrently), network included."""
        return self._latency.get(query.id, math.nan)

    def report(self) -> dict[str, Any]:
        """What the system cost and what it returned wrong (outputs.py makes metrics.json's `system` section
        of it)."""
        latency = np.array(list(self._latency.values()), dtype=np.float64)
        stats = getattr(self._retriever.system, "stats", None)
        counts = (
            stats.since(self._stats_before) if stats is not None and self._stats_before is not None else {}
        )
        out: dict[str, Any] = {
            "channel": self._retriever.channel,
            "mode": self._retriever.mode,
            "service": _service_identity(self._retriever.system),
            "concurrency": self._retriever.concurrency,
            "override": dict(self._retriever.override),
            "n_queries": len(self._latency),
            # "measured": timed at the service in this run; "recorded": each the latency the cassette
            # recorded for the query (a replay); "measured and recorded": a resumed record run.
            "latency_source": _latency_source(len(latency) - self._latency_recorded, self._latency_recorded),
            "latency_ms_p50": float(np.percentile(latency, 50)) if len(latency) else None,
            "latency_ms_p95": float(np.percentile(latency, 95)) if len(latency) else None,
            "memories_ingested": self._ingested,
            "ingest_s": self._ingest_s,
            "ingest_per_s": self._ingested / self._ingest_s if self._ingest_s > 0 else None,
            "until_searchable_s": self._searchable_s,
            **{
                name: counts.get(name, 0)
                for name in ("requests", "errors", "timeouts", "retries", "rate_limited")
            },
            **self._problems,
            "unknown_id_examples": list(self._unknown_examples),
            "texts_per_query": dict(self._texts),  # reduced to words at k in outputs.py
        }
        if self._recorded is not None:
            recorded = np.array(self._recorded.recorded_latency_ms(), dtype=np.float64)
            out["cassette"] = {
                "path": str(self._recorded.cassette.path),
                "answered_from_cassette": self._recorded.answered["cassette"],
                "answered_live": self._recorded.answered["live"],
                "torn_tail_dropped": self._recorded.cassette.dropped_tail,
                "sha256": self._recorded.cassette.digest,  # the whole exchange sequence (cassette.py)
                "format": FORMAT,
                "scopes_verified_by_count": self._recorded.scopes["verified_by_count"],
                "scopes_reingested": self._recorded.scopes["reingested"],
                "recorded_latency_ms_p50": float(np.percentile(recorded, 50)) if len(recorded) else None,
            }
        return out


def _latency_source(measured: int, recorded: int) -> str:
    return {(True, False): "measured", (False, True): "recorded"}.get(
        (measured > 0, recorded > 0), "measured and recorded" if measured else "none"
    )


def _finite_score(query: Query, rank: int, hit: Hit) -> float:
    """A hit's score as a float; NaN, an infinity or a non-number is refused: it has no place in a ranking
    (run.trec would be re-sorted by trec_eval in another order than the harness scored)."""
    try:
        score = float(hit.score)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        score = math.nan
    if not math.isfinite(score):
        raise LiveSystemError(
            f"query {query.id}: result {rank} (id {hit.id!r}) has score {hit.score!r}; a score must be a "
            "finite number, or absent (the service's order is then its ranking)"
        )
    return score


@dataclass(frozen=True, kw_only=True)
class SystemRetriever(Retriever):
    """A live memory system as a channel. `system`: the adapter (the `system` config group builds it);
    `override`: the per-request config overrides sent with every search (AtomicMemory's
    `config_override`); `top_n`: the k asked of the service; `call_timeout_s`: the bound on each call of a
    user's Python class (system=python: experiments/systems/python_adapter.py; the harness's adapters
    bound their own requests, e.g. HTTP's `timeout_s`)."""

    name = "system"
    ranges = {"concurrency": Range(ge=1), "call_timeout_s": Range(gt=0)}
    channel: str = "system"
    system: MemorySystem
    mode: Mode = "live"
    cassette: str | None = None
    concurrency: int = 4
    override: Mapping[str, Any] = field(default_factory=dict)
    call_timeout_s: float = 600.0

    live = True  # never answered from the candidate cache or the process memo (module docstring)

    @functools.cached_property
    def adapter(self) -> MemorySystem:
        """The adapter as the run calls it: a user's Python class bounded and checked (python_adapter.py)."""
        return guarded(self.system, self.call_timeout_s)

    def close_system(self) -> None:
        """At the end of a run, once, whatever happened: the adapter's `close()` (not a replay's: nothing was
        opened for it). What close raises is a warning: the run's results stand."""
        if self.mode == "replay":
            return
        try:
            self.adapter.close()
        except Exception as err:  # noqa: BLE001 (a harness adapter's own failure to close: the same)
            warnings.warn(f"system channel {self.channel}: close() failed: {err}", stacklevel=2)

    def config_problems(self) -> list[tuple[str, str]]:
        if self.mode != "live" and not self.cassette:
            return [("cassette", f"mode {self.mode} needs a cassette file (system.cassette=PATH)")]
        return []

    def check_available(self) -> None:
        """Before any work: a live service answers its health check; a cassette is whole and a regular file
        (a replay's exists). A record run asks its service only when something is not in the cassette
        (experiments/systems/cassette.py), so a complete cassette needs no service."""
        if self.mode != "live":
            if self.mode == "replay" or os.path.lexists(self.cassette or ""):
                Cassette(self.cassette or "", writable=False)
            return
        check = getattr(self.adapter, "check_available", None)
        if callable(check):
            check()

    def fingerprint(self) -> str:
        """The stage's config with the adapter as its identity (`system_identity`: a user's adapter object
        would otherwise be hashed by its memory address) and, for a record or replay, the cassette's content
        digest: a finished run answers again only for a run of the same exchanges, never for one whose
        cassette at the same path had other content."""
        config = {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in _NOT_IDENTITY
        }
        recorded = self.mode != "live" and self.cassette
        payload = {
            "class": f"{type(self).__module__}.{type(self).__qualname__}",
            "config": {**config, "override": dict(self.override)},
            "system": system_identity(self.system),
            "cassette_sha256": Cassette.digest_of(self.cassette) if recorded else None,
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def build(self, corpus: Corpus) -> _SystemIndex:
        return _SystemIndex(corpus, self)


__all__ = ["LiveSystemError", "SystemRetriever"]
