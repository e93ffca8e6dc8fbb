"""An HTTP memory service as a `MemorySystem`, described in YAML, with no code (conf/system/).

    memeval-run variant=system system=memeval_serve system.base_url=http://127.0.0.1:8000

Each operation (`ingest`, `search`, `reset`, and optionally `count` for the searchable wait, `health` for
the check at start) is `{method, path, body}`. A body is a JSON template: a string that is exactly one
placeholder (`"{overrides}"`) becomes that value as JSON (an object, a list, a number, null); placeholders
inside longer strings are replaced by their text. Placeholders:

    search   {query_id} {text} {scope} {scope.<name>} {k} {as_of} {overrides}
    ingest   {scope} {scope.<name>} {memories}  (the list of `memory` templates, one per memory:
             {id} {text} {created_at} {role} {metadata} {record} = the whole suite record)
    reset, count   {scope} {scope.<name>}

`results` names JSON paths (dots, `[i]` for list items) into the search response: `hits` (the list),
and in each hit `id`, `score` (optional) and `text` (optional); `count.path` reads the stored count.
A path that is missing is an error naming the query id and the path.

Headers may hold secrets as `{env:NAME}`: read from the environment at request time, never part of
the adapter's fingerprint, a log line, an error, the run's config or a cassette (the config holds the
placeholder, not the value).

Transport: stdlib `http.client`, a kept-alive connection per thread (remade after any failure; a kept
connection the service closed while idle is remade and the request re-sent at once, not counted as a
retry). A request is retried (`retries` times, exponential backoff
from `backoff_s`, capped at `max_backoff_s`) on a connection error, a timeout, 429 and 5xx; a
`Retry-After` header (seconds) is honoured. Ingest carries the suite's ids, so a retried ingest never
stores a memory twice (the service refuses ids it holds). Counts go to `stats` (retrieval/systems/stats.py).
"""

from __future__ import annotations

import functools
import hashlib
import http.client
import json
import os
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from retrieval.systems.protocol import Hit, SearchRequest, SystemError_
from retrieval.systems.stats import SystemStats
from retrieval.types import Memory, memory_record

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_.]*)\}")
_ENV = re.compile(r"\{env:([A-Za-z_][A-Za-z0-9_]*)\}")
_RETRY_STATUS = {429, 500, 502, 503, 504}
# Kept-alive connections, one per thread and adapter: the retriever asks from a pool of threads, and an
# http.client connection is not thread-safe. A killed and restarted service costs one failed attempt
# (counted and retried), after which a new connection is made.
_CONNECTIONS = threading.local()
ENDPOINTS = ("search", "ingest", "reset", "count", "health")


def fill(template: Any, values: Mapping[str, Any]) -> Any:
    """The template with its placeholders replaced (module docstring); an unknown placeholder is an error."""
    if isinstance(template, str):
        whole = _PLACEHOLDER.fullmatch(template)
        if whole:
            return _value(whole[1], values)
        return _PLACEHOLDER.sub(lambda m: _text(_value(m[1], values)), template)
    if isinstance(template, Mapping):
        return {str(k): fill(v, values) for k, v in template.items()}
    if isinstance(template, (list, tuple)):
        return [fill(v, values) for v in template]
    return template


def _value(name: str, values: Mapping[str, Any]) -> Any:
    head, _, rest = name.partition(".")
    if head not in values:
        raise SystemError_(f"body template names {{{name}}}; known here: {', '.join(sorted(values))}")
    value = values[head]
    return value if not rest else (value or {}).get(rest)


def _text(value: Any) -> str:
    return "" if value is None else value if isinstance(value, str) else json.dumps(value)


@functools.lru_cache(maxsize=256)
def _path_parts(path: str) -> tuple[str, ...]:
    return tuple(re.findall(r"[^.\[\]]+|\[\d+\]", path))


def read_path(document: Any, path: str, where: str) -> Any:
    """The value at a dotted JSON path (`data.results[0].id`); missing -> SystemError_ naming it."""
    value = document
    for part in _path_parts(path):
        if part.startswith("["):
            i = int(part[1:-1])
            if not isinstance(value, list) or i >= len(value):
                raise SystemError_(f"{where}: JSON path {path!r}: no item {i} at {part!r}")
            value = value[i]
        else:
            if not isinstance(value, Mapping) or part not in value:
                raise SystemError_(f"{where}: JSON path {path!r}: no key {part!r} in the response")
            value = value[part]
    return value


