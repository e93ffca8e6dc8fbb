"""Where a run is, told to whoever shows it: the pipeline's phases and the encoder's batches.

Stages never print. The harness passes a callback to `Pipeline.run(on_phase=...)`
(experiments/run/phase_lines.py prints it as a line every few seconds when the bars are off); the
pipeline installs it here for the length of the run, so a component deep inside a stage (the encoder,
called by the dense retriever's `build`) can say `phase("encode documents", 1024, 5120)` without every
stage's signature carrying the callback. With no callback installed, `phase` does nothing. A phase over
queries also says which scope (conversation) the current one is in, `(k, n)`: the k-th of the n scopes in
the order the queries come (`scope_places`); an index built scope by scope says which scope it is at
(`by_scope`).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextvars import ContextVar

# (phase, done, total, scope): `done`/`total` are counts of that phase's units (texts, queries), or None;
# `scope` is (k, n), the current unit's scope among n, or None.
PhaseCallback = Callable[[str, "int | None", "int | None", "tuple[int, int] | None"], None]

# A live service loading the suite (experiments/systems/retriever.py): memories done of all, scope k of n.
# No progress bar covers these phases (the work is the service's), so their lines show with the bars on.
SERVICE_INGEST = "service ingest"
SERVICE_INDEX = "service index (wait until searchable)"
UNBARRED = (SERVICE_INGEST, SERVICE_INDEX)

_current: ContextVar[PhaseCallback | None] = ContextVar("memeval_phase_callback", default=None)
_named: ContextVar[str | None] = ContextVar("memeval_phase_name", default=None)  # the phase told last


def phase(
    name: str, done: int | None = None, total: int | None = None, scope: tuple[int, int] | None = None
) -> None:
    """Tell the installed callback (if any) that the run is in `name`, `done` of `total` units along, in
    scope k of n (`scope`)."""
    callback = _current.get()
    if callback is not None:
        _named.set(name)
        callback(name, done, total, scope)


def by_scope(keys: Iterable[str]) -> Iterator[str]:
    """The scope keys, telling the current phase (whatever named it: the pipeline's `index bm25`) that it
    is at scope k of n before each, so an index built scope by scope has an ETA."""
    keys = list(keys)
    name, total = _named.get(), len(keys)
    for done, key in enumerate(keys):
        if name is not None:
            phase(name, done, total, (done + 1, total))
        yield key


def scope_places(scope_keys: Sequence[str]) -> list[tuple[int, int]]:
    """(k, n) for each unit: its scope is the k-th (1-based) of the n distinct ones, in order of coming."""
    place: dict[str, int] = {}
    for key in scope_keys:
        place.setdefault(key, len(place) + 1)
    return [(place[key], len(place)) for key in scope_keys]


def reporting_to(callback: PhaseCallback | None) -> contextlib.AbstractContextManager[None]:
    """Install `callback` for the code run inside the block (None: keep whatever is installed)."""
    return _installed(callback) if callback is not None else contextlib.nullcontext()


@contextlib.contextmanager
def _installed(callback: PhaseCallback) -> Iterator[None]:
    token, named = _current.set(callback), _named.set(None)
    try:
        yield
    finally:
        _current.reset(token)
        _named.reset(named)


@contextlib.contextmanager
def library_bars(show: bool) -> Iterator[None]:
    """Hugging Face's own progress bars (transformers' "Loading weights" when a model loads) follow the
    run's `progress` setting for the length of the block: off when `show` is false, as they were after.
    Before transformers is imported (a run with no model: ~0.8 s of CPU to import it), the switch is
    huggingface_hub's, which transformers reads when it is imported."""
    if show:
        yield
        return
    if "transformers" not in sys.modules:
        yield from _hub_bars_off()
        return
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def _hub_bars_off() -> Iterator[None]:
    from huggingface_hub import utils as hub

    was_on = not hub.are_progress_bars_disabled()
    hub.disable_progress_bars()
    try:
        yield
    finally:
        if was_on:
            hub.enable_progress_bars()
            if "transformers" in sys.modules:  # imported in the block, its bars off: as they were before
                from transformers.utils import logging as hf_logging

                hf_logging.enable_progress_bar()
