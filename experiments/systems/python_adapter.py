"""A user's own Python class as the memory system (`system=python`): each of its calls bounded and checked.

The harness's own adapters (this package) report every fault as a LiveSystemError; a user's class is
code the harness does not know, so `SystemRetriever` calls it through `GuardedSystem`:

- each call (reset, ingest, wait_until_searchable, search, count, check_available, close) runs in a thread
  of its own, bounded by `system.call_timeout_s`: past it the run stops (exit 2) naming the call and the
  query or scope. Python cannot stop a thread, so the hung call is left behind (a daemon thread: it ends
  with the process, never holds the run);
- whatever a call raises (an exception, `sys.exit()`'s SystemExit) is a LiveSystemError naming the
  class, the call, the query or scope, and the line of the class that raised; a LiveSystemError the
  class raises itself keeps its own message (docs/live_systems.md, "Faults");
- `search` answers a list (or tuple) of `Hit`, each with an id that is a non-empty str or an int, a score
  that is a number or None, a text that is a str or None; anything else (None, a dict, strings, a
  generator, `Hit(id=None)`) is a LiveSystemError naming the query and what came back.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from experiments.systems.protocol import Hit, LiveSystemError, SearchRequest
from experiments.systems.secrets import quote
from retrieval.types import Memory

HARNESS_PACKAGE = "experiments.systems."


def guarded(system: Any, timeout_s: float) -> Any:
    """`system` as the run calls it: a class of the harness's own as it is, any other in a GuardedSystem."""
    if type(system).__module__.startswith(HARNESS_PACKAGE):
        return system
    return GuardedSystem(system, timeout_s)


class GuardedSystem:
    """A user's adapter whose every call is bounded by `timeout_s` and whose faults and answers are checked
    (module docstring). Optional calls (`count`, `check_available`) exist here only where the class has
    them, so the harness's `getattr(..., None)` still tells."""

    def __init__(self, system: Any, timeout_s: float):
        self.system = system
        self.timeout_s = timeout_s
        self.name = f"{type(system).__module__}.{type(system).__qualname__}"
        self.hung: str | None = None  # the call left running past the bound, if any
        self.stats = getattr(system, "stats", None)
        if callable(getattr(system, "count", None)):
            self.count = lambda scope: self._call("count", f"scope {dict(scope)}", system.count, scope)
        if callable(getattr(system, "check_available", None)):
            self.check_available = lambda: self._call("check_available", "at start", system.check_available)

    def _call(self, call: str, where: str, function: Callable[..., Any], *args: Any) -> Any:
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["value"] = function(*args)
            except BaseException as err:  # noqa: BLE001 (SystemExit too: a call never ends the run)
                outcome["error"] = err

        thread = threading.Thread(target=run, name=f"python-adapter-{call}", daemon=True)
        thread.start()
        thread.join(self.timeout_s)
        if thread.is_alive():
            self.hung = f"{call} ({where})"
            raise LiveSystemError(
                f"python adapter {self.name}: {call} ({where}) gave no answer within {self.timeout_s:g} s "
                "(system.call_timeout_s); the run stops, the call is left behind"
            )
        err = outcome.get("error")
        if err is None:
            return outcome.get("value")
        if isinstance(err, LiveSystemError):
            raise err
        frames = traceback.extract_tb(err.__traceback__)
        at = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        raise LiveSystemError(
            f"python adapter {self.name}: {call} ({where}) raised {type(err).__name__}"
            f"{': ' + quote(str(err), 300) if str(err) else ''}{at}"
        )

    def reset(self, scope: Mapping[str, str]) -> None:
        self._call("reset", f"scope {dict(scope)}", self.system.reset, scope)

    def ingest(self, scope: Mapping[str, str], memories: Sequence[Memory]) -> None:
        self._call("ingest", f"scope {dict(scope)}", self.system.ingest, scope, memories)

    def wait_until_searchable(self, scope: Mapping[str, str], memories: Sequence[Memory]) -> float:
        where = f"scope {dict(scope)}"
        waited = self._call(
            "wait_until_searchable", where, self.system.wait_until_searchable, scope, memories
        )
        return 0.0 if waited is None else waited

    def search(self, request: SearchRequest) -> list[Hit]:
        where = f"query {request.query_id}"
        answer = self._call("search", where, self.system.search, request)
        return checked_hits(answer, f"{self.name}: search ({where})")

    def close(self) -> None:
        if self.hung:  # it may hold what close needs: not asked, not waited for again
            raise LiveSystemError(
                f"python adapter {self.name}: close not called, {self.hung} is still running"
            )
        self._call("close", "at the end of the run", self.system.close)


def checked_hits(answer: Any, where: str) -> list[Hit]:
    """A search's answer as a list of Hit, or a LiveSystemError naming `where` and what came back."""
    if not isinstance(answer, (list, tuple)):
        raise LiveSystemError(f"python adapter {where} returned {_described(answer)}, not a list of Hit")
    for i, hit in enumerate(answer):
        problem = None
        if not isinstance(hit, Hit):
            problem = f"is {_described(hit)}, not a Hit (experiments.systems.protocol.Hit)"
        elif isinstance(hit.id, bool) or not isinstance(hit.id, (str, int)) or hit.id == "":
            problem = f"has id {_described(hit.id)}; an id is the suite's Memory.id, a str or an int"
        elif hit.score is not None and (
            isinstance(hit.score, bool) or not isinstance(hit.score, int | float)
        ):
            problem = f"has score {_described(hit.score)}; a score is a number or None"
        elif hit.text is not None and not isinstance(hit.text, str):
            problem = f"has text {_described(hit.text)}; a text is a str or None"
        if problem:
            raise LiveSystemError(f"python adapter {where}: result {i} {problem}")
    return list(answer)


def _described(value: Any) -> str:
    """A value's kind and a short, redacted repr of it (never a huge one)."""
    if value is None:
        return "None"
    return f"{type(value).__name__} {quote(repr(value), 80)}"
