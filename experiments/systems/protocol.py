"""The adapter contract every live memory system implements (docs/live_systems.md).

Data flow: `SystemRetriever.build(corpus)` calls, for each scope of the corpus, `reset(scope)`,
`ingest(scope, memories)` and `wait_until_searchable(scope, memories)`; then `search(request)` once per
query. Scopes are isolated: a search sees only what was ingested under its own scope. Ingest is
idempotent: memories carry the suite's ids (client-made), so a retried or resumed ingest never stores
a memory twice. Optional: `count(scope) -> int | None`, how many memories the service holds under a
scope (the HTTP and MCP adapters have it when their config names a count endpoint or tool); a resumed
record run uses it to check that the service kept what its cassette says was ingested, and re-ingests
the scope without it (experiments/systems/cassette.py). Optional too: `check_available()`, asked before the
first call (a replay, or a record run with a complete cassette, never asks it). An adapter never fails
silently: a transport or protocol problem raises `LiveSystemError` naming the operation (and the query id
or JSON path where there is one). An adapter never leaks a secret: `LiveSystemError` redacts every known
secret's value from its message (experiments/systems/secrets.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from experiments.systems.secrets import redact
from retrieval.types import Memory

_EMPTY: Mapping[str, Any] = MappingProxyType({})


class LiveSystemError(RuntimeError):
    """A live system failed: unreachable, malformed response, timeout after retries, replay miss."""

    def __init__(self, message: object = "", *args: object):
        # The one place every adapter error passes: a service that echoes a request's headers into its
        # error (quoted here) must not put a key into a log, failed.json or MLflow.
        super().__init__(redact(str(message)), *args)


@dataclass(frozen=True)
class SearchRequest:
    """One search as the adapter sends it. `as_of` is the query's time anchor (ISO-8601, or None);
    `overrides` the per-request config overrides (e.g. AtomicMemory's `config_override`)."""

    query_id: str
    text: str
    scope: Mapping[str, str]
    k: int
    as_of: str | None = None
    overrides: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True)
class Hit:
    """One result: the memory id the system returned (the suite's id when ingest was idempotent), its
    score when the system gives one, and its text (the context a user's agent would pay for)."""

    id: str
    score: float | None = None
    text: str | None = None


@runtime_checkable
class MemorySystem(Protocol):
    """What a live memory system offers the harness; each call is blocking and may raise LiveSystemError."""

    def reset(self, scope: Mapping[str, str]) -> None:
        """Forget everything stored under this scope (a fresh start for an evaluation)."""
        ...

    def ingest(self, scope: Mapping[str, str], memories: Sequence[Memory]) -> None:
        """Store the memories (id, text, created_at, metadata...) under the scope; idempotent by id."""
        ...

    def wait_until_searchable(self, scope: Mapping[str, str], memories: Sequence[Memory]) -> float:
        """Block until what was ingested under the scope is searchable (polled, bounded); seconds waited."""
        ...

    def search(self, request: SearchRequest) -> list[Hit]:
        """The system's ranked results for one query, best first (at most `request.k`). Every hit keeps its
        rank: an id the suite does not hold, or of another scope, counts as a hit that is not relevant. A
        score, when given, must be a finite number (NaN or an infinity is an error naming the query)."""
        ...

    def close(self) -> None:
        """Release connections, processes and files: called once, at the end of a live or record run,
        whatever happened (what it raises is a warning: SystemRetriever.close_system)."""
        ...


def poll_until_searchable(
    count: Callable[[], int], wanted: int, timeout_s: float, poll_s: float, where: str, field: str
) -> float:
    """Seconds until `count()` reaches `wanted` (the memories ingested), polled every `poll_s`; past
    `timeout_s` a LiveSystemError naming `where` (the system and scope) and the config `field` to raise."""
    started = time.perf_counter()
    while (stored := count()) < wanted:
        if time.perf_counter() - started > timeout_s:
            raise LiveSystemError(
                f"{where}: {stored} of {wanted} memories searchable after {timeout_s:g} s ({field})"
            )
        time.sleep(poll_s)
    return time.perf_counter() - started
