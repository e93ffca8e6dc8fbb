"""Never silent for long: with the bars off (`progress=false`), one line on stderr every few seconds
saying where the run is, e.g. `[memeval 2m30s] search 2,048/5,120 (40%) scope 3/10 ETA 3m45s`.

The pipeline and the encoder tell their phases through a callback (retrieval/progress.py); the run
tells its own (load suite, metrics, write, MLflow). A background thread prints the latest phase once
`every_s` seconds have passed since the last line, so a phase that reports nothing for minutes (loading a
model, a bootstrap, an upload) still shows, and a short run prints nothing at all. With the bars on
(`progress=true`) no line is printed here (the bars say it) but for the phases no bar covers (`UNBARRED`:
a live service ingesting or indexing). A phase over units (texts, queries) has an
ETA (the units left at the rate so far in this phase) and, over queries, the scope (conversation) the
current one is in.

Either way the callback clocks each phase (wall seconds, summed when a phase comes back): metrics.json's
`timings` section (experiments/run/resources.py), and, after a run that lasted at least one interval, a
summary on stderr of where the time went (phase, seconds, share).

The interval is MEMEVAL_PROGRESS_EVERY_S (seconds, default 20: a line at least every 30 s with room for a
loaded machine). It is an environment variable, not a config key, because it changes no number: it is not
in the config hash, the params or the resume key.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TextIO

from experiments.configure.check import ConfigError
from retrieval.progress import UNBARRED

ENV = "MEMEVAL_PROGRESS_EVERY_S"
DEFAULT_EVERY_S = 20.0


class PhaseLines:
    """A phase callback (name, done, total, scope) that a thread prints as one line every `every_s` seconds
    (none when `quiet`: the bars are on), clocking every phase."""

    def __init__(
        self, every_s: float | None = None, stream: TextIO | None = None, quiet: bool = False
    ) -> None:
        self.every_s = every_s_from_env() if every_s is None else every_s
        self.stream = stream if stream is not None else sys.stderr
        self.quiet = quiet
        self._start = time.monotonic()
        self._last = self._start
        # (name, done, total, scope, when the phase began, its `done` then): one tuple, so the thread reads a
        # whole one. A phase may start part-way (rank stage 2 of 2 starts at 1 x the queries).
        self._phase: tuple[str, int | None, int | None, tuple[int, int] | None, float, int] = (
            "start", None, None, None, self._start, 0,
        )  # fmt: skip
        self._spent: dict[str, float] = {}  # seconds of each phase already left
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __call__(
        self,
        name: str,
        done: int | None = None,
        total: int | None = None,
        scope: tuple[int, int] | None = None,
    ) -> None:
        began, first = self._phase[4], self._phase[5]
        if name != self._phase[0]:
            now = time.monotonic()
            self._spent[self._phase[0]] = self._spent.get(self._phase[0], 0.0) + now - began
            began, first = now, done or 0
        self._phase = (name, done, total, scope, began, first)

    def line(self) -> str:
        name, done, total, scope, began, first = self._phase
        now = time.monotonic()
        where = name
        if done is not None and total:
            where += f" {done:,}/{total:,} ({100 * done // total}%)"
        if scope is not None:
            where += f" scope {scope[0]}/{scope[1]}"
        if done and total and done > first and now > began:  # the units left at this phase's rate so far
            where += f" ETA {_clock((total - done) * (now - began) / (done - first))}"
        return f"[memeval {_clock(now - self._start)}] {where}"

    def timings(self) -> dict[str, float]:
        """Wall seconds of each phase so far, in the order they first came (the current one up to now)."""
        spent = dict(self._spent)
        name, began = self._phase[0], self._phase[4]
        spent[name] = spent.get(name, 0.0) + time.monotonic() - began
        return spent

    def summary(self) -> str:
        """Where the time went: one line per phase, its wall seconds and share of the whole, longest first."""
        spent = self.timings()
        whole = sum(spent.values()) or 1.0
        width = max(map(len, spent))
        rows = [f"{name.ljust(width)}  {s:9.1f} s  {100 * s / whole:5.1f}%" for name, s in
                sorted(spent.items(), key=lambda item: -item[1])]  # fmt: skip
        return "\n".join([f"[memeval] where the time went ({_clock(whole)} in all):", *rows])

    def __enter__(self) -> PhaseLines:
        # quiet or not: a phase no bar covers (UNBARRED) is printed either way
        self._thread = threading.Thread(target=self._tick, name="memeval-phase-lines", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, failed: type[BaseException] | None, *_exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        # a short run prints nothing; a failed one leaves its error as the last word
        if failed is None and time.monotonic() - self._start >= self.every_s:
            print(self.summary(), file=self.stream, flush=True)

    def _tick(self) -> None:
        # Wakes a few times per interval, so a line is at most a fraction of it late.
        while not self._stop.wait(min(1.0, self.every_s / 4)):
            if self.quiet and self._phase[0] not in UNBARRED:
                continue
            if time.monotonic() - self._last >= self.every_s:
                print(self.line(), file=self.stream, flush=True)
                self._last = time.monotonic()


def _clock(seconds: float) -> str:
    """`2m30s`, `45s`, `1h02m`: whole seconds, as a person reads a duration."""
    whole = int(seconds)
    if whole >= 3600:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 60}m{whole % 60:02d}s" if whole >= 60 else f"{whole}s"


def every_s_from_env() -> float:
    """MEMEVAL_PROGRESS_EVERY_S as a positive number of seconds; a bad value is a ConfigError naming it."""
    text = os.environ.get(ENV, "").strip()
    if not text:
        return DEFAULT_EVERY_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise ConfigError([f"{ENV} (environment): expected a positive number of seconds, got {text!r}"])
    return value
