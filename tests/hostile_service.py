"""A memory service that misbehaves on purpose, on a free loopback port (stdlib `http.server`).

It speaks memeval-serve's HTTP shape (`conf/system/memeval_serve.yaml`: reset, ingest, count, search,
health), stores what it is sent per scope, and answers each search with the *honest* ranking (the
query's relevant memories first, from the qrels it is given, then the rest of the scope), made hostile
by its `mode`:

| mode | what a search (or count) answers |
|---|---|
| `honest` | the honest ranking |
| `junk_first` | 10 ids the suite does not hold, then the honest ranking |
| `other_scope` | every memory of the other scopes, then the honest ranking |
| `nan` | the honest ranking with the first score NaN and the second Infinity (Python's JSON extension) |
| `slow_loris` | the honest answer, one byte a second, status line included |
| `big` | a body of `big_bytes` (default 50 MB), streamed without a Content-Length |
| `redirect` | 302 to `redirect_to` (another port on 127.0.0.1) |
| `count_string` | count answers `{"count": "<n>"}` |
| `nested` | a search answer nested 100,000 lists deep |
| `null_id` | the honest ranking with the first id null |
| `echo_headers` | 400 with the request's headers as the body |

`tls` (an `ssl.SSLContext` with a certificate) makes it https. `seen` holds (method, raw path, headers) of
every request, `hostile_at` the `time.monotonic()` at which the
first hostile answer began (so a test can bound how long the client held on), `sent_bytes` what a
streamed answer got written before the client hung up (the most of any one answer).

    .venv/bin/python -m tests.hostile_service --mode slow_loris --qrels datasets/spark25/qrels.tsv
"""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.parse
from collections import defaultdict
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODES = (
    "honest",
    "junk_first",
    "other_scope",
    "nan",
    "slow_loris",
    "big",
    "redirect",
    "count_string",
    "nested",
    "null_id",
    "echo_headers",
)


def _scope_key(scope: Mapping[str, Any]) -> str:
    return json.dumps(dict(scope), sort_keys=True)


