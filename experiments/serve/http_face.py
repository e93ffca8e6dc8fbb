"""memeval-serve's HTTP face: a `MemoryService` (experiments/serve/service.py) over HTTP, in two wire shapes.

    POST /v1/memories/ingest  {"scope": {...}, "memories": [{"id", "text", "created_at"?, ...}]}
                              -> {"stored": n, "duplicates_refused": n}
    POST /v1/memories/search  {"query": str, "scope": {...}, "k": int, "as_of"?: str,
                               "config_override"?: {...}, "query_id"?: str}
                              -> {"results": [{"id", "score", "text"}]}
    POST /v1/memories/reset   {"scope": {...}} -> {"removed": n}
    POST /v1/memories/count   {"scope": {...}} -> {"count": n}     (what the searchable wait polls)
    GET  /health              -> {"status": "ok", "variant", "stages", "counts", "warnings"}
                                 (without a token the server asks for: {"status": "ok"} only)

The AtomicMemory shape (conf/system/atomicmemory.yaml) is served on the same routes: a body with `user_id`
instead of `scope` is that shape (scope {"user_id": ...}, memories `{id, content, created_at?,
metadata?}`, search `limit` for k) and is answered in it (`{"memories": [{"id", "score", "content"}]}`),
so `system=atomicmemory` and `system=memeval_serve` both talk to memeval-serve.

Bodies are read and written with the stdlib json module (no model coercion), so a score crosses the
wire as its shortest repr and reads back as the same float. Requests are answered one at a time on
the event loop (a search is short CPU work; a scope's index is built in the background after ingest);
the test fault delay is an asynchronous wait, so delayed searches overlap as a slow service's would.
A refused request answers 4xx with the reason (never a 500: malformed JSON, a body nested past the
parser, a bad record, k or scope are all 400).

Who may ask (`Guard`, applied to this face and to the MCP face's streamable HTTP): each of Host,
Content-Type, Origin and Authorization at most once (400 otherwise), a `Host` header that
is the bound address (DNS rebinding), no browser `Origin` unless allowed, `Content-Type:
application/json` on every POST (a web page's form or `text/plain` POST is refused), and, when a token
is set, `Authorization: Bearer <token>` compared in constant time. Refusals are answered before the
body is read or the service touched.

Fault injection, for tests and benchmarks only (`Faults`): reject a fraction of requests with 429 and a
`Retry-After`, and delay every search, as a rate-limited or slow production service would.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import json
import random
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request  # at module level: FastAPI resolves the handlers' annotations here
from fastapi.responses import Response

from experiments.serve.service import MemoryService, ServiceError
from experiments.suites.fields import scope_problem

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
# Headers the guard decides by: sent twice, a server reading the last would let `Host: evil` through
# (RFC 9112 section 3.2: 400 for more than one Host), so more than one of any of them is refused.
SINGLE_HEADERS = (b"host", b"content-type", b"origin", b"authorization")
# What an allowed browser origin may send (the MCP face's streamable HTTP headers included).
CORS_PREFLIGHT = [
    (b"access-control-allow-methods", b"GET, POST, DELETE"),
    (b"access-control-allow-headers", b"authorization, content-type, mcp-session-id, mcp-protocol-version"),
    (b"access-control-max-age", b"600"),
]


@dataclass(frozen=True)
class Guard:
    """Which requests reach the service: `hosts` the Host header may name (each with the bound port),
    browser `origins` allowed (none by default), and the bearer `token` (None: no token asked)."""

    hosts: frozenset[str] = frozenset(LOOPBACK_NAMES)
    origins: frozenset[str] = frozenset()
    token: str | None = field(default=None, repr=False)
    # A GET here without the token answers only {"status": "ok"} (a liveness probe; the details need it).
    liveness: str | None = None

    @classmethod
    def serving(
        cls, host: str, origins: Iterable[str] = (), extra_hosts: Iterable[str] = (), token: str | None = None
    ) -> Guard:
        """The guard of a server bound to `host`: loopback names and that host are allowed Host names."""
        bound = f"[{host}]" if ":" in host and not host.startswith("[") else host
        names = {*LOOPBACK_NAMES, bound, *extra_hosts}
        return cls(frozenset(n.lower() for n in names), frozenset(origins), token)

    def refusal(self, scope: dict, preflight: bool = False) -> tuple[int, str] | None:
        """(status, message) for a request this guard refuses, else None (a few header lookups). A CORS
        preflight (`preflight`) is checked for its Host and Origin only: a browser sends no token with it."""
        names = [name.lower() for name, _ in scope["headers"]]
        repeated = [n.decode("latin-1") for n in SINGLE_HEADERS if names.count(n) > 1]
        if repeated:
            return 400, f"more than one {', '.join(repeated)} header: send each once"
        headers = dict(scope["headers"])
        port = (scope.get("server") or (None, None))[1]
        host = headers.get(b"host", b"").decode("latin-1").lower()
        if host not in {f"{name}:{port}" for name in self.hosts} and not (port == 80 and host in self.hosts):
            return 421, "the Host header is not this server's address (memeval-serve --allow-host adds one)"
        origin = headers.get(b"origin")
        if origin is not None and origin.decode("latin-1") not in self.origins:
            return 403, "a browser Origin that is not allowed (memeval-serve --allow-origin adds one)"
        if preflight:
            return None
        if self.token is not None:
            given = headers.get(b"authorization", b"")
            if not hmac.compare_digest(given, b"Bearer " + self.token.encode()):
                return 401, "a bearer token is required (Authorization: Bearer <token>)"
        if scope["method"] == "POST":
            media = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
            if media != b"application/json":
                return 415, "a POST must be Content-Type: application/json"
        return None

    def wrap(self, app: Any) -> Any:
        """`app` (ASGI) behind this guard: a refused request is answered here with a JSON error; an
        allowed browser origin gets its CORS preflight answered and its origin echoed on responses."""

        async def guarded(scope: dict, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                return await app(scope, receive, send)
            origin = dict(scope["headers"]).get(b"origin")
            preflight = scope["method"] == "OPTIONS" and origin is not None
            refused = self.refusal(scope, preflight)
            if (
                refused is not None
                and refused[0] == 401
                and scope["method"] == "GET"
                and scope["path"] == self.liveness
            ):
                return await _send_json(send, 200, {"status": "ok"})
            if refused is not None:
                status, message = refused
                challenge = [(b"www-authenticate", b"Bearer")] if status == 401 else []
                return await _send_json(send, status, {"error": message}, challenge)
            if origin is None:
                return await app(scope, receive, send)
            cors = [(b"access-control-allow-origin", origin), (b"vary", b"Origin")]
            if preflight:
                return await _send_json(send, 204, None, [*cors, *CORS_PREFLIGHT])

            async def send_with_cors(message: dict) -> None:
                if message["type"] == "http.response.start":
                    message = {**message, "headers": [*message.get("headers", []), *cors]}
                await send(message)

            return await app(scope, receive, send_with_cors)

        return guarded


async def _send_json(send: Any, status: int, content: Any, headers: list | None = None) -> None:
    """An ASGI response with `content` as JSON (no body when None)."""
    body = b"" if content is None else json.dumps(content).encode()
    length = [(b"content-length", str(len(body)).encode())]
    kind = [] if content is None else [(b"content-type", b"application/json")]
    start = {"type": "http.response.start", "status": status, "headers": [*kind, *length, *(headers or [])]}
    await send(start)
    await send({"type": "http.response.body", "body": body})


@dataclass(frozen=True)
class Faults:
    """Test-only misbehaviour: `reject_fraction` of requests (any route but /health) answer 429 with
    `Retry-After: retry_after_s`, drawn from a seeded generator; every search sleeps `search_delay_ms`."""

    reject_fraction: float = 0.0
    retry_after_s: float = 0.0
    search_delay_ms: float = 0.0
    seed: int = 0
    _random: random.Random = field(default_factory=random.Random, compare=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)
    rejected: list[int] = field(default_factory=lambda: [0], compare=False, repr=False)

    def __post_init__(self) -> None:
        self._random.seed(self.seed)

    def reject(self) -> bool:
        if self.reject_fraction <= 0:
            return False
        with self._lock:
            hit = self._random.random() < self.reject_fraction
            self.rejected[0] += hit
            return hit


def make_app(service: MemoryService, faults: Faults | None = None, guard: Guard | None = None) -> Any:
    """The ASGI app serving `service` behind `guard` (default: loopback Host names, no browser origin,
    no token), with `faults` for tests."""
    faults = faults or Faults()
    app = FastAPI(title="memeval-serve", description="a memeval variant as a memory service")

    def answer(content: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
        body = json.dumps(content, allow_nan=False).encode()
        return Response(body, status_code=status, media_type="application/json", headers=headers)

    async def handle(request: Request, work: Any, *, search: bool = False) -> Response:
        raw = await request.body()  # read first: a kept-alive connection must be left clean
        if faults.reject():
            return answer(
                {"error": "rate limited (test fault injection)"},
                429,
                {"Retry-After": f"{faults.retry_after_s:g}"},
            )
        try:
            body = json.loads(raw or b"{}")
        except RecursionError:
            return answer({"error": "the request body is nested too deeply"}, 400)
        except ValueError as err:  # not JSON, not UTF-8, or an integer past Python's digit limit
            return answer({"error": f"the request body is not JSON: {str(err)[:200]}"}, 400)
        try:
            if not isinstance(body, dict):
                raise ServiceError("the request body must be a JSON object")
            atomic = "user_id" in body  # the AtomicMemory wire shape (module docstring)
            if search and faults.search_delay_ms:
                await asyncio.sleep(faults.search_delay_ms / 1000)  # a slow service, waiting concurrently
            # Inline, not in a worker thread: a search is short CPU work under the GIL either way, and the
            # thread hop cost more than the search on a loaded machine (reports/benchmarks/live_system.md).
            # Index builds run in the background (service.count), so nothing here waits on one.
            return answer(work(from_atomicmemory(body) if atomic else body, atomic))
        except (ServiceError, ValueError, KeyError, TypeError) as err:
            return answer({"error": f"{type(err).__name__}: {str(err)[:2000]}"}, 400)

    def scope_of(body: dict) -> dict[str, str]:
        scope = body.get("scope")
        problem = scope_problem(scope)
        if problem is not None:
            raise ServiceError(f'`scope` {problem} (e.g. {{"conversation": "1"}})')
        return scope

    def ingest(body: dict, atomic: bool) -> dict:
        memories = body.get("memories")
        if not isinstance(memories, list):
            raise ServiceError("`memories` must be a list of records")
        return service.ingest(scope_of(body), memories)

    def search(body: dict, atomic: bool) -> dict:
        if not isinstance(body.get("query"), str):
            raise ServiceError("`query` must be a string")
        for name in ("as_of", "query_id"):
            if body.get(name) is not None and not isinstance(body[name], str):
                raise ServiceError(f"`{name}` must be a string")
        hits = service.search(
            body["query"],
            scope_of(body),
            body.get("k", 10),
            as_of=body.get("as_of"),
            config_override=body.get("config_override") or {},
            query_id=body.get("query_id") or "query",
        )
        if atomic:
            return {"memories": [{"id": h.id, "score": h.score, "content": h.text} for h in hits]}
        return {"results": [{"id": h.id, "score": h.score, "text": h.text} for h in hits]}

    @app.post("/v1/memories/ingest")
    async def ingest_route(request: Request) -> Response:
        return await handle(request, ingest)

    @app.post("/v1/memories/search")
    async def search_route(request: Request) -> Response:
        return await handle(request, search, search=True)

    @app.post("/v1/memories/reset")
    async def reset_route(request: Request) -> Response:
        return await handle(request, lambda body, _: {"removed": service.reset(scope_of(body))})

    @app.post("/v1/memories/count")
    async def count_route(request: Request) -> Response:
        return await handle(request, lambda body, _: {"count": service.count(scope_of(body))})

    @app.get("/health")
    async def health() -> Response:
        return answer(
            {
                "status": "ok",
                **service.describe(),
                "counts": service.counts(),
                "rejected": faults.rejected[0],
                "warnings": service.warnings(),  # e.g. a stage that found no memory with the field it reads
            }
        )

    return dataclasses.replace(guard or Guard(), liveness="/health").wrap(app)


def from_atomicmemory(body: dict) -> dict:
    """An AtomicMemory-shaped body in memeval-serve's own shape: `user_id` -> scope {"user_id": ...},
    `limit` -> k, each memory's `content` -> text (fields it leaves null are dropped)."""
    if "scope" in body:
        raise ServiceError(
            "a body has `scope` (memeval-serve's shape) or `user_id` (AtomicMemory's): not both"
        )
    user = body["user_id"]
    if not isinstance(user, str) or not user:
        raise ServiceError("`user_id` must be a non-empty string")
    out = {k: v for k, v in body.items() if k not in ("user_id", "limit")}
    out["scope"] = {"user_id": user}
    if "limit" in body:
        out["k"] = body["limit"]
    if isinstance(body.get("memories"), list):
        out["memories"] = [
            {("text" if k == "content" else k): v for k, v in m.items() if v is not None}
            if isinstance(m, dict)
            else m
            for m in body["memories"]
        ]
    return out
