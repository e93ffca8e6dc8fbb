"""An HTTP memory service as a `MemorySystem`, described in YAML, with no code (conf/system/).

    memeval-run variant=system system=memeval_serve system.base_url=http://127.0.0.1:8000

Each operation (`ingest`, `search`, `reset`, and optionally `count` for the searchable wait, `health` for
the check at start, `after_ingest` once a scope's batches are in, `setup` once per scope) is
`{method, path, body}`. A body is a JSON template: a string that is exactly one placeholder
(`"{overrides}"`) becomes that value as JSON (an object, a list, a number, null); placeholders inside
longer strings are replaced by their text. Placeholders:

    search   {query_id} {text} {scope} {scope.<name>} {scope_key} {k} {as_of} {overrides}
    ingest   {scope} {scope.<name>} {scope_key} {memories}  (the list of `memory` templates, one per
             memory: {id} {text} {created_at} {role} {metadata} {scope} {scope.<name>} {scope_key}
             {record} = the whole suite record); {memories.<field>}: that field of every filled memory,
             as one list (the parallel arrays of APIs such as Chroma's: `ids: "{memories.id}"`)
    reset, count, after_ingest, setup   {scope} {scope.<name>} {scope_key}
    ({scope_key}: memeval's canonical string for the whole scope, for a service that filters by one
    string whatever the suite's scope names are)
    ingest, count, after_ingest, search   {setup.<name>}: what `setup` captured for the scope

In a `path` (and its query string) every placeholder's text is percent-encoded: suite text never adds
a path segment (`../`) or a parameter (`&x=`), and control characters travel as `%0A`.

`setup` ({method, path, body, capture: {name: JSON path}}) runs before a scope's first ingest, count or
search, and again after its reset (a reset may drop what setup made, e.g. a collection; a reset names
the scope, never a setup value); its answer's `capture` paths are `{setup.<name>}` in those calls
(e.g. a server-made collection id in a path).

`results` names JSON paths (dots, `[i]` for list items) into the search response: either `hits` (the
list) and in each hit `id` (a string or an integer), `score` (optional, a number) and `text` (optional,
a string), or parallel arrays `ids`, `scores` (optional) and `texts` (optional), each a path to a list;
`count.path` reads the stored count (a whole number). A path that is missing, or a value of another
kind (`"id": null`, a count that is a string), is an error naming the query id and the path.

Headers may hold secrets as `{env:NAME}`: read from the environment at request time, never part of
the adapter's fingerprint, a log line, an error, the run's config or a cassette (the config holds the
placeholder, not the value). A value with a line break is refused naming the variable; every error and
hit text is redacted of every known secret (retrieval/systems/secrets.py). `base_url` may not hold
`user:password@` (exit 2 at the config check).

Transport: stdlib `http.client`, a kept-alive connection per thread (remade after any failure; a kept
connection the service closed while idle is remade and the request re-sent at once, not counted as a
retry); `https://` with the system's CAs, or `ca_file`'s. Each request is bounded (retrieval/systems/
bounded.py): the whole exchange by `timeout_s`, however slowly the answer drips; its body by
`max_response_bytes` (over it: an error naming the query, not retried); redirects are never followed,
so a request's headers reach only `base_url`. A request is retried (`retries` times, exponential backoff
from `backoff_s`, capped at `max_backoff_s`) on a connection error, a timeout, 429 and 5xx; a
`Retry-After` header (seconds) is honoured. Ingest carries the suite's ids, so a retried ingest never
stores a memory twice (the service refuses ids it holds). Counts go to `stats` (retrieval/systems/stats.py).
"""

from __future__ import annotations

import functools
import hashlib
import http.client
import json
import re
import ssl
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from retrieval.systems import bounded, secrets
from retrieval.systems.protocol import Hit, SearchRequest, SystemError_
from retrieval.systems.secrets import describe, redact
from retrieval.systems.stats import SystemStats
from retrieval.types import Memory, memory_record, scope_key

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_.]*)\}")
_ENV = secrets.ENV_PLACEHOLDER
_RETRY_STATUS = {429, 500, 502, 503, 504}
# Kept-alive connections, one per thread and adapter: the retriever asks from a pool of threads, and an
# http.client connection is not thread-safe. A killed and restarted service costs one failed attempt
# (counted and retried), after which a new connection is made.
_CONNECTIONS = threading.local()
ENDPOINTS = ("search", "ingest", "reset", "count", "health", "after_ingest", "setup")


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


def fill_url_path(template: str, values: Mapping[str, Any]) -> str:
    """A URL path template filled with each placeholder's text percent-encoded (module docstring)."""
    return _PLACEHOLDER.sub(lambda m: urllib.parse.quote(_text(_value(m[1], values)), safe=""), template)


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


