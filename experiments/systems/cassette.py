"""Record and replay a live system's exchanges: a checksummed, hash-chained JSONL cassette (`system.mode`).

    live    every call goes to the service; nothing is written
    record  a call the cassette already holds is answered from it (a resumed run re-asks only what is
            missing); any other goes to the service and is appended to the cassette as it returns
    replay  every call is answered from the cassette, with no network; a call it lacks is an error
            naming the query (or scope) and the cassette

Data flow: `SystemRetriever` wraps its adapter in `RecordedSystem` (record/replay), which implements the
same `MemorySystem` protocol. Exchanges are recorded at the protocol level (search request -> hits), so
every adapter (HTTP, MCP, a Python library) records and replays the same way.

Each line is one exchange, `{"format", "key", "op", "request", "response", "elapsed_ms", "sha256",
"chain"}`: `key` is the sha256 of the adapter's identity (its `fingerprint()`: endpoints, templates and
paths, never a secret nor the base URL) and the request; `sha256` the checksum of the line's other fields
but `chain`; `chain` = sha256(the previous line's chain + ":" + this line's sha256), starting from
sha256(FORMAT). So a line edited with its checksum recomputed breaks the chain (an error naming the file
and line), and the last chain is the digest of the whole exchange sequence: `Cassette.digest`, which keys
a finished replay (the SystemRetriever's fingerprint) and is written to tags.json and MLflow. A line of
another `format` is refused (re-record it). A line is written whole, flushed and fsynced before the call
returns, under an exclusive lock (the jobs of a sweep may record into one cassette: each appends after
whatever the others appended), so a run killed mid-way leaves every finished exchange readable; a torn
last line (no newline: the write was cut short) is dropped (and reported); a whole line (its newline
written) that does not check out is "cassette line N is corrupt", the last one too; two different
answers to one search, on two lines, are refused naming both. A cassette path that is a
directory, a FIFO or a device is refused at once (retrieval/regular_file.py, as for suite files).

Record latency is the service's: each exchange's `elapsed_ms` times the adapter's call alone (not the
cassette write), and a search answered from the cassette reports its recorded `elapsed_ms`.

A resumed record run never mixes states: a scope's reset, ingest and searchable wait answered from the
cassette are trusted only while every search of that scope is too. The first search of such a scope that
must go to the service first checks that the service still holds the scope (an adapter's optional
`count(scope)` reaches what the cassette says was ingested, polled for a while: `_ensure_held`), else
re-does the scope's reset, ingest and wait live (recorded again). Nothing touches the service until
something must be asked: a record run whose cassette holds every exchange runs with the service down (its
availability is checked before the first live call, not at start).
Secrets never reach a cassette: requests are recorded as the harness made them (ids, texts, overrides),
before any header is added, and headers are not part of the request.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from experiments.systems.protocol import Hit, LiveSystemError, MemorySystem, SearchRequest
from retrieval.regular_file import MAX_FILE_BYTES, check_regular, read_regular_file
from retrieval.types import Memory, memory_record, scope_key

FORMAT = "memeval-cassette/2"
_GENESIS = hashlib.sha256(FORMAT.encode()).hexdigest()  # the chain before the first line
VERIFY_MIN_S, VERIFY_POLL_S = 10.0, 0.1  # how long a resumed record run polls a kept scope's count


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _checksum(entry: Mapping[str, Any]) -> str:
    fields = {k: v for k, v in entry.items() if k not in ("sha256", "chain")}
    return hashlib.sha256(_canonical(fields).encode()).hexdigest()


def _chained(head: str, checksum: str) -> str:
    return hashlib.sha256(f"{head}:{checksum}".encode()).hexdigest()


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
        self._line_of: dict[str, int] = {}  # key -> the line that answers it
        self.dropped_tail = False  # a torn last line (a kill mid-write) was left out
        self.head = _GENESIS  # the chain after the last line read or written
        self._lines = 0
        self._size = 0  # bytes of the whole lines read or written
        self._lock = threading.Lock()
        try:
            data = read_regular_file(self.path, MAX_FILE_BYTES, what="a cassette")
        except FileNotFoundError:
            if not writable:
                raise LiveSystemError(
                    f"replay: cassette {self.path} does not exist (system.cassette)"
                ) from None
            return
        except OSError as err:
            raise LiveSystemError(f"cassette {self.path} {err.strerror} (system.cassette)") from None
        self._read(data, torn_tail_allowed=True)
        if self.dropped_tail and self.writable:  # cut the torn line, so appends start on a clean line
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_bytes(data[: self._size])
            os.replace(tmp, self.path)

    @property
    def digest(self) -> str | None:
        """The chain after the last exchange: one hash of the whole sequence (None: no exchange yet)."""
        return self.head if self._lines else None

    @classmethod
    def digest_of(cls, path: str | Path) -> str | None:
        """The digest of the cassette at `path` (None when there is none, or it holds no exchange)."""
        return cls(path, writable=False).digest if os.path.lexists(path) else None

    def _read(self, data: bytes, *, torn_tail_allowed: bool) -> None:
        """Take in the lines of `data` (which starts where the lines already read end). What follows the
        last newline is a write cut short: dropped when `torn_tail_allowed` (a killed run), else an error.
        A line with its newline was written whole (its newline is the last byte written):
        one that does not check out is corrupt, wherever it is, never a torn write."""
        *lines, tail = data.split(b"\n")
        for raw in lines:
            self._take(raw)
        if tail:
            if not torn_tail_allowed:
                raise self._corrupt(self._lines + 1, "the line is cut short")
            self.dropped_tail = True

    def _take(self, raw: bytes) -> None:
        number = self._lines + 1
        try:
            entry = json.loads(raw)
            good = isinstance(entry, dict) and entry.get("sha256") == _checksum(entry)
        except ValueError:
            good = False
        if not good:
            raise self._corrupt(number, "checksum mismatch or not JSON")
        if entry.get("format") != FORMAT:
            raise LiveSystemError(
                f"{self.path}:{number}: cassette line of format {entry.get('format')!r}; this memeval reads "
                f"{FORMAT!r}: re-record it (system.mode=record)"
            )
        chain = _chained(self.head, entry["sha256"])
        if entry.get("chain") != chain:
            raise self._corrupt(number, "the chain breaks here: a line was edited, removed or moved")
        self._check_one_answer(entry, number)
        self.entries[entry["key"]] = entry
        self._line_of[entry["key"]] = number
        self.head = chain
        self._lines += 1
        self._size += len(raw) + 1

    def _check_one_answer(self, entry: Mapping[str, Any], number: int) -> None:
        """A search is answered once: a second line for the same request with another answer is refused,
        naming both lines (a replay would take the later without a word). The same answer twice (two jobs
        of a sweep recorded it at once) and a scope's reset, ingest or wait recorded again (a resumed
        record run redoes a scope the service lost: module docstring) are kept, the later line counting."""
        first = self.entries.get(entry["key"])
        if first is None or entry.get("op") != "search" or first["response"] == entry.get("response"):
            return
        query = (entry.get("request") or {}).get("query_id")
        raise LiveSystemError(
            f"{self.path}: lines {self._line_of[entry['key']]} and {number} hold two different answers to "
            f"one request (search of query {query!r}); a cassette holds one answer per request: re-record it"
        )

    def _corrupt(self, number: int, why: str) -> LiveSystemError:
        return LiveSystemError(
            f"{self.path}:{number}: cassette line is corrupt ({why}); a cassette is only ever appended to: "
            "re-record it"
        )

    def get(self, key: str) -> dict[str, Any] | None:
        return self.entries.get(key)

    def put(self, entry: dict[str, Any]) -> None:
        entry = {**entry, "format": FORMAT}
        entry["sha256"] = _checksum(entry)
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o644)
            except OSError as err:
                raise LiveSystemError(f"cassette {self.path}: cannot write it ({err.strerror})") from None
            try:
                try:
                    check_regular(fd, self.path)
                except OSError as err:
                    raise LiveSystemError(f"cassette {self.path} {err.strerror} (system.cassette)") from None
                fcntl.flock(fd, fcntl.LOCK_EX)  # released when fd closes
                size = os.fstat(fd).st_size
                if size < self._size:
                    raise LiveSystemError(f"cassette {self.path} shrank while this run recorded into it")
                if size > self._size:  # another run appended: take its lines in, chain after them
                    self._read(os.pread(fd, size - self._size, self._size), torn_tail_allowed=False)
                entry["chain"] = _chained(self.head, entry["sha256"])
                line = (_canonical(entry) + "\n").encode()
                written = 0
                while written < len(line):
                    written += os.write(fd, line[written:])
                os.fsync(fd)
            finally:
                os.close(fd)
            self.entries[entry["key"]] = entry
            self.head = entry["chain"]
            self._lines += 1
            self._line_of[entry["key"]] = self._lines
            self._size += len(line)


class RecordedSystem:
    """A MemorySystem answered from a cassette (replay), or through one (record: missing calls go live)."""

    def __init__(self, system: MemorySystem, cassette: Cassette, identity: str, *, replay: bool):
        self.system = system
        self.cassette = cassette
        self.identity = identity
        self.replay = replay
        self.stats = getattr(system, "stats", None)
        self.answered = {"cassette": 0, "live": 0}
        # Scopes whose reset/ingest/wait came from the cassette, checked or redone (module docstring).
        self.scopes = {"verified_by_count": 0, "reingested": 0}
        self._skipped: dict[str, list[tuple[str, dict[str, Any], Callable[[], Any], str]]] = {}
        self._live_scopes: set[str] = set()
        self._scope_locks: dict[str, threading.Lock] = {}
        self._checked = False
        self._lock = threading.Lock()

    def _key(self, op: str, request: Mapping[str, Any]) -> str:
        return hashlib.sha256(
            _canonical({"adapter": self.identity, "op": op, "request": request}).encode()
        ).hexdigest()

    def _scope_lock(self, scope: str) -> threading.Lock:
        with self._lock:
            return self._scope_locks.setdefault(scope, threading.Lock())

    def _check_once(self) -> None:
        """The service is there (its `check_available`), asked once, before the first live call."""
        with self._lock:
            check, self._checked = (not self._checked), True
        if check and callable(getattr(self.system, "check_available", None)):
            self.system.check_available()  # type: ignore[attr-defined]

    def _live(self, op: str, key: str, request: dict[str, Any], live: Callable[[], Any]) -> tuple[Any, float]:
        """Ask the service and record the exchange: (response, the service's time in ms)."""
        self._check_once()
        t = time.perf_counter()
        response = live()
        elapsed = (time.perf_counter() - t) * 1000  # the service's time, not the cassette write's
        with self._lock:
            self.answered["live"] += 1
        self.cassette.put(
            {"key": key, "op": op, "request": request, "response": response, "elapsed_ms": elapsed}
        )
        return response, elapsed

    def _call(
        self, op: str, request: dict[str, Any], live: Callable[[], Any], what: str
    ) -> tuple[Any, float, bool]:
        """(response, elapsed ms, from the cassette) of one exchange."""
        key = self._key(op, request)
        found = self.cassette.get(key)
        if found is not None:
            with self._lock:
                self.answered["cassette"] += 1
            return found["response"], float(found["elapsed_ms"]), True
        if self.replay:
            raise LiveSystemError(
                f"replay miss: {what} ({op}) is not in cassette {self.cassette.path}; record it first "
                "(system.mode=record) with the same adapter config and overrides"
            )
        return (*self._live(op, key, request, live), False)

    def _scope_call(
        self, scope: Mapping[str, str], op: str, request: dict[str, Any], live: Callable[[], Any]
    ) -> Any:
        """A reset, ingest or wait. In record mode one the cassette holds is answered from it and kept as
        skipped; once anything of its scope must go live, the skipped ones are done live first, in order,
        and the rest of the scope goes live too: never a mix of the cassette's state and the service's."""
        if self.replay:
            return self._call(op, request, live, f"scope {dict(scope)}")[0]
        name, key = scope_key(scope), self._key(op, request)
        with self._scope_lock(name):
            if name in self._live_scopes or self.cassette.get(key) is None:
                self._redo(name)
                self._live_scopes.add(name)
                return self._live(op, key, request, live)[0]
            self._skipped.setdefault(name, []).append((op, request, live, key))
            return self._call(op, request, live, f"scope {dict(scope)}")[0]

    def _redo(self, name: str) -> None:
        """Do live, in order, what of the scope was answered from the cassette (caller holds its lock)."""
        for op, request, live, key in self._skipped.pop(name, []):
            self._live(op, key, request, live)

    def _ensure_held(self, scope: Mapping[str, str]) -> None:
        """Before a search of `scope` goes live: the service holds what the cassette says was ingested (the
        adapter's `count` reaches it), else the scope is reset, ingested and waited for again, live. A count
        is polled (a service may be indexing a scope it kept, e.g. memeval-serve after a restart) for as
        long as the recorded searchable wait took, thrice, and at least VERIFY_MIN_S."""
        name = scope_key(scope)
        with self._scope_lock(name):
            skipped = self._skipped.get(name)
            if not skipped:
                return
            ingested = [request["n"] for op, request, _, _ in skipped if op == "ingest"]
            count = getattr(self.system, "count", None)
            if ingested and callable(count):
                self._check_once()
                waited = [
                    float(self.cassette.get(key)["response"]) for op, _, _, key in skipped if op == "wait"
                ]
                deadline = time.monotonic() + max(VERIFY_MIN_S, 3 * max(waited, default=0.0))
                while (held := count(scope)) != ingested[-1]:
                    if not isinstance(held, int) or held > ingested[-1] or time.monotonic() > deadline:
                        break
                    time.sleep(VERIFY_POLL_S)
                else:
                    del self._skipped[name]
                    self._tally("verified_by_count")
                    return
            self._redo(name)
            self._live_scopes.add(name)
            self._tally("reingested")

    def _tally(self, name: str) -> None:
        with self._lock:
            self.scopes[name] += 1

    def reset(self, scope: Mapping[str, str]) -> None:
        self._scope_call(scope, "reset", {"scope": dict(scope)}, lambda: self.system.reset(scope))

    def ingest(self, scope: Mapping[str, str], memories: Sequence[Memory]) -> None:
        request = {"scope": dict(scope), "n": len(memories), "memories_sha256": memories_digest(memories)}
        self._scope_call(scope, "ingest", request, lambda: self.system.ingest(scope, memories))

    def wait_until_searchable(self, scope: Mapping[str, str], memories: Sequence[Memory]) -> float:
        request = {"scope": dict(scope), "n": len(memories)}
        live = lambda: self.system.wait_until_searchable(scope, memories)  # noqa: E731
        return float(self._scope_call(scope, "wait", request, live))

    def search_timed(self, request: SearchRequest) -> tuple[list[Hit], float, bool]:
        """(hits, the service's latency in ms, whether it was recorded: answered from the cassette)."""
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

        key = self._key("search", recorded)
        if not self.replay and self.cassette.get(key) is None:
            self._ensure_held(request.scope)
        hits, elapsed, from_cassette = self._call("search", recorded, live, f"query {request.query_id}")
        return [Hit(h["id"], h["score"], h["text"]) for h in hits], elapsed, from_cassette

    def search(self, request: SearchRequest) -> list[Hit]:
        return self.search_timed(request)[0]

    def recorded_latency_ms(self) -> list[float]:
        """The wall latency of every search as recorded (what a replay stands in for)."""
        return [e["elapsed_ms"] for e in self.cassette.entries.values() if e["op"] == "search"]

    def close(self) -> None:
        if not self.replay:
            self.system.close()
