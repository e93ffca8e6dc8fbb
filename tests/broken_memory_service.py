"""A small memory service that searches honestly unless told to break one behaviour (stdlib `http.server`).

It speaks memeval-serve's HTTP shape (conf/system/memeval_serve.yaml: health, reset, ingest, count,
search), so `memeval-conform system=memeval_serve system.base_url=<its url>` checks it. A search scores
each memory of the query's scope by the query words it holds (lower-cased word tokens), ties broken by
the later `created_at`, then by ingest order, and answers the best k with score > 0. Each flag breaks one
behaviour that tests/conform/test_conform_broken.py expects memeval-conform to catch, and only that:

| flag | what breaks |
|---|---|
| `pool_scopes` | a search ranks every scope's memories (reset, ingest and count stay per scope) |
| `ignore_reset` | a reset answers 200 and forgets nothing |
| `duplicate_reingest` | an id ingested again is stored again (and counted twice) |
| `over_k` | a search answers k + 2 hits when it has them |
| `nan_scores` | the first hit's score is NaN |
| `slow_visibility` | a memory is searchable only this many seconds after its ingest (count is at once) |

    .venv/bin/python -m tests.broken_memory_service --ignore-reset --port 8010
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Breaks:
    pool_scopes: bool = False
    ignore_reset: bool = False
    duplicate_reingest: bool = False
    over_k: bool = False
    nan_scores: bool = False
    slow_visibility: float = 0.0  # seconds


@dataclass
class _Stored:
    id: str
    text: str
    created_at: str
    visible_at: float
    order: int
    words: frozenset[str] = field(default_factory=frozenset)


class BrokenMemoryService:
    def __init__(self, breaks: Breaks = Breaks(), port: int = 0):
        self.breaks = breaks
        self.scopes: dict[str, list[_Stored]] = {}
        self._order = 0
        self._lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, name="broken-service", daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> BrokenMemoryService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- operations ---------------------------------------------------------------------------------

    def reset(self, scope: str) -> None:
        if not self.breaks.ignore_reset:
            with self._lock:
                self.scopes.pop(scope, None)

    def ingest(self, scope: str, records: list[dict[str, Any]]) -> None:
        with self._lock:
            stored = self.scopes.setdefault(scope, [])
            held = {m.id for m in stored}
            for record in records:
                if record["id"] in held and not self.breaks.duplicate_reingest:
                    continue
                self._order += 1
                stored.append(
                    _Stored(
                        record["id"],
                        record["text"],
                        record.get("created_at") or "",
                        time.monotonic() + self.breaks.slow_visibility,
                        self._order,
                        frozenset(WORD.findall(record["text"].lower())),
                    )
                )

    def count(self, scope: str) -> int:
        with self._lock:
            return len(self.scopes.get(scope, []))

    def search(self, scope: str, text: str, k: int) -> list[dict[str, Any]]:
        words = set(WORD.findall(text.lower()))
        now = time.monotonic()
        with self._lock:
            pool = [m for s, ms in self.scopes.items() if self.breaks.pool_scopes or s == scope for m in ms]
        scored = [(len(words & m.words), m) for m in pool if m.visible_at <= now]
        ranked = sorted(
            (x for x in scored if x[0] > 0), key=lambda x: (-x[0], _neg(x[1].created_at), x[1].order)
        )
        hits = [
            {"id": m.id, "score": float(s), "text": m.text} for s, m in ranked[: k + 2 * self.breaks.over_k]
        ]
        if self.breaks.nan_scores and hits:
            hits[0]["score"] = float("nan")
        return hits

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._json(200, {"status": "ok", "name": "broken-memory-service"})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                scope = json.dumps(body.get("scope") or {}, sort_keys=True)
                op = self.path.rstrip("/").rsplit("/", 1)[-1]
                if op == "reset":
                    service.reset(scope)
                    return self._json(200, {"ok": True})
                if op == "ingest":
                    service.ingest(scope, body.get("memories") or [])
                    return self._json(200, {"ok": True})
                if op == "count":
                    return self._json(200, {"count": service.count(scope)})
                if op == "search":
                    hits = service.search(scope, str(body.get("query") or ""), int(body.get("k") or 10))
                    return self._json(200, {"results": hits})
                return self._json(404, {"error": f"no {self.path}"})

            def _json(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()  # NaN as Python writes it (the nan_scores break)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def _neg(created_at: str) -> tuple[int, ...]:
    """A sort key that puts the later `created_at` (ISO-8601, compared as text) first."""
    return tuple(-ord(c) for c in created_at)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=8010)
    for name in ("pool_scopes", "ignore_reset", "duplicate_reingest", "over_k", "nan_scores"):
        p.add_argument(f"--{name.replace('_', '-')}", action="store_true")
    p.add_argument("--slow-visibility", type=float, default=0.0)
    args = vars(p.parse_args())
    port = args.pop("port")
    service = BrokenMemoryService(Breaks(**args), port)
    print(f"serving on {service.url}", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