def parse_json(payload: bytes | str, where: str) -> Any:
    """An answer's JSON (None when empty). `where` says who answered (`query q7: POST /search answered
    200`); not JSON, or nested deeper than the parser goes -> SystemError_ (never a RecursionError)."""
    try:
        return json.loads(payload) if payload.strip() else None
    except RecursionError:
        raise SystemError_(f"{where} with JSON nested too deep to read") from None
    except ValueError:
        text = payload.decode(errors="replace") if isinstance(payload, bytes) else payload
        raise SystemError_(f"{where} with a body that is not JSON: {secrets.quote(text, 200)!r}") from None


def _value(name: str, values: Mapping[str, Any]) -> Any:
    head, _, rest = name.partition(".")
    if head not in values:
        raise SystemError_(f"body template names {{{name}}}; known here: {', '.join(sorted(values))}")
    value = values[head]
    if rest and isinstance(value, list):  # {memories.<field>}: one field of every item, as a list
        return [read_path(item, rest, f"{{{name}}}, item {i}") for i, item in enumerate(value)]
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


def memory_records(
    template: Mapping[str, Any] | str, scope: Mapping[str, str], memories: Sequence[Memory]
) -> list:
    """The `memory` template filled for each memory; `{scope}` and `{scope.<name>}` are the ingest's scope."""
    return [fill(template, {**memory_values(m), **scope_values(scope)}) for m in memories]


