"""Every LLM call of the answer stage goes through a cassette: `answer.mode=live|record|replay`.

Where it sits: the answer stage asks `LlmCalls.ask(query_id, call, body)` for the answerer's reply and
hands each judge a `Chat` (experiments/answer/types.py) bound to a query and its call name. The cassette is
the live systems' own (experiments/systems/cassette.py: JSONL, one exchange a line, checksummed, hash
chained; its digest goes to tags.json and MLflow).

- `live`    every call goes to the endpoint; nothing is written
- `record`  a call the cassette holds is answered from it (a resumed run asks only what is missing), any
            other is asked and appended as it returns
- `replay`  every call is answered from the cassette, with no endpoint; one it lacks is an AnswerError
            naming the query and the call (`replay miss: query conv-26:q3 (judge longmemeval) ...`)

A call is keyed by the endpoint's identity and the request: the model, the template digest (what built
the prompt), the sampling parameters (in the body), the model id the server reports (GET /models, itself
recorded, keyed by the rest of the identity, so a replay needs no server) and, for a server started from
a local GGUF (`answer.endpoint.model_file`), that file's sha256; never the URL nor the key. An answer
recorded with one server replays for another serving the same model; a changed model, prompt or
sampling parameter is a miss, never a stale answer.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.answer.client import AnswerError, ChatEndpoint
from experiments.systems.cassette import Cassette
from experiments.systems.protocol import LiveSystemError

MODES = ("live", "record", "replay")


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _sha(value: Any) -> str:
    return hashlib.sha256(_canonical(value).encode()).hexdigest()


@dataclass(frozen=True)
class Exchange:
    """One call's outcome as the stage records it: the reply, its usage and the endpoint's time."""

    text: str
    prompt_tokens: int | None
    completion_tokens: int | None
    latency_ms: float
    from_cassette: bool


def open_cassette(path: str | Path, mode: str) -> Cassette:
    """The cassette of `answer.cassette` (replay: it must exist and hold exchanges)."""
    try:
        return Cassette(path, writable=mode == "record")
    except LiveSystemError as err:  # its messages name the live systems' keys: say ours
        raise AnswerError(
            str(err).replace("system.cassette", "answer.cassette").replace("system.mode", "answer.mode")
        ) from None


class LlmCalls:
    """The calls of one endpoint (the answerer's, or the judges'), through `cassette` unless `live`."""

    def __init__(
        self,
        endpoint: ChatEndpoint | None,
        identity: Mapping[str, Any],
        *,
        mode: str,
        cassette: Cassette | None,
    ):
        self.endpoint = endpoint
        self.identity = dict(identity)
        self.mode = mode
        self.cassette = cassette
        self.counts = {"cassette": 0, "live": 0}
        self._lock = threading.Lock()
        self._server_model: str | None = None

    def server_model(self) -> str:
        """The model id the server reports (first of GET /models), asked once, recorded like any call."""
        with self._lock:
            if self._server_model is None:
                key = _sha({"op": "models", "identity": self.identity})
                found = self.cassette.get(key) if self.cassette is not None else None
                if found is not None:
                    self._server_model = str(found["response"])
                elif self.mode == "replay":
                    raise self._miss("the endpoint's model list (GET /models)")
                else:
                    models = self._live_endpoint().models("answer.endpoint")
                    self._server_model = models[0] if models else ""
                    if self.cassette is not None:
                        self.cassette.put(
                            {"key": key, "op": "models", "request": {}, "response": self._server_model,
                             "elapsed_ms": 0.0}
                        )  # fmt: skip
            return self._server_model

    def ask(self, query_id: str, call: str, body: Mapping[str, Any]) -> Exchange:
        """The reply to one chat request (`call`: `answer`, or `judge <name>`) for query `query_id`."""
        request = {"query_id": query_id, "call": call, "body": dict(body)}
        key = _sha({"op": "chat", "identity": self.identity, "server_model": self.server_model(), **request})
        found = self.cassette.get(key) if self.cassette is not None else None
        if found is not None:
            with self._lock:
                self.counts["cassette"] += 1
            return _exchange(found["response"], float(found["elapsed_ms"]), True)
        if self.mode == "replay":
            raise self._miss(f"query {query_id} ({call})")
        started = time.perf_counter()
        reply = self._live_endpoint().complete(dict(body), f"query {query_id} ({call})")
        elapsed = (time.perf_counter() - started) * 1000
        response = {
            "text": reply.text,
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
        }
        with self._lock:
            self.counts["live"] += 1
        if self.cassette is not None:
            self.cassette.put(
                {"key": key, "op": "chat", "request": request, "response": response, "elapsed_ms": elapsed}
            )
        return _exchange(response, elapsed, False)

    def chat_for(self, query_id: str, call: str, model: str, base: Mapping[str, Any]):
        """A judge's `Chat` for one query: (messages, params) -> reply text, through this object."""

        def chat(messages: Sequence[Mapping[str, str]], params: Mapping[str, object]) -> str:
            body = {**base, **dict(params), "model": model, "messages": [dict(m) for m in messages]}
            return self.ask(query_id, call, body).text

        return chat

    def _live_endpoint(self) -> ChatEndpoint:
        if self.endpoint is None:
            raise AnswerError("answer.endpoint: no endpoint is configured for a live call")
        return self.endpoint

    def _miss(self, what: str) -> AnswerError:
        where = self.cassette.path if self.cassette is not None else "(none)"
        return AnswerError(
            f"replay miss: {what} is not in cassette {where}; record it first (answer.mode=record) with "
            "the same model, prompts and sampling parameters"
        )


def _exchange(response: Mapping[str, Any], elapsed_ms: float, from_cassette: bool) -> Exchange:
    return Exchange(
        text=str(response["text"]),
        prompt_tokens=response.get("prompt_tokens"),
        completion_tokens=response.get("completion_tokens"),
        latency_ms=elapsed_ms,
        from_cassette=from_cassette,
    )
