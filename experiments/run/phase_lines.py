"""Never silent for long: with the bars off (`progress=false`), one line on stderr every few seconds
saying where the run is, e.g. `[memeval 2m30s] encode documents 2,048/5,120 (40%)`.

The pipeline and the encoder tell their phases through a callback (retrieval/progress.py); the run
tells its own (load suite, metrics, write, MLflow). A background thread prints the latest phase once
`every_s` seconds have passed since the last line, so a phase that reports nothing for minutes (loading a
model, a bootstrap, an upload) still shows, and a short run prints nothing at all. With the bars on
(`progress=true`) nothing is printed here: the bars say it.

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

from experiments.run.config_check import ConfigError

ENV = "MEMEVAL_PROGRESS_EVERY_S"
DEFAULT_EVERY_S = 20.0


class PhaseLines:
    """A phase callback (name, done, total) that a thread prints as one line every `every_s` seconds."""

    def __init__(self, every_s: float | None = None, stream: TextIO | None = None) -> None:
        self.every_s = every_s_from_env() if every_s is None else every_s
        self.stream = stream if stream is not None else sys.stderr
        self._start = time.monotonic()
        self._last = self._start
        self._phase: tuple[str, int | None, int | None] = ("start", None, None)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __call__(self, name: str, done: int | None = None, total: int | None = None) -> None:
        self._phase = (name, done, total)  # one tuple assignment: the thread reads a whole one

    def line(self) -> str:
        name, done, total = self._phase
        elapsed = int(time.monotonic() - self._start)
        clock = f"{elapsed // 60}m{elapsed % 60:02d}s" if elapsed >= 60 else f"{elapsed}s"
        where = name
        if done is not None and total:
            where += f" {done:,}/{total:,} ({100 * done // total}%)"
        return f"[memeval {clock}] {where}"

    def __enter__(self) -> PhaseLines:
        self._thread = threading.Thread(target=self._tick, name="memeval-phase-lines", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _tick(self) -> None:
        # Wakes a few times per interval, so a line is at most a fraction of it late.
        while not self._stop.wait(min(1.0, self.every_s / 4)):
            if time.monotonic() - self._last >= self.every_s:
                print(self.line(), file=self.stream, flush=True)
                self._last = time.monotonic()


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


def silent(name: str, done: int | None = None, total: int | None = None) -> None:
    """The phase callback of a run whose bars are on: they say where it is."""