def scope_values(scope: Mapping[str, str]) -> dict[str, Any]:
    """`{scope}` (the mapping) and `{scope_key}` (memeval's canonical, injective string for it: one value
    for a service that namespaces by a single string, whatever the suite's scope names)."""
    return {"scope": dict(scope), "scope_key": scope_key(scope)}


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
    timeout_s: float = 30.0  # one request, whole (connect, send, the answer to its last byte)
    max_response_bytes: int = 8 * 2**20  # one answer's body; larger is an error naming the query
    ca_file: str | None = None  # https: a PEM file of the CAs to trust instead of the system's
    retries: int = 5
    backoff_s: float = 0.1
    max_backoff_s: float = 10.0
    ingest_batch: int = 500
    searchable_timeout_s: float = 60.0
    searchable_poll_s: float = 0.05
    stats: SystemStats = field(default_factory=SystemStats, init=False, compare=False, repr=False)
    # What `setup` captured, per scope key (per process, not config), and the lock that runs it once a
    # scope although searches come from many threads.
    _setup: dict[str, dict[str, Any]] = field(default_factory=dict, init=False, compare=False, repr=False)
    _setup_lock: threading.Lock = field(default_factory=threading.Lock, init=False, compare=False, repr=False)
    _identity: dict[str, str] = field(default_factory=dict, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        problems = bounded.url_problems("base_url", self.base_url)
        for name, template in self.headers.items():
            if secrets.LINE_BREAKS.search(f"{name}{template}"):
                problems.append(f"headers.{name}: a header name or value cannot hold a line break or NUL")
        secrets.register_placeholders(*self.headers.values())
        if self.max_response_bytes <= 0:
            problems.append(f"max_response_bytes: must be > 0, got {self.max_response_bytes}")
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
            connection = bounded.connect(url, self.timeout_s, self.ca_file)
            if not hasattr(_CONNECTIONS, "by_adapter"):
                _CONNECTIONS.by_adapter = {}
            _CONNECTIONS.by_adapter[id(self)] = connection
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
            reused = not fresh and id(self) in getattr(_CONNECTIONS, "by_adapter", {})
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
        connection = getattr(_CONNECTIONS, "by_adapter", {}).pop(id(self), None)
        if connection is not None:
            connection.close()

    def _headers(self) -> dict[str, str]:
        out = {"Content-Type": "application/json", "Accept": "application/json"}
        for name, template in self.headers.items():

            def secret(match: re.Match, header: str = name) -> str:
                try:
                    return secrets.env_value(match[1], f"header {header}")
                except secrets.SecretError as err:
                    raise SystemError_(str(err)) from None

            out[str(name)] = _ENV.sub(secret, str(template))
        return out

    def _request(self, spec: Mapping[str, Any], values: Mapping[str, Any], what: str) -> Any:
        """Send one operation (with retries) and return its JSON answer (None for an empty body)."""
        url = urllib.parse.urlsplit(self.base_url)
        path = url.path.rstrip("/") + fill_url_path(str(spec["path"]), values)
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
                raise SystemError_(
                    f"{what}: {method} {path} sent {err}, over system.adapter.max_response_bytes "
                    f"({self.max_response_bytes:,})"
                ) from None
            except TimeoutError:
                self.stats.add("timeouts")
                problem = f"{what}: no answer within {self.timeout_s:g} s from {self.base_url}{path}"
            except (http.client.InvalidURL, ValueError) as err:  # a request that can never be sent
                self.stats.add("errors")  # (or a certificate that is not trusted): not retried
                raise SystemError_(
                    f"{what}: {method} {path} cannot be sent: {type(err).__name__}: {err}"
                ) from None
            except (ConnectionError, OSError, http.client.HTTPException) as err:
                problem = f"{what}: {self.base_url}{path} unreachable ({type(err).__name__}: {err})"
            else:
                status = answer.status
                if 200 <= status < 300:
                    try:
                        return parse_json(answer.body, f"{what}: {method} {path} answered {status}")
                    except SystemError_:
                        self.stats.add("errors")
                        raise
                if status == 429:
                    self.stats.add("rate_limited")
                said = secrets.quote(answer.body.decode(errors="replace"), 300)
                problem = f"{what}: {method} {path} answered HTTP {status}: {said}"
                if 300 <= status < 400:
                    problem = (
                        f"{what}: {method} {path} answered HTTP {status}, a redirect to "
                        f"{secrets.quote(answer.location or '?', 200)}: memeval follows no redirect (the "
                        "request's headers reach only system.base_url); set base_url to where it answers"
                    )
                if status not in _RETRY_STATUS:
                    self.stats.add("errors")
                    raise SystemError_(problem)
                if answer.retry_after is not None:
                    try:
                        wait = max(0.0, float(answer.retry_after))
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
            raise SystemError_(
                f"the memory system at {self.base_url} is not reachable "
                f"({type(err).__name__}: {err}{trust}); start it, or set system.base_url (nothing was run)"
            ) from None
        finally:
            self._drop_connection()  # this thread's connection: the searches' threads make their own
        if health is not None and not 200 <= status < 300:
            raise SystemError_(
                f"the memory system at {self.base_url} is unhealthy: {spec['path']} answered {status}"
            )
        if health is not None:
            self._identity.update(_service_identity(answer.body))

    def service_identity(self) -> dict[str, str]:
        """What the service said it is at the start-up check (its health answer's `variant`, `version`...):
        recorded with the run, so a result names the service that answered it."""
        return dict(self._identity)

    def _scoped(self, scope: Mapping[str, str]) -> dict[str, Any]:
        """The values an ingest, count or search of a scope may name: `{scope}`, and `{setup.<name>}` when
        there is a `setup` call (run here on the scope's first such call, and again after its reset)."""
        values = scope_values(scope)
        spec = self.endpoints.get("setup")
        if spec is None:
            return values
        with self._setup_lock:
            key = scope_key(scope)
            if key not in self._setup:
                where = f"setup of scope {dict(scope)}"
                answer = self._request(spec, values, where)
                captured = (spec.get("capture") or {}).items()
                self._setup[key] = {name: read_path(answer, str(path), where) for name, path in captured}
            return {**values, "setup": self._setup[key]}

    def reset(self, scope: Mapping[str, str]) -> None:
        if "reset" in self.endpoints:
            self._request(self.endpoints["reset"], scope_values(scope), f"reset of scope {dict(scope)}")
            with self._setup_lock:  # what setup made may be gone: the scope's next call sets up again
                self._setup.pop(scope_key(scope), None)

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
        started = time.perf_counter()
        while True:
            stored = self.count(scope)
            if stored >= len(memories):
                return time.perf_counter() - started
            if time.perf_counter() - started > self.searchable_timeout_s:
                raise SystemError_(
                    f"scope {dict(scope)}: {stored} of {len(memories)} memories searchable after "
                    f"{self.searchable_timeout_s:g} s (system.adapter.searchable_timeout_s)"
                )
            time.sleep(self.searchable_poll_s)

    def search(self, request: SearchRequest) -> list[Hit]:  # type: ignore[override]
        where = f"query {request.query_id}"
        values = {**search_values(request), **self._scoped(request.scope)}
        answer = self._request(self.endpoints["search"], values, where)
        return read_hits(answer, self.results, where, self.stats)

    def close(self) -> None:
        """Close this thread's connection (the pool threads' connections close with their threads)."""
        self._drop_connection()


def search_values(request: SearchRequest) -> dict[str, Any]:
    """The placeholders a search template may name ({query_id}, {text}, {scope}, {scope_key}, {k}, {as_of},
    {overrides}); an override left None (declared but unset) is not sent."""
    return {
        "query_id": request.query_id,
        "text": request.text,
        **scope_values(request.scope),
        "k": request.k,
        "as_of": request.as_of,
        "overrides": {k: v for k, v in request.overrides.items() if v is not None},
    }


def read_count(answer: Any, path: str, where: str, stats: SystemStats) -> int:
    """The stored count at `path` of a count answer: a whole number >= 0, else an error naming the path (a
    count that is a string or null will never reach the number ingested: no waiting for it)."""
    try:
        stored = read_path(answer, path, where)
    except SystemError_:
        stats.add("errors")
        raise
    if isinstance(stored, bool) or not isinstance(stored, int) or stored < 0:
        stats.add("errors")
        raise SystemError_(
            f"{where}: JSON path {path!r} is not a count (a whole number >= 0): {describe(stored)}"
        )
    return stored


def read_hits(answer: Any, results: Mapping[str, Any], where: str, stats: SystemStats) -> list[Hit]:
    """The hits of a search answer through the configured JSON paths (`hits`, and per hit `id`, `score`,
    `text`; or the parallel arrays `ids`, `scores`, `texts`); a path that does not fit the answer, or a
    value of the wrong kind (an id that is null or an object, a score that is not a number, a text that
    is not a string), is an error naming the query, the result and the path. Ids and texts are redacted
    of known secrets (a service may echo one)."""
    if results.get("ids"):  # parallel arrays: read as rows, then as any list of hits
        return read_hits({"rows": parallel_rows(answer, results, where, stats)}, _ROWS, where, stats)
    hits = read_path(answer, str(results["hits"]), where)
    if not isinstance(hits, list):
        stats.add("errors")
        raise SystemError_(f"{where}: JSON path {results['hits']!r} is not a list: {describe(hits)}")
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
        problem = None
        if isinstance(mid, bool) or not isinstance(mid, (str, int)) or mid == "":
            problem = f"JSON path {results['id']!r} is not an id (a string or an integer): {describe(mid)}"
        elif score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))):
            problem = f"JSON path {score_path!r} is not a number: {describe(score)}"
        elif text is not None and (isinstance(text, bool) or not isinstance(text, (str, int, float))):
            problem = f"JSON path {text_path!r} is not a text: {describe(text)}"
        if problem:
            stats.add("errors")
            raise SystemError_(f"{here}: {problem}")
        score = None if score is None else float(score)
        out.append(Hit(redact(str(mid)), score, None if text is None else redact(str(text))))
    return out


