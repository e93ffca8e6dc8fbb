"""A loopback OpenAI-compatible endpoint for experiments/benchmarks/answer_stage.py (the concurrency and
per-call overhead figures) and the answer stage's fast tests (tests/answer/):
a real HTTP server (http.server, a thread per request) answering GET /v1/models and POST
/v1/chat/completions. Its reply is a deterministic function of the request (the last line of the
prompt's context before "Question", or "yes"/"no" for a judge), after `delay_s`; it counts requests and
records the Authorization header it saw (so a test can check the key was sent and never recorded)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ChatStub:
    def __init__(
        self, *, delay_s: float = 0.0, model: str = "stub-model", fail_first: int = 0, not_json: bool = False
    ):
        self.delay_s = delay_s
        self.model = model
        self.fail_first = fail_first
        self.not_json = not_json
        self.requests: list[dict] = []
        self.authorization: list[str | None] = []
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out as written (no 40 ms delayed-ACK stall)

            def log_message(self, *args):  # quiet
                pass

            def _send(self, status: int, payload: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self):
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, json.dumps({"object": "list", "data": [{"id": stub.model}]}).encode())
                else:
                    self._send(404, b"{}")

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with stub._lock:
                    stub.requests.append(body)
                    stub.authorization.append(self.headers.get("Authorization"))
                    failing = len(stub.requests) <= stub.fail_first
                if stub.delay_s:
                    time.sleep(stub.delay_s)
                if failing:
                    self._send(503, b'{"error": "warming up"}')
                    return
                if stub.not_json:
                    self._send(200, b"<html>not json</html>")
                    return
                text = stub.reply(body["messages"][-1]["content"])
                answer = {
                    "id": "x",
                    "object": "chat.completion",
                    "model": stub.model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": len(body["messages"][-1]["content"].split()),
                        "completion_tokens": len(text.split()),
                    },
                }
                self._send(200, json.dumps(answer).encode())

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @staticmethod
    def reply(prompt: str) -> str:
        if "Reply with one word: CORRECT or INCORRECT." in prompt:  # the `strict` judge's prompt
            response = prompt.split("Answer to grade:", 1)[1].split("\n", 1)[0]
            gold = prompt.split("Gold answer:", 1)[1].split("\n", 1)[0]
            return "CORRECT" if gold.strip().lower() in response.lower() else "INCORRECT"
        context = prompt.split("Question:", 1)[0].strip().splitlines()
        return context[0].split(": ", 1)[-1][:80] if context else "I do not know"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> ChatStub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
