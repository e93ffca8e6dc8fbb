"""An HTTP memory service as a `MemorySystem`, described in YAML, with no code (conf/system/).

    memeval-run variant=system system=memeval_serve system.base_url=http://127.0.0.1:8000

Each operation (`ingest`, `search`, `reset`, and optionally `count` for the searchable wait, `health` for
the check at start, `after_ingest` once a scope's batches are in, `setup` once per scope) is
`{method, path, body}`; a body and a path are templates (experiments/systems/templates.py: the
placeholders each operation may name, `{env:NAME}`, and the JSON paths of `results`).

In a `path` (and its query string) every placeholder's text is percent-encoded: suite text never adds
a path segment (`../`) or a parameter (`&x=`), and control characters travel as `%0A`.

`setup` ({method, path, body, capture: {name: JSON path}}) runs before a scope's first ingest, count or
search, and again after its reset (a reset may drop what setup made, e.g. a collection; a reset names
the scope, never a setup value); its answer's `capture` paths are `{setup.<name>}` in those calls
(e.g. a server-made collection id in a path).

`results` names JSON paths into the search response, `count.path_in_response` the stored count
(templates.py); a path that does not fit the answer is an error naming the query id and the path.

Headers may hold secrets as `{env:NAME}`: read from the environment at request time, never part of
the adapter's fingerprint, a log line, an error, the run's config or a cassette (the config holds the
placeholder, not the value). A value with a line break is refused naming the variable; every error and
hit text is redacted of every known secret (experiments/systems/secrets.py). `base_url` may not hold
`user:password@` (exit 2 at the config check).

Transport: stdlib `http.client`, a kept-alive connection per thread (remade after any failure; a kept
connection the service closed while idle is remade and the request re-sent at once, not counted as a
retry); `https://` with the system's CAs, or `ca_file`'s. Each request is bounded (experiments/systems/
bounded.py): the whole exchange by `timeout_s`, however slowly the answer drips; its body by
`max_response_bytes` (over it: an error naming the query, not retried); redirects are never followed,
so a request's headers reach only `base_url`. A request is retried (`retries` times, exponential backoff
from `backoff_s`, capped at `max_backoff_s`) on a connection error, a timeout, 429 and 5xx; a
`Retry-After` header (seconds) is honoured. Ingest carries the suite's ids, so a retried ingest never
stores a memory twice (the service refuses ids it holds). Counts go to `stats` (experiments/systems/stats.py).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import ssl
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from experiments.systems import bounded, secrets
from experiments.systems.protocol import Hit, LiveSystemError, SearchRequest, poll_until_searchable
from experiments.systems.secrets import describe, redact
from experiments.systems.stats import SystemStats
from experiments.systems.templates import (
    adapter_problems,
    check_scope_fields,
    fill,
    fill_env,
    fill_url_path,
    memory_records,
    parse_json,
    read_count,
    read_hits,
    read_path,
    scope_values,
    search_values,
)
from retrieval.stage import FieldError, Range, own_range_problems
from retrieval.types import Memory, scope_key

_RETRY_STATUS = {429, 500, 502, 503, 504}
ENDPOINTS = ("search", "ingest", "reset", "count", "health", "after_ingest", "setup")


IDENTITY_KEYS = ("name", "service", "version", "variant", "stage_config_sha256")  # read from /health


def _service_identity(body: bytes) -> dict[str, str]:
    """The identity fields of a health answer that is a JSON object (short scalars only; anything else,
    or no JSON, is no identity: a health check needs only its status)."""
    try:
        answer = json.loads(body[:65536]) if body.strip() else None
    except (ValueError, RecursionError):
        return {}
    if not isinstance(answer, dict):
        return {}
    return {
        k: redact(str(answer[k]))[:200] for k in IDENTITY_KEYS if isinstance(answer.get(k), str | int | float)
    }


class HttpState:
    """What an HttpSystem holds while it runs (never config: not compared, not fingerprinted).

    `connections`: the kept-alive connections, one per thread (the retriever asks from a pool of threads,
    and an http.client connection is not thread-safe); a killed and restarted service costs one failed
    attempt (counted and retried), after which a new connection is made. `setup`: what `setup` captured,
    per scope key, run once a scope under `setup_lock`. `identity`: what the health check said."""

    def __init__(self) -> None:
        self.stats = SystemStats()
        self.connections = threading.local()
        self.setup: dict[str, dict[str, Any]] = {}
        self.setup_lock = threading.Lock()
        self.identity: dict[str, str] = {}

    def connection(self) -> http.client.HTTPConnection | None:
        return getattr(self.connections, "kept", None)

    def keep(self, connection: http.client.HTTPConnection | None) -> None:
        self.connections.kept = connection


@dataclass(frozen=True, kw_only=True)
class HttpSystem:
    """A memory service over HTTP+JSON, configured by endpoints, body templates and JSON paths; its
    run-time state (connections, setup captures, counts) is `state`, an `HttpState` made with it."""

    name: ClassVar[str] = "http"  # system=...: its base is system/dataclass/http (configure/nodes.py)
    ranges: ClassVar[Mapping[str, Range]] = {
        "timeout_s": Range(gt=0),
        "max_response_bytes": Range(gt=0),
        "retries": Range(ge=0),
        "backoff_s": Range(ge=0),
        "max_backoff_s": Range(ge=0),
        "ingest_batch": Range(ge=1),
        "searchable_timeout_s": Range(ge=0),
        "searchable_poll_s": Range(gt=0),
    }

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
    timeout_s: float = 30.0  # one request, whole (connect, send, the answer to its last byte)
    max_response_bytes: int = 8 * 2**20  # one answer's body; larger is an error naming the query
    ca_file: str | None = None  # https: a PEM file of the CAs to trust instead of the system's
    retries: int = 5
    backoff_s: float = 0.1
    max_backoff_s: float = 10.0
    ingest_batch: int = 500
    searchable_timeout_s: float = 60.0
    searchable_poll_s: float = 0.05
    state: HttpState = field(default_factory=HttpState, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        problems = bounded.url_problems("base_url", self.base_url)
        for name, template in self.headers.items():
            if secrets.LINE_BREAKS.search(f"{name}{template}"):
                problems.append((f"headers.{name}", "a header name or value cannot hold a line break or NUL"))
        secrets.register_placeholders(*self.headers.values())
        problems += own_range_problems(self) + self._ca_file_problems()
        problems += adapter_problems(
            "endpoints", self.endpoints, ENDPOINTS, ("path", "{method, path, body}"), self
        )
        if problems:
            raise FieldError(problems)

    def _ca_file_problems(self) -> list[tuple[str, str]]:
        """`ca_file` is a readable file, checked with the config: at the first request a missing one would
        read as "the service is not reachable"."""
        if self.ca_file is None:
            return []
        if not os.path.isfile(self.ca_file):
            kind = "a directory" if os.path.isdir(self.ca_file) else "missing"
            return [("ca_file", f"{self.ca_file} is {kind}: give a PEM file of the CAs to trust (or null)")]
        if not os.access(self.ca_file, os.R_OK):
            return [("ca_file", f"{self.ca_file} is not readable: give a PEM file of the CAs to trust")]
        return []

    @property
    def stats(self) -> SystemStats:
        """What talking to the service cost so far (read into the run's `system` section)."""
        return self.state.stats

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
        connection = self.state.connection()
        if connection is None:
            connection = bounded.connect(url, self.timeout_s, self.ca_file)
            self.state.keep(connection)
        return connection

    def _exchange(
        self,
        url: urllib.parse.SplitResult,
        method: str,
        path: str,
        data: bytes | None,
        headers: dict,
        timeout_s: float | None = None,
    ) -> bounded.Answer:
        """One request and its answer, the whole of it within `timeout_s` (default the adapter's)."""
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        for fresh in (False, True):
            reused = not fresh and self.state.connection() is not None
            try:
                connection = self._connection(url)
                answer = bounded.exchange(
                    connection, method, path, data, headers, deadline, self.max_response_bytes
                )
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self._drop_connection()
                if reused:  # the service closed the idle kept-alive connection: send again, fresh
                    continue
                raise
            except BaseException:
                self._drop_connection()  # a failed exchange leaves the connection unusable
                raise
            if answer.will_close:
                self._drop_connection()
            return answer
        raise AssertionError("unreachable")

    def _drop_connection(self) -> None:
        connection = self.state.connection()
        self.state.keep(None)
        if connection is not None:
            connection.close()

    def _headers(self) -> dict[str, str]:
        out = {"Content-Type": "application/json", "Accept": "application/json"}
        for name, template in self.headers.items():
            out[str(name)] = fill_env(template, f"header {name}")
        return out

    def _request(self, spec: Mapping[str, Any], values: Mapping[str, Any], what: str) -> Any:
        """Send one operation (with retries) and return its JSON answer (None for an empty body)."""
        url = urllib.parse.urlsplit(self.base_url)
        path = url.path.rstrip("/") + fill_url_path(str(spec["path"]), values)
        shown = secrets.quote(path, 200)  # errors quote the path as they quote bodies: shortened
        body = spec.get("body")
        data = None if body is None else json.dumps(fill(body, values), allow_nan=False).encode()
        method = str(spec.get("method", "POST" if data is not None else "GET")).upper()
        headers = self._headers()
        delay = self.backoff_s
        for attempt in range(self.retries + 1):
            self.stats.add("requests")
            wait = None
            try:
                answer = self._exchange(url, method, path, data, headers)
            except bounded.TooLarge as err:  # it will not shrink: not retried
                self.stats.add("errors")
                raise LiveSystemError(
                    f"{what}: {method} {shown} sent {err}, over system.adapter.max_response_bytes "
                    f"({self.max_response_bytes:,})"
                ) from None
            except TimeoutError:
                self.stats.add("timeouts")
                problem = f"{what}: no answer within {self.timeout_s:g} s from {self.base_url}{shown}"
            except (http.client.InvalidURL, ValueError) as err:  # a request that can never be sent
                self.stats.add("errors")  # (or a certificate that is not trusted): not retried
                raise LiveSystemError(
                    f"{what}: {method} {shown} cannot be sent: {type(err).__name__}: {err}"
                ) from None
            except (ConnectionError, OSError, http.client.HTTPException) as err:
                problem = f"{what}: {self.base_url}{shown} unreachable ({type(err).__name__}: {err})"
            else:
                status = answer.status
                if 200 <= status < 300:
                    try:
                        return parse_json(answer.body, f"{what}: {method} {shown} answered {status}")
                    except LiveSystemError:
                        self.stats.add("errors")
                        raise
                if status == 429:
                    self.stats.add("rate_limited")
                said = secrets.quote(answer.body.decode(errors="replace"), 300)
                problem = f"{what}: {method} {shown} answered HTTP {status}: {said}"
                if 300 <= status < 400:
                    problem = (
                        f"{what}: {method} {shown} answered HTTP {status}, a redirect to "
                        f"{secrets.quote(answer.location or '?', 200)}: memeval follows no redirect (the "
                        "request's headers reach only system.base_url); set base_url to where it answers"
                    )
                if status not in _RETRY_STATUS:
                    self.stats.add("errors")
                    raise LiveSystemError(problem)
                if answer.retry_after is not None:
                    try:
                        wait = max(0.0, float(answer.retry_after))
                    except ValueError:  # an HTTP date: fall back to the backoff
                        wait = None
            if attempt == self.retries:
                self.stats.add("errors")
                raise LiveSystemError(f"{problem} (after {self.retries} retries)")
            self.stats.add("retries")
            time.sleep(min(self.max_backoff_s, wait if wait is not None else delay))
            delay = min(self.max_backoff_s, delay * 2)
        raise AssertionError("unreachable")

    # --- the MemorySystem protocol ------------------------------------------------------------------

    def check_available(self) -> None:
        """At start, before any work: the service answers (its health endpoint, else a reset-less probe),
        over the transport the searches use (https, `ca_file`, the configured headers, the bounds)."""
        health = self.endpoints.get("health")
        spec = health or {"method": "GET", "path": "/"}
        url = urllib.parse.urlsplit(self.base_url)
        headers = self._headers()  # a missing or unusable secret is named now, before any work
        path = url.path.rstrip("/") + str(spec["path"])
        try:
            method = str(spec.get("method", "GET"))
            answer = self._exchange(url, method, path, None, headers, min(self.timeout_s, 5.0))
            status = answer.status
        except (OSError, http.client.HTTPException, ValueError) as err:  # refused, timed out, TLS refused
            trust = "; for a private CA, set system.adapter.ca_file" if isinstance(err, ssl.SSLError) else ""
            raise LiveSystemError(
                f"the memory system at {self.base_url} is not reachable "
                f"({type(err).__name__}: {err}{trust}); start it, or set system.base_url (nothing was run)"
            ) from None
        finally:
            self._drop_connection()  # this thread's connection: the searches' threads make their own
        if health is not None and not 200 <= status < 300:
            raise LiveSystemError(
                f"the memory system at {self.base_url} is unhealthy: {spec['path']} answered {status}"
            )
        if health is not None:
            self.state.identity.update(_service_identity(answer.body))

    def check_scopes(self, scopes: Sequence[Mapping[str, str]]) -> None:
        """Before any call: every `{scope.<name>}` of the endpoints and the memory template is a key of every
        scope (templates.check_scope_fields)."""
        templates = {f"system.adapter.endpoints.{k}": v for k, v in self.endpoints.items()}
        check_scope_fields({**templates, "system.adapter.memory": self.memory}, scopes)

    def service_identity(self) -> dict[str, str]:
        """What the service said it is at the start-up check (its health answer's `variant`, `version`...):
        recorded with the run, so a result names the service that answered it."""
        return dict(self.state.identity)

    def _scoped(self, scope: Mapping[str, str]) -> dict[str, Any]:
        """The values an ingest, count or search of a scope may name: `{scope}`, and `{setup.<name>}` when
        there is a `setup` call (run here on the scope's first such call, and again after its reset)."""
        values = scope_values(scope)
        spec = self.endpoints.get("setup")
        if spec is None:
            return values
        with self.state.setup_lock:
            key = scope_key(scope)
            if key not in self.state.setup:
                where = f"setup of scope {dict(scope)}"
                answer = self._request(spec, values, where)
                captured = {}
                for name, path in (spec.get("capture") or {}).items():
                    captured[name] = read_path(answer, str(path), where)
                    if captured[name] is None or captured[name] == "":  # `/collections//add` for every scope
                        self.stats.add("errors")
                        raise LiveSystemError(
                            f"{where}: capture {name!r} read JSON path {path!r} as "
                            f"{describe(captured[name])}; every scope would share that value (pooled into "
                            "one): nothing further was sent"
                        )
                self.state.setup[key] = captured
            return {**values, "setup": self.state.setup[key]}

    def reset(self, scope: Mapping[str, str]) -> None:
        if "reset" in self.endpoints:
            self._request(self.endpoints["reset"], scope_values(scope), f"reset of scope {dict(scope)}")
            with self.state.setup_lock:  # what setup made may be gone: the scope's next call sets up again
                self.state.setup.pop(scope_key(scope), None)

    def ingest(self, scope: Mapping[str, str], memories: Sequence[Memory]) -> None:
        values = self._scoped(scope)
        for start in range(0, len(memories), self.ingest_batch):
            batch = memories[start : start + self.ingest_batch]
            self._request(
                self.endpoints["ingest"],
                {**values, "memories": memory_records(self.memory, scope, batch)},
                f"ingest of scope {dict(scope)} (memories {start + 1}-{start + len(batch)})",
            )
        if "after_ingest" in self.endpoints:  # e.g. an index build that makes the batches searchable
            self._request(self.endpoints["after_ingest"], values, f"after_ingest of scope {dict(scope)}")

    def count(self, scope: Mapping[str, str]) -> Any:
        """What the `count` endpoint says the scope holds (None without one): the searchable wait polls it,
        and a resumed record run checks with it that the service kept the scope (systems/cassette.py)."""
        count = self.endpoints.get("count")
        if count is None:
            return None
        where = f"count of scope {dict(scope)}"
        answer = self._request(count, self._scoped(scope), where)
        return read_count(answer, str(count.get("path_in_response", "count")), where, self.stats)

    def wait_until_searchable(self, scope: Mapping[str, str], memories: Sequence[Memory]) -> float:
        """Poll `count` until it reaches the memories ingested (bounded by searchable_timeout_s)."""
        if self.endpoints.get("count") is None:
            return 0.0
        return poll_until_searchable(
            lambda: self.count(scope), len(memories), self.searchable_timeout_s, self.searchable_poll_s,
            f"scope {dict(scope)}", "system.adapter.searchable_timeout_s",
        )  # fmt: skip

    def search(self, request: SearchRequest) -> list[Hit]:  # type: ignore[override]
        where = f"query {request.query_id}"
        values = {**search_values(request), **self._scoped(request.scope)}
        answer = self._request(self.endpoints["search"], values, where)
        return read_hits(answer, self.results, where, self.stats)

    def close(self) -> None:
        """Close this thread's connection (the pool threads' connections close with their threads)."""
        self._drop_connection()