# Parallel arrays (`results: {ids, scores, texts}`) are read into rows with these keys.
_COLUMNS = {"ids": "id", "scores": "score", "texts": "text"}
_ROWS = {"hits": "rows", "id": "id", "score": "score", "text": "text"}


def parallel_rows(answer: Any, results: Mapping[str, Any], where: str, stats: SystemStats) -> list[dict]:
    """Parallel arrays, each a JSON path to a list, as one `{id, score, text}` row per hit (None where a
    column is not configured); a path that is not a list, or lists of different lengths, is an error."""
    columns = {}
    for key, row_key in _COLUMNS.items():
        column = read_path(answer, str(results[key]), where) if results.get(key) else None
        if results.get(key) and not isinstance(column, list):
            stats.add("errors")
            raise SystemError_(f"{where}: JSON path {results[key]!r} is not a list")
        columns[row_key] = column
    sizes = {str(results[k]): len(columns[r]) for k, r in _COLUMNS.items() if columns[r] is not None}
    if len(set(sizes.values())) > 1:
        stats.add("errors")
        raise SystemError_(f"{where}: parallel arrays of different lengths: {sizes}")
    n = sizes[str(results["ids"])]
    return [{r: None if c is None else c[i] for r, c in columns.items()} for i in range(n)]


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
    if adapter.results.get("hits") and adapter.results.get("ids"):
        problems.append("results: either hits (a list of objects) or ids (parallel arrays), not both")
    elif not adapter.results.get("ids"):  # else parallel arrays: ids (+ optional scores, texts)
        problems += [
            f"results.{p}: a JSON path is required" for p in ("hits", "id") if not adapter.results.get(p)
        ]
    problems += setup_problems(group, specs)
    for number, name in ((adapter.timeout_s, "timeout_s"), (adapter.ingest_batch, "ingest_batch")):
        if number <= 0:
            problems.append(f"{name}: must be > 0, got {number}")
    return problems


def setup_problems(group: str, specs: Mapping[str, Any]) -> list[str]:
    """`{setup.<name>}` in any operation names a `capture` of the `setup` operation (a typo would otherwise
    send an empty string in a path)."""
    setup = specs.get("setup")
    captured = set(setup.get("capture") or {}) if isinstance(setup, Mapping) else set()
    problems = []
    for name, spec in specs.items():
        for used in sorted(set(re.findall(r"\{setup\.([A-Za-z0-9_]+)", json.dumps(spec, default=str)))):
            if name in ("setup", "reset", "health"):
                problems.append(f"{group}.{name}: names {{setup.{used}}}, but runs before setup")
            elif used not in captured:
                problems.append(
                    f"{group}.{name}: names {{setup.{used}}}, but {group}.setup captures "
                    f"{sorted(captured) or 'nothing'}"
                )
    return problems
