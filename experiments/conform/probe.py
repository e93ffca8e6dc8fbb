"""How a conformance check talks to the service: every exchange through a cassette, kept as evidence.

`Recorder` answers each call from the cassette when it holds it (a replay, `system.mode=replay`) or asks
the adapter and appends the exchange (experiments/systems/cassette.py's checksummed, hash-chained file;
its public `get`/`put`). Unlike a run's `RecordedSystem`, which answers a repeated request from its
first recording, every conformance call is keyed by its check and step (`<check id>/<n>`): a check that
searches a scope before and after its reset asks two questions, and a replay answers each with its own
recording. An adapter's failure is an answer too (recorded as `{"error": ...}`), so a check that expects
a refusal replays it.

`Probe` is one check's view: scopes and ids under the run's namespace (so checks never share a scope),
each call logged as an `Exchange` (the request, the ids returned, the service's time: measured, or
replayed from the cassette), and `settle`, which polls a search until a memory comes back, so only the
check that measures visibility (lifecycle.visible_within) is judged on it.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from experiments.systems.cassette import Cassette
from experiments.systems.protocol import Hit, LiveSystemError, MemorySystem, SearchRequest
from experiments.systems.retriever import system_identity
from retrieval.types import Memory, scope_key

OP = "conform"  # the cassette `op` prefix: a conformance exchange is never a run's


class ReplayMiss(RuntimeError):
    """A replay asked what the cassette does not hold: the suite cannot be judged from it (exit 2)."""


class OperationFailed(RuntimeError):
    """A call the check needs (reset, ingest, a search it cannot do without) failed: the check fails."""

    def __init__(self, exchange: Exchange):
        super().__init__(f"{exchange.op} failed: {exchange.error}")
        self.exchange = exchange


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class Recorder:
    """The adapter behind a cassette (record: asked and appended; replay: answered, never asked)."""

    def __init__(self, system: MemorySystem, cassette: Cassette, *, replay: bool):
        self.system = system
        self.cassette = cassette
        self.replay = replay
        self.identity = system_identity(system)  # the adapter's config (never a secret nor the base URL)

    def _key(self, op: str, request: Mapping[str, Any]) -> str:
        payload = {"adapter": self.identity, "op": f"{OP}.{op}", "request": request}
        return hashlib.sha256(_canonical(payload).encode()).hexdigest()

    def call(self, op: str, request: dict[str, Any], live: Callable[[], Any]) -> tuple[Any, float, bool]:
        """(response, the service's ms, replayed). A response is `{"ok": value}` or `{"error": message}`."""
        key = self._key(op, request)
        found = self.cassette.get(key)
        if found is not None:
            return found["response"], float(found["elapsed_ms"]), True
        if self.replay:
            raise ReplayMiss(
                f"replay miss: {op} {request.get('step')} is not in cassette {self.cassette.path}; record it "
                "with the same checks, seed and adapter config (system.mode=record)"
            )
        started = time.perf_counter()
        try:
            response = {"ok": live()}
        except LiveSystemError as err:  # the adapter's loud failure: an answer the check judges
            response = {"error": str(err)}
        except Exception as err:  # noqa: BLE001 (a user's Python adapter may raise anything: a crash)
            response = {"error": f"{type(err).__name__}: {err}", "crash": True}
        elapsed = (time.perf_counter() - started) * 1000
        self.cassette.put(
            {"key": key, "op": f"{OP}.{op}", "request": request, "response": response, "elapsed_ms": elapsed}
        )
        return response, elapsed, False


@dataclass
class Exchange:
    """One call as evidence: what was asked, what came back (ids, or the error), the service's time."""

    step: str
    op: str
    request: dict[str, Any]
    elapsed_ms: float
    replayed: bool
    value: Any = None  # search: list[Hit]; count: int | None; wait: seconds
    error: str | None = None
    crash: bool = False

    @property
    def hits(self) -> list[Hit]:
        return list(self.value or []) if self.op == "search" else []

    @property
    def ids(self) -> list[str]:
        return [h.id for h in self.hits]

    def evidence(self) -> dict[str, Any]:
        out: dict[str, Any] = {"step": self.step, "op": self.op, "request": self.request}
        if self.error is not None:
            out["error"] = self.error
        elif self.op == "search":
            out["ids"] = self.ids
            scores = [h.score for h in self.hits]
            if any(s is not None for s in scores):
                out["scores"] = [_score_text(s) for s in scores]
        elif self.op in ("count", "wait"):
            out["answer"] = self.value
        out["elapsed_ms"] = round(self.elapsed_ms, 3)
        out["timing"] = "replayed" if self.replayed else "measured"
        return out


def _score_text(score: float | None) -> float | str | None:
    """A score as JSON can hold it: a NaN or an infinity as its name (conformance.json stays valid JSON)."""
    return score if score is None or math.isfinite(score) else repr(score)


@dataclass(frozen=True)
class Settings:
    """The `conform` config node (conf/conform.yaml)."""

    seed: int = 0
    namespace: str = "memeval-conform"
    visible_within_s: float = 5.0
    settle_timeout_s: float = 30.0
    poll_s: float = 0.05
    timeout_s: float = 30.0
    nondeterministic: bool = False


@dataclass
class Probe:
    """One check's calls to the service (see the module docstring)."""

    recorder: Recorder
    check_id: str
    settings: Settings
    exchanges: list[Exchange] = field(default_factory=list)
    _steps: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def system(self) -> MemorySystem:
        return self.recorder.system

    @property
    def rng(self) -> random.Random:
        """The check's own generator: the same seed and check give the same data, whatever ran before."""
        return random.Random(f"{self.settings.seed}:{self.check_id}")

    def token(self, label: str) -> str:
        """A made-up word (letters only) unique to this check and label: a query that finds exactly the
        memories holding it, for a keyword, substring or dense service alike."""
        digest = hashlib.sha256(f"{self.settings.seed}:{self.check_id}:{label}".encode()).digest()
        return "".join("bcdfghjklmnpqrstvwxz"[b % 20] + "aeiou"[b // 20 % 5] for b in digest[:4])

    def scope(self, values: Mapping[str, str]) -> dict[str, str]:
        """`values` under this run's namespace and check: no two checks (nor two seeds) share a scope."""
        prefix = f"{self.settings.namespace}:{self.settings.seed}:{self.check_id}:"
        return {str(k): prefix + str(v) for k, v in values.items()}

    def mid(self, label: str) -> str:
        """A memory id unique to this check (a service may hold every scope in one id space)."""
        return f"{self.settings.namespace}:{self.settings.seed}:{self.check_id}:{label}"

    def memory(self, scope: Mapping[str, str], label: str, text: str, **fields: Any) -> Memory:
        return Memory(id=self.mid(label), text=text, scope=dict(scope), **fields)

    def fillers(self, scope: Mapping[str, str], n: int) -> list[Memory]:
        """`n` memories of unrelated words. A scope holds them beside what a check asks about, so every word
        a check searches is in under half of the scope's memories: BM25's Robertson IDF scores a word held
        by most of a scope at or below 0 and returns nothing for it (lifecycle.sole_memory_found asks that
        on its own). Their ids name the scope too: a service may keep one id space for every scope."""
        where = hashlib.sha256(scope_key(scope).encode()).hexdigest()[:8]
        return [
            self.memory(scope, f"filler{j}.{where}", f"{self.token(f'filler{j}')} unrelated filler {j}")
            for j in range(n)
        ]

    # --- calls ---------------------------------------------------------------------------------------

    def _step(self, step: str | None) -> str:
        with self._lock:
            self._steps += 1
            return f"{self.check_id}/{step if step is not None else f'{self._steps:03d}'}"

    def _call(
        self,
        op: str,
        request: dict[str, Any],
        live: Callable[[], Any],
        step: str | None,
        read: Callable[[Any], Any] = lambda v: v,
        must: bool = True,
    ) -> Exchange:
        request = {"step": request.pop("step", None) or self._step(step), **request}
        response, elapsed, replayed = self.recorder.call(op, request, live)
        exchange = Exchange(request["step"], op, request, elapsed, replayed)
        if "error" in response:
            exchange.error, exchange.crash = str(response["error"]), bool(response.get("crash"))
        else:
            exchange.value = read(response["ok"])
        with self._lock:
            self.exchanges.append(exchange)
        if must and exchange.error is not None:
            raise OperationFailed(exchange)
        return exchange

    def reset(self, scope: Mapping[str, str], *, step: str | None = None) -> Exchange:
        return self._call("reset", {"scope": dict(scope)}, lambda: self.system.reset(scope), step)

    def ingest(
        self,
        scope: Mapping[str, str],
        memories: Sequence[Memory],
        *,
        step: str | None = None,
        must: bool = True,
    ) -> Exchange:
        request = {
            "scope": dict(scope),
            "ids": [m.id for m in memories],
            "texts_sha256": hashlib.sha256(_canonical([m.text for m in memories]).encode()).hexdigest(),
        }
        return self._call("ingest", request, lambda: self.system.ingest(scope, memories), step, must=must)

    def wait(
        self, scope: Mapping[str, str], memories: Sequence[Memory], *, step: str | None = None
    ) -> Exchange:
        live = lambda: self.system.wait_until_searchable(scope, memories)  # noqa: E731
        return self._call("wait", {"scope": dict(scope), "n": len(memories)}, live, step)

    def count(self, scope: Mapping[str, str], *, step: str | None = None) -> Exchange:
        """The service's count of the scope (value None: the adapter has none)."""
        counter = getattr(self.system, "count", None)
        live = (lambda: counter(scope)) if callable(counter) else (lambda: None)
        return self._call("count", {"scope": dict(scope)}, live, step)

    def search(
        self, scope: Mapping[str, str], text: str, k: int = 10, *, step: str | None = None, must: bool = True
    ) -> Exchange:
        request = SearchRequest(query_id=self._step(step), text=text, scope=dict(scope), k=k)

        def live() -> list[dict[str, Any]]:
            return [{"id": str(h.id), "score": h.score, "text": h.text} for h in self.system.search(request)]

        def read(hits: list[dict[str, Any]]) -> list[Hit]:
            return [Hit(h["id"], None if h["score"] is None else float(h["score"]), h["text"]) for h in hits]

        fields = {
            "step": request.query_id,
            "text": text if len(text) <= 300 else f"{text[:120]}... ({len(text)} characters)",
            "text_sha256": hashlib.sha256(text.encode()).hexdigest(),
            "scope": dict(scope),
            "k": k,
        }
        return self._call("search", fields, live, None, read, must)

    def sleep(self, seconds: float) -> None:
        """A pause between polls: slept live, skipped in a replay (the recording already waited)."""
        if not self.recorder.replay:
            time.sleep(seconds)

    # --- what checks share ---------------------------------------------------------------------------

    def declares(self, operation: str) -> bool:
        """Whether the adapter's config offers an operation (an HTTP `endpoints` or MCP `tools` entry); a
        Python adapter offers what it defines. Without `reset` an adapter's reset does nothing."""
        for table in ("endpoints", "tools"):
            offered = getattr(self.system, table, None)
            if isinstance(offered, Mapping):
                return operation in offered
        return callable(getattr(self.system, operation, None))

    def store(self, scope: Mapping[str, str], memories: Sequence[Memory], *, step: str = "store") -> None:
        """Reset the scope (when the service can), ingest, wait as a run waits, and settle on the last
        memory: what a check needs before it asks its question."""
        if self.declares("reset"):
            self.reset(scope, step=f"{step}.reset")
        self.ingest(scope, memories, step=f"{step}.ingest")
        self.wait(scope, memories, step=f"{step}.wait")
        self.settle(scope, memories[-1], self.token_of(memories[-1]), step=f"{step}.settle")

    @staticmethod
    def token_of(memory: Memory) -> str:
        """The made-up word a generated memory's text starts with (data is made so)."""
        return memory.text.split(" ", 1)[0]

    def settle(
        self,
        scope: Mapping[str, str],
        memory: Memory,
        query: str,
        *,
        step: str,
        back: Callable[[Exchange], bool] | None = None,
    ) -> float:
        """Poll a search for `query` until `memory` comes back (by its id, or as `back` judges a search);
        the service's ms until then (the calls' own times and the pauses between them: the same in a
        replay). Never back within `settle_timeout_s`: OperationFailed naming the last search."""
        spent, n = 0.0, 0
        while True:
            found = self.search(scope, query, 10, step=f"{step}.{n}")
            spent += found.elapsed_ms
            if memory.id in found.ids or (back is not None and back(found)):
                return spent
            if spent / 1000 > self.settings.settle_timeout_s:
                found.error = (
                    f"{memory.id!r} not returned within {self.settings.settle_timeout_s:g} s of its ingest"
                )
                raise OperationFailed(found)
            self.sleep(self.settings.poll_s)
            spent += self.settings.poll_s * 1000
            n += 1
