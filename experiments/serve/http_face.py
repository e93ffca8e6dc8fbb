"""memeval-serve's HTTP face: a `MemoryService` (experiments/serve/service.py) in the AtomicMemory shape.

    POST /v1/memories/ingest  {"scope": {...}, "memories": [{"id", "text", "created_at"?, ...}]}
                              -> {"stored": n, "duplicates_refused": n}
    POST /v1/memories/search  {"query": str, "scope": {...}, "k": int, "as_of"?: str,
                               "config_override"?: {...}, "query_id"?: str}
                              -> {"results": [{"id", "score", "text"}]}
    POST /v1/memories/reset   {"scope": {...}} -> {"removed": n}
    POST /v1/memories/count   {"scope": {...}} -> {"count": n}     (what the searchable wait polls)
    GET  /health              -> {"status": "ok", "variant", "stages", "counts"}

Bodies are read and written with the stdlib json module (no model coercion), so a score crosses the
wire as its shortest repr and reads back as the same float. Requests are answered one at a time on
the event loop (a search is short CPU work; a scope's index is built in the background after ingest);
the test fault delay is an asynchronous wait, so delayed searches overlap as a slow service's would.
A refused request answers 400 with the reason.

Fault injection, for tests and benchmarks only (`Faults`): reject a fraction of requests with 429 and a
`Retry-After`, and delay every search, as a rate-limited or slow production service would.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request  # at module level: FastAPI resolves the handlers' annotations here
from fastapi.responses import Response

from experiments.serve.service import MemoryService, ServiceError


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


def make_app(service: MemoryService, faults: Faults | None = None) -> Any:
    """The FastAPI app serving `service` (with `faults`, for tests)."""
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
            if not isinstance(body, dict):
                raise ServiceError("the request body must be a JSON object")
            if search and faults.search_delay_ms:
                await asyncio.sleep(faults.search_delay_ms / 1000)  # a slow service, waiting concurrently
            # Inline, not in a worker thread: a search is short CPU work under the GIL either way, and the
            # thread hop cost more than the search on a loaded machine (reports/benchmarks/live_system.md).
            # Index builds run in the background (service.count), so nothing here waits on one.
            return answer(work(body))
        except (ServiceError, ValueError, KeyError, TypeError) as err:
            return answer({"error": f"{type(err).__name__}: {err}"}, 400)

    def scope_of(body: dict) -> dict[str, str]:
        scope = body.get("scope")
        if not isinstance(scope, dict) or not scope:
            raise ServiceError('`scope` must be a non-empty object, e.g. {"conversation": "1"}')
        return {str(k): str(v) for k, v in scope.items()}

    def ingest(body: dict) -> dict:
        memories = body.get("memories")
        if not isinstance(memories, list):
            raise ServiceError("`memories` must be a list of records")
        return service.ingest(scope_of(body), memories)

    def search(body: dict) -> dict:
        if not isinstance(body.get("query"), str):
            raise ServiceError("`query` must be a string")
        hits = service.search(
            body["query"],
            scope_of(body),
            body.get("k", 10),
            as_of=body.get("as_of"),
            config_override=body.get("config_override") or {},
            query_id=str(body.get("query_id") or "query"),
        )
        return {"results": [{"id": h.id, "score": h.score, "text": h.text} for h in hits]}

    @app.post("/v1/memories/ingest")
    async def ingest_route(request: Request) -> Response:
        return await handle(request, ingest)

    @app.post("/v1/memories/search")
    async def search_route(request: Request) -> Response:
        return await handle(request, search, search=True)

    @app.post("/v1/memories/reset")
    async def reset_route(request: Request) -> Response:
        return await handle(request, lambda body: {"removed": service.reset(scope_of(body))})

    @app.post("/v1/memories/count")
    async def count_route(request: Request) -> Response:
        return await handle(request, lambda body: {"count": service.count(scope_of(body))})

    @app.get("/health")
    async def health() -> Response:
        return answer(
            {"status": "ok", **service.describe(), "counts": service.counts(), "rejected": faults.rejected[0]}
        )

    return app
