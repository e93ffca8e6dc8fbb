"""Counters of what talking to a live system cost: requests, errors, timeouts, retries, 429s.

An adapter may expose one as its `stats` attribute; `SystemRetriever` reads it into the run's `system`
section of metrics.json (outputs.py), so a flaky service shows in the numbers, never silently.
Thread-safe: the retriever asks the service from a pool of threads.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

COUNTERS = ("requests", "errors", "timeouts", "retries", "rate_limited")


@dataclass
class SystemStats:
    """Running counts; `snapshot()` is a plain dict, `since(before)` the counts added after `before`."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.counts[name] = self.counts.get(name, 0) + n

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)

    def since(self, before: dict[str, int]) -> dict[str, int]:
        now = self.snapshot()
        return {name: now[name] - before.get(name, 0) for name in now}
