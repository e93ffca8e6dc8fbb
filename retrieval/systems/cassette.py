"""Record and replay a live system's exchanges: a checksummed JSONL cassette (`system.mode`).

    live    every call goes to the service; nothing is written
    record  a call the cassette already holds is answered from it (a resumed run re-asks only what is
            missing); any other goes to the service and is appended to the cassette as it returns
    replay  every call is answered from the cassette, with no network; a call it lacks is an error
            naming the query (or scope) and the cassette

Data flow: `SystemRetriever` wraps its adapter in `RecordedSystem` (record/replay), which implements the
same `MemorySystem` protocol. Exchanges are recorded at the protocol level (search request -> hits), so
every adapter (HTTP, MCP, a Python library) records and replays the same way.

Each line is one exchange, `{"key", "op", "request", "response", "elapsed_ms", "sha256"}`: `key` is the
sha256 of the adapter's identity (its `fingerprint()`: endpoints, templates and paths, never a secret
nor the base URL) and the request; `sha256` the checksum of the line's other fields. A line is written
whole, flushed and fsynced before the call returns, so a run killed mid-way leaves every finished
exchange readable; a torn last line is dropped (and reported), a corrupt line elsewhere is an error.
Secrets never reach a cassette: requests are recorded as the harness made them (ids, texts, overrides),
before any header is added, and headers are not part of the request.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from retrieval.systems.protocol import Hit, MemorySystem, SearchRequest, SystemError_
from retrieval.types import Memory, memory_record

FORMAT = "memeval-cassette/1"


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _checksum(entry: Mapping[str, Any]) -> str:
    return hashlib.sha256(_canonical({k: v for k, v in entry.items() if k != "sha256"}).encode()).hexdigest()


def memories_digest(memories: Sequence[Memory]) -> str:
    """What an ingest sent, as one hash (ids, texts, times and metadata, in order)."""

    digest = hashlib.sha256()
    for memory in memories:
        digest.update(_canonical(memory_record(memory)).encode())
        digest.update(b"\n")
    return digest.hexdigest()


class Cassette:
    """The exchanges of one cassette file, by key; appended to as they happen (record mode)."""

    def __init__(self, path: str | Path, *, writable: bool):
        self.path = Path(path)
        self.writable = writable
        self.entries: dict[str, dict[str, Any]] = {}
        self.dropped_tail = False  # a torn last line (a kill mid-write) was left out
        self._lock = threading.Lock()
        if self.path.exists():
            self._load()
        elif not writable:
            raise SystemError_(f"replay: cassette {self.path} does not exist (system.cassette)")

    def _load(self) -> None:
        lines = self.path.read_bytes().split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        for number, raw in enumerate(lines, 1):
            try:
                entry = json.loads(raw)
                good = isinstance(entry, dict) and entry.get("sha256") == _checksum(entry)
            except ValueError:
                good = False
            if not good:
                if number == len(lines):  # a run killed while writing its last exchange
                    self.dropped_tail = True
                    break
                raise SystemError_(
                    f"{self.path}:{number}: cassette line is corrupt (checksum mismatch or not JSON); "
                    "a cassette is only ever appended to: re-record it"
                )
            self.entries[entry["key"]] = entry
        if self.dropped_tail and self.writable:  # cut the torn line, so appends start on a clean line
            keep = b"".join(line + b"\n" for line in lines[: len(self.entries)]) if self.entries else b""
            self._rewrite(keep)

    def _rewrite(self, data: bytes) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, self.path)

    def get(self, key: str) -> dict[str, Any] | None:
        return self.entries.get(key)

    def put(self, entry: dict[str, Any]) -> None:
        entry = {**entry, "format": FORMAT}
        entry["sha256"] = _checksum(entry)
        line = (_canonical(entry) + "\n").encode()
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "ab") as fh:
                fh.write(line)
                fh.flush()
                os.fsync(fh.fileno())
            self.entries[entry["key"]] = entry


class RecordedSystem:
    """A MemorySystem answered from a cassette (replay), or through one (record: missing calls go live)."""

    def __init__(self, system: MemorySystem, cassette: Cassette, identity: str, *, replay: bool):
        self.system = system
        self.cassette = cassette
        self.identity = identity
        self.replay = replay
        self.stats = getattr(system, "stats", None)
        self.answered = {"cassette": 0, "live": 0}
        self._lock = threading.Lock()

    def _key(self, op: str, request: Mapping[str, Any]) -> str:
        return hashlib.sha256(
            _canonical({"adapter": self.identity, "op": op, "request": request}).encode()
        ).hexdigest()

    def _call(self, op: str, request: dict[str, Any], live: Any, what: str) -> Any:
        key = self._key(op, request)
        found = self.cassette.get(key)
        if found is not None:
            with self._lock:
                self.answered["cassette"] += 1
            return found["response"]
        if self.replay:
            raise SystemError_(
                f"replay miss: {what} ({op}) is not in cassette {self.cassette.path}; record it first "
                "(system.mode=record) with the same adapter config and overrides"
            )
        t = time.perf_counter()
        response = live()
        elapsed = (time.perf_counter() - t) * 1000
        with self._lock:
            self.answered["live"] += 1
        self.cassette.put(
            {"key": key, "op": op, "request": request, "response": response, "elapsed_ms": elapsed}
        )
        return response

    def reset(self, scope: Mapping[str, str]) -> None:
        self._call("reset", {"scope": dict(scope)}, lambda: self.system.reset(scope), f"scope {dict(scope)}")

    def ingest(self, scope: Mapping[str, str], memories: Sequence[Memory]) -> None:
        request = {"scope": dict(scope), "n": len(memories), "memories_sha256": memories_digest(memories)}
        self._call("ingest", request, lambda: self.system.ingest(scope, memories), f"scope {dict(scope)}")

    def wait_until_searchable(self, scope: Mapping[str, str], memories: Sequence[Memory]) -> float:
        request = {"scope": dict(scope), "n": len(memories)}
        return float(
            self._call(
                "wait",
                request,
                lambda: self.system.wait_until_searchable(scope, memories),
                f"scope {dict(scope)}",
            )
        )

    def search(self, request: SearchRequest) -> list[Hit]:
        recorded = {
            "query_id": request.query_id,
            "text": request.text,
            "scope": dict(request.scope),
            "k": request.k,
            "as_of": request.as_of,
            "overrides": dict(request.overrides),
        }

        def live() -> list[dict[str, Any]]:
            return [{"id": h.id, "score": h.score, "text": h.text} for h in self.system.search(request)]

        hits = self._call("search", recorded, live, f"query {request.query_id}")
        return [Hit(h["id"], h["score"], h["text"]) for h in hits]

    def recorded_latency_ms(self) -> list[float]:
        """The wall latency of every search as recorded (what a replay stands in for)."""
        return [e["elapsed_ms"] for e in self.cassette.entries.values() if e["op"] == "search"]

    def close(self) -> None:
        if not self.replay:
            self.system.close()