def memory_values(memory: Memory) -> dict[str, Any]:

    record = memory_record(memory)
    return {
        "id": memory.id,
        "text": memory.text,
        "created_at": memory.created_at,
        "role": memory.role,
        "metadata": dict(memory.metadata),
        "record": record,
    }


@dataclass(frozen=True, kw_only=True)
class HttpSystem:
    """A memory service over HTTP+JSON, configured by endpoints, body templates and JSON paths."""

    base_url: str
    # search, ingest (required), reset, count ({method, path, body, path_in_response}: the searchable
    # wait), health (the check at start): each {method, path, body}
    endpoints: Mapping[str, Mapping[str, Any]]
    # One memory as the service takes it: a template (or "{record}": the suite format's whole record).
    memory: Mapping[str, Any] | str = field(default_factory=lambda: {"id": "{id}", "text": "{text}"})
    results: Mapping[str, str | None] = field(
        default_factory=lambda: {"hits": "results", "id": "id", "score": "score", "text": "text"}
    )
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 30.0
    retries: int = 5
    backoff_s: float = 0.1
    max_backoff_s: float = 10.0
    ingest_batch: int = 500
    searchable_timeout_s: float = 60.0
    searchable_poll_s: float = 0.05
    stats: SystemStats = field(default_factory=SystemStats, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        problems = []
        parsed = urllib.parse.urlsplit(self.base_url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            problems.append(f"base_url: expected http(s)://host[:port][/prefix], got {self.base_url!r}")
        problems += adapter_problems(
            "endpoints", self.endpoints, ENDPOINTS, ("path", "{method, path, body}"), self
        )
        if self.retries < 0:
            problems.append(f"retries: must be >= 0, got {self.retries}")
        if problems:
            raise ValueError("; ".join(problems))

    def fingerprint(self) -> str:
        """What the service answers by: endpoints, templates, paths, header names. Not the base URL (a
        cassette recorded against one host replays for another), nor timeouts and retries (transport),
        nor any header value (secrets)."""
        identity = {
            "endpoints": {k: v for k, v in self.endpoints.items() if k != "health"},
            "memory": self.memory,
            "results": self.results,
            "headers": sorted(self.headers),
        }
        text = json.dumps(identity, sort_keys=True, default=str)
        return hashlib.sha256(f"HttpSystem|{text}".encode()).hexdigest()[:16]

    # --- transport --------------------------------------------------------------------------------

    def _connection(self, url: urllib.parse.SplitResult) -> http.client.HTTPConnection:
        """This thread's kept-alive connection to the service (made on first use, or after a failure)."""
        connection = getattr(_CONNECTIONS, "by_adapter", {}).get(id(self))
        if connection is None:
            kind = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
            connection = kind(url.hostname, url.port, timeout=self.timeout_s)
            connection.connect()
            # No Nagle delay: a request is small and its answer is awaited at once.
            connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if not hasattr(_CONNECTIONS, "by_adapter"):
                _CONNECTIONS.by_adapter = {}
            _CONNECTIONS.by_adapter[id(self)] = connection
        return connection

    def _exchange(
        self, url: urllib.parse.SplitResult, method: str, path: str, data: bytes | None, headers: dict
    ) -> tuple[int, bytes, str | None]:
        """One request and its answer: (status, body, Retry-After)."""
        for fresh in (False, True):
            reused = not fresh and id(self) in getattr(_CONNECTIONS, "by_adapter", {})
            connection = self._connection(url)
            try:
                connection.request(method, path, body=data, headers=headers)
                response = connection.getresponse()
                payload = response.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self._drop_connection()
                if reused:  # the service closed the idle kept-alive connection: send again, fresh
                    continue
                raise
            except BaseException:
                self._drop_connection()  # a failed exchange leaves the connection unusable
                raise
            if response.will_close:
                self._drop_connection()
            return response.status, payload, response.getheader("Retry-After")
        raise AssertionError("unreachable")

    def _drop_connection(self) -> None:
        connection = getattr(_CONNECTIONS, "by_adapter", {}).pop(id(self), None)
        if connection is not None:
            connection.close()

    def _headers(self) -> dict[str, str]:
        out = {"Content-Type": "application/json", "Accept": "application/json"}
        for name, template in self.headers.items():

            def secret(match: re.Match, header: str = name) -> str:
                if match[1] not in os.environ:
                    raise SystemError_(f"header {header}: environment variable {match[1]} is not set")
                return os.environ[match[1]]

            out[str(name)] = _ENV.sub(secret, str(template))
        return out

    def _request(self, spec: Mapping[str, Any], values: Mapping[str, Any], what: str) -> Any:
        """Send one operation (with retries) and return its JSON answer (None for an empty body)."""
        url = urllib.parse.urlsplit(self.base_url)
        path = url.path.rstrip("/") + fill(str(spec["path"]), values)
        body = spec.get("body")
        data = None if body is None else json.dumps(fill(body, values), allow_nan=False).encode()
        method = str(spec.get("method", "POST" if data is not None else "GET")).upper()
        headers = self._headers()
        delay = self.backoff_s
        for attempt in range(self.retries + 1):
            self.stats.add("requests")
            wait = None
            try:
                status, payload, retry_after = self._exchange(url, method, path, data, headers)
            except TimeoutError:
                self.stats.add("timeouts")
                problem = f"{what}: no answer within {self.timeout_s:g} s from {self.base_url}{path}"
            except (ConnectionError, OSError, http.client.HTTPException) as err:
                problem = f"{what}: {self.base_url}{path} unreachable ({type(err).__name__}: {err})"
            else:
                if 200 <= status < 300:
                    try:
                        return json.loads(payload) if payload.strip() else None
                    except ValueError:
                        self.stats.add("errors")
                        raise SystemError_(
                            f"{what}: {method} {path} answered {status} with a body that is not JSON"
                        ) from None
                if status == 429:
                    self.stats.add("rate_limited")
                said = payload[:300].decode(errors="replace")
                problem = f"{what}: {method} {path} answered HTTP {status}: {said}"
                if status not in _RETRY_STATUS:
                    self.stats.add("errors")
                    raise SystemError_(problem)
                if retry_after is not None:
                    try:
                        wait = max(0.0, float(retry_after))
                    except ValueError:  # an HTTP date: fall back to the backoff
                        wait = None
            if attempt == self.retries:
                self.stats.add("errors")
                raise SystemError_(f"{problem} (after {self.retries} retries)")
            self.stats.add("retries")
            time.sleep(min(self.max_backoff_s, wait if wait is not None else delay))
            delay = min(self.max_backoff_s, delay * 2)
        raise AssertionError("unreachable")

    # --- the MemorySystem protocol ------------------------------------------------------------------

    def check_available(self) -> None:
        """At start, before any work: the service answers (its health endpoint, else a reset-less probe)."""
        health = self.endpoints.get("health")
        spec = health or {"method": "GET", "path": "/"}
        url = urllib.parse.urlsplit(self.base_url)
        try:
            connection = http.client.HTTPConnection(url.hostname, url.port, timeout=min(self.timeout_s, 5.0))
            try:
                connection.request(str(spec.get("method", "GET")), url.path.rstrip("/") + str(spec["path"]))
                status = connection.getresponse().status
            finally:
                connection.close()
        except (OSError, http.client.HTTPException) as err:
            raise SystemError_(
                f"the memory system at {self.base_url} is not reachable ({type(err).__name__}: {err}); "
                "start it, or set system.base_url (nothing was run)"
            ) from None
        if health is not None and not 200 <= status < 300:
            raise SystemError_(
                f"the memory system at {self.base_url} is unhealthy: {spec['path']} answered {status}"
            )

    def reset(self, scope: Mapping[str, str]) -> None:
        if "reset" in self.endpoints:
            self._request(self.endpoints["reset"], {"scope": dict(scope)}, f"reset of scope {dict(scope)}")

    def ingest(self, scope: Mapping[str, str], memories: Sequence[Memory]) -> None:
        for start in range(0, len(memories), self.ingest_batch):
            batch = memories[start : start + self.ingest_batch]
            records = [fill(self.memory, memory_values(m)) for m in batch]
            self._request(
                self.endpoints["ingest"],
                {"scope": dict(scope), "memories": records},
                f"ingest of scope {dict(scope)} (memories {start + 1}-{start + len(batch)})",
            )

    def count(self, scope: Mapping[str, str]) -> Any:
        """What the `count` endpoint says the scope holds (None without one): the searchable wait polls it,
        and a resumed record run checks with it that the service kept the scope (systems/cassette.py)."""
        count = self.endpoints.get("count")
        if count is None:
            return None
        where = f"count of scope {dict(scope)}"
        answer = self._request(count, {"scope": dict(scope)}, where)
        return read_path(answer, str(count.get("path_in_response", "count")), where)

    def wait_until_searchable(self, scope: Mapping[str, str], memories: Sequence[Memory]) -> float:
        """Poll `count` until it reaches the memories ingested (bounded by searchable_timeout_s)."""
        if self.endpoints.get("count") is None:
            return 0.0
        started = time.perf_counter()
        while True:
            stored = self.count(scope)
            if isinstance(stored, int) and stored >= len(memories):
                return time.perf_counter() - started
            if time.perf_counter() - started > self.searchable_timeout_s:
                raise SystemError_(
                    f"scope {dict(scope)}: {stored} of {len(memories)} memories searchable after "
                    f"{self.searchable_timeout_s:g} s (system.adapter.searchable_timeout_s)"
                )
            time.sleep(self.searchable_poll_s)

    def search(self, request: SearchRequest) -> list[Hit]:  # type: ignore[override]
        where = f"query {request.query_id}"
        answer = self._request(self.endpoints["search"], search_values(request), where)
        return read_hits(answer, self.results, where, self.stats)

    def close(self) -> None:
        """Close this thread's connection (the pool threads' connections close with their threads)."""
        self._drop_connection()


def search_values(request: SearchRequest) -> dict[str, Any]:
    """The placeholders a search template may name ({query_id}, {text}, {scope}, {k}, {as_of},
    {overrides}); an override left None (declared but unset) is not sent."""
    return {
        "query_id": request.query_id,
        "text": request.text,
        "scope": dict(request.scope),
        "k": request.k,
        "as_of": request.as_of,
        "overrides": {k: v for k, v in request.overrides.items() if v is not None},
    }


def read_hits(answer: Any, results: Mapping[str, Any], where: str, stats: SystemStats) -> list[Hit]:
    """The hits of a search answer through the configured JSON paths (`hits`, and per hit `id`, `score`,
    `text`); a path that does not fit the answer is an error naming the query, the result and the path."""
    hits = read_path(answer, str(results["hits"]), where)
    if not isinstance(hits, list):
        stats.add("errors")
        raise SystemError_(f"{where}: JSON path {results['hits']!r} is not a list")
    out = []
    score_path, text_path = results.get("score"), results.get("text")
    for i, item in enumerate(hits):
        here = f"{where}, result {i}"
        try:
            mid = read_path(item, str(results["id"]), here)
            score = read_path(item, str(score_path), here) if score_path else None
            text = read_path(item, str(text_path), here) if text_path else None
        except SystemError_:
            stats.add("errors")
            raise
        if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))):
            stats.add("errors")
            raise SystemError_(f"{here}: JSON path {score_path!r} is not a number: {score!r}")
        score = None if score is None else float(score)
        out.append(Hit(str(mid), score, None if text is None else str(text)))
    return out


def adapter_problems(
    group: str, specs: Mapping[str, Any], operations: Sequence[str], shape: tuple[str, str], adapter: Any
) -> list[str]:
    """What a YAML-configured adapter (HTTP endpoints, MCP tools) must hold: search and ingest among its
    operations (`specs`, each a mapping with the text field `shape[0]`), JSON paths for the hits and their
    ids (`adapter.results`), and positive `timeout_s` and `ingest_batch`."""
    key, expected = shape
    problems = [f"{group}.{name}: required" for name in ("search", "ingest") if name not in specs]
    for name, spec in specs.items():
        if name not in operations:
            problems.append(f"{group}.{name}: not an operation ({', '.join(operations)})")
        elif not isinstance(spec, Mapping) or not isinstance(spec.get(key), str):
            problems.append(f"{group}.{name}: expected {expected}, got {spec!r}")
    for path in ("hits", "id"):
        if not adapter.results.get(path):
            problems.append(f"results.{path}: a JSON path is required")
    for number, name in ((adapter.timeout_s, "timeout_s"), (adapter.ingest_batch, "ingest_batch")):
        if number <= 0:
            problems.append(f"{name}: must be > 0, got {number}")
    return problems