class HostileService:
    def __init__(
        self,
        mode: str = "honest",
        qrels: Mapping[str, Mapping[str, int]] | None = None,
        *,
        redirect_to: str | None = None,
        big_bytes: int = 50 * 2**20,
        port: int = 0,
        tls: ssl.SSLContext | None = None,
    ):
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: one of {', '.join(MODES)}")
        self.mode = mode
        self.qrels = {q: dict(r) for q, r in (qrels or {}).items()}
        self.redirect_to = redirect_to
        self.big_bytes = big_bytes
        self.memories: dict[str, list[str]] = defaultdict(list)  # scope key -> ids, in ingest order
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        self.hostile_at: float | None = None
        self.sent_bytes = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        if tls is not None:  # https: the listening socket hands out TLS connections
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        scheme = "https" if tls is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, name="hostile-service", daemon=True).start()

    def close(self) -> None:
        self._stop.set()  # a dripping answer stops at its next byte
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> HostileService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- what it answers ------------------------------------------------------------------------------

    def honest(self, body: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The scope's memories, the query's relevant ones first (by grade), scored k, k-1, ..."""
        ids = self.memories.get(_scope_key(body.get("scope") or {}), [])
        relevant = self.qrels.get(str(body.get("query_id")), {})
        ranked = sorted(ids, key=lambda m: -relevant.get(m, 0))[: int(body.get("k") or 10)]
        return [
            {"id": m, "score": float(len(ranked) - i), "text": f"memory {m}"} for i, m in enumerate(ranked)
        ]

    def _search(self, body: Mapping[str, Any]) -> tuple[int, Any]:
        hits = self.honest(body)
        if self.mode == "junk_first":
            hits = [{"id": f"junk:{i}", "score": 100.0 - i, "text": "junk"} for i in range(10)] + hits
        elif self.mode == "other_scope":
            mine = _scope_key(body.get("scope") or {})
            others = [m for key, ids in sorted(self.memories.items()) if key != mine for m in ids]
            hits = [{"id": m, "score": 100.0, "text": "theirs"} for m in others] + hits
        elif self.mode == "nan" and hits:
            hits[0]["score"] = float("nan")
            if len(hits) > 1:
                hits[1]["score"] = float("inf")
        elif self.mode == "null_id" and hits:
            hits[0]["id"] = None
        return 200, {"results": hits}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                service._record(self)
                self._json(200, {"status": "ok"})

            def do_POST(self) -> None:
                service._record(self)
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                op = urllib.parse.urlsplit(self.path).path.rstrip("/").rsplit("/", 1)[-1]
                if op == "reset":
                    with service._lock:
                        service.memories.pop(_scope_key(body.get("scope") or {}), None)
                    return self._json(200, {"ok": True})
                if op == "ingest":
                    with service._lock:
                        stored = service.memories[_scope_key(body.get("scope") or {})]
                        stored += [m["id"] for m in body.get("memories", []) if m["id"] not in stored]
                    return self._json(200, {"stored": len(body.get("memories", []))})
                if op == "count":
                    n = len(service.memories.get(_scope_key(body.get("scope") or {}), []))
                    if service.mode == "count_string":
                        service._hostile()
                        return self._json(200, {"count": str(n)})
                    return self._json(200, {"count": n})
                if op == "search":
                    return self._search(body)
                return self._json(404, {"error": f"no {self.path}"})

            def _search(self, body: Mapping[str, Any]) -> None:
                mode = service.mode
                if mode in ("honest", "junk_first", "other_scope", "nan", "null_id", "count_string"):
                    if mode not in ("honest", "count_string"):
                        service._hostile()
                    return self._json(*service._search(body))
                service._hostile()
                if mode == "redirect":
                    self.send_response(302)
                    self.send_header("Location", f"{service.redirect_to}{self.path}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif mode == "echo_headers":
                    self._json(400, {"error": "bad request", "you sent": dict(self.headers)})
                elif mode == "nested":
                    depth = 100_000
                    self._raw(200, b'{"results": ' + b"[" * depth + b"]" * depth + b"}")
                elif mode == "slow_loris":
                    data = json.dumps({"results": service.honest(body)}).encode()
                    head = f"HTTP/1.0 200 OK\r\nContent-Length: {len(data)}\r\n\r\n".encode()
                    self._drip(head + data, 1.0)
                elif mode == "big":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()  # no Content-Length: the body ends when the connection closes
                    chunk = b" " * 2**16
                    self._stream(b'{"results": [], "pad": "', chunk, service.big_bytes)

            def _json(self, status: int, payload: Any) -> None:
                self._raw(
                    status, json.dumps(payload).encode()
                )  # allow_nan: NaN and Infinity as Python writes them

            def _raw(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _drip(self, data: bytes, every_s: float) -> None:
                try:
                    for i in range(len(data)):
                        if service._stop.wait(every_s if i else 0):
                            return
                        self.wfile.write(data[i : i + 1])
                        self.wfile.flush()
                except OSError:  # the client gave up: what it should do
                    pass

            def _stream(self, head: bytes, chunk: bytes, total: int) -> None:
                sent = 0
                try:
                    self.wfile.write(head)
                    while sent < total and not service._stop.is_set():
                        self.wfile.write(chunk)
                        sent += len(chunk)
                    self.wfile.write(b'"}')
                except OSError:  # the client hung up before the end: what it should do
                    pass
                with service._lock:
                    service.sent_bytes = max(service.sent_bytes, sent)

        return Handler

    def _record(self, handler: BaseHTTPRequestHandler) -> None:
        with self._lock:
            self.seen.append((handler.command, handler.path, dict(handler.headers)))

    def _hostile(self) -> None:
        with self._lock:
            if self.hostile_at is None:
                self.hostile_at = time.monotonic()


def _read_qrels(path: str) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = defaultdict(dict)
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 4:
                qrels[parts[0]][parts[2]] = int(parts[3])
    return qrels


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=MODES, default="honest")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--qrels", help="a qrels.tsv: the honest ranking puts each query's relevant ids first"
    )
    parser.add_argument("--redirect-to", default=None)
    options = parser.parse_args()
    service = HostileService(
        options.mode,
        _read_qrels(options.qrels) if options.qrels else {},
        redirect_to=options.redirect_to,
        port=options.port,
    )
    print(f"{options.mode} service at {service.url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        service.close()
