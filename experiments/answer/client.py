"""An OpenAI-compatible chat-completions endpoint, bounded as the live-system adapters are.

Where it sits: the answer stage (experiments/answer/stage.py) asks its answerer and its LLM judges through
`ChatEndpoint.complete`, always behind a cassette (experiments/answer/calls.py). Any server that speaks
`POST <base_url>/chat/completions` and `GET <base_url>/models` fits: a hosted model, vLLM, Ollama,
llama.cpp's server (`llama_cpp.server`, the offline endpoint of the tests).

- Each request is bounded in time and bytes and never redirected (experiments/systems/bounded.py); it is
  retried `retries` times (exponential backoff from `backoff_s`, capped at `max_backoff_s`) on a connection
  error, a timeout, 429 and 5xx, then it is an `AnswerError` naming the URL and the query, never the key.
- The API key is read from the environment variable `api_key_env` names, at each request (never held in
  the config, a log, a cassette or an error: experiments/systems/secrets.py redacts every message).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from experiments.systems import bounded, secrets
from experiments.systems.protocol import LiveSystemError

_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


class AnswerError(LiveSystemError):
    """The answer stage cannot go on: an endpoint unreachable or answering nonsense, a replay miss, a bad
    answers file. Exit 2 (cannot judge), its message redacted of every known secret."""


@dataclass(frozen=True)
class Reply:
    """One chat completion: the text, the token usage the server reported, the model it says answered."""

    text: str
    prompt_tokens: int | None
    completion_tokens: int | None
    model: str | None


@dataclass(frozen=True, kw_only=True)
class ChatEndpoint:
    base_url: str  # e.g. http://127.0.0.1:8080/v1 (requests go to <base_url>/chat/completions)
    api_key_env: str | None = None  # the environment variable holding the key; None: no Authorization
    timeout_s: float = 120.0  # one request, whole
    retries: int = 2
    backoff_s: float = 0.5
    max_backoff_s: float = 10.0
    max_response_bytes: int = 1 << 20
    ca_file: str | None = None
    _local: threading.local = field(default_factory=threading.local, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.api_key_env:
            secrets.register(self.api_key_env)

    def models(self, what: str) -> list[str]:
        """The model ids the server serves (GET /models), in its order."""
        answer = self._request("GET", "/models", None, what)
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list):
            raise AnswerError(f"{what}: GET {self.base_url}/models answered no `data` list")
        return [str(m.get("id")) for m in data if isinstance(m, dict) and m.get("id") is not None]

    def complete(self, body: dict[str, Any], what: str) -> Reply:
        """One chat completion for `body` (model, messages, sampling parameters)."""
        answer = self._request("POST", "/chat/completions", body, what)
        try:
            text = answer["choices"][0]["message"]["content"]
            if not isinstance(text, str):
                raise TypeError
        except (KeyError, IndexError, TypeError):
            raise AnswerError(
                f"{what}: POST {self.base_url}/chat/completions answered no choices[0].message.content "
                f"({secrets.describe(answer)})"
            ) from None
        usage = answer.get("usage") if isinstance(answer.get("usage"), dict) else {}
        return Reply(
            text=text,
            prompt_tokens=_count(usage.get("prompt_tokens")),
            completion_tokens=_count(usage.get("completion_tokens")),
            model=str(answer["model"]) if answer.get("model") is not None else None,
        )

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key_env:
            key = secrets.env_value(self.api_key_env, "answer.endpoint.api_key_env")
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _connection(self, url: urllib.parse.SplitResult) -> http.client.HTTPConnection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = bounded.connect(url, self.timeout_s, self.ca_file)
            self._local.connection = connection
        return connection

    def _drop(self) -> None:
        connection, self._local.connection = getattr(self._local, "connection", None), None
        if connection is not None:
            connection.close()

    def _request(self, method: str, path: str, body: dict[str, Any] | None, what: str) -> Any:
        url = urllib.parse.urlsplit(self.base_url)
        full = url.path.rstrip("/") + path
        where = f"{self.base_url.rstrip('/')}{path}"
        data = None if body is None else json.dumps(body, allow_nan=False).encode()
        headers = self._headers()
        delay = self.backoff_s
        for attempt in range(self.retries + 1):
            wait = None
            try:
                answer = bounded.exchange(
                    self._connection(url), method, full, data, headers,
                    time.monotonic() + self.timeout_s, self.max_response_bytes,
                )  # fmt: skip
                if answer.will_close:
                    self._drop()
            except bounded.TooLarge as err:
                self._drop()
                raise AnswerError(f"{what}: {method} {where} sent {err}") from None
            except TimeoutError:
                self._drop()
                problem = f"{what}: no answer within {self.timeout_s:g} s from {where}"
            except (ConnectionError, OSError, http.client.HTTPException) as err:
                self._drop()
                problem = f"{what}: {where} unreachable ({type(err).__name__}: {err})"
            else:
                if 200 <= answer.status < 300:
                    try:
                        return json.loads(answer.body)
                    except ValueError:
                        problem = (
                            f"{what}: {method} {where} answered {answer.status} with a body that is not JSON"
                        )
                else:
                    said = secrets.quote(answer.body.decode(errors="replace"), 300)
                    problem = f"{what}: {method} {where} answered HTTP {answer.status}: {said}"
                    if answer.status not in _RETRY_STATUS:
                        raise AnswerError(problem)
                    if answer.retry_after is not None:
                        try:
                            wait = max(0.0, float(answer.retry_after))
                        except ValueError:
                            wait = None
            if attempt == self.retries:
                raise AnswerError(f"{problem} (after {self.retries} retries)")
            time.sleep(min(self.max_backoff_s, wait if wait is not None else delay))
            delay = min(self.max_backoff_s, delay * 2)
        raise AssertionError("unreachable")


def _count(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
