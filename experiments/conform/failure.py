"""Failure behaviour: an answer within the timeout (or a loud failure), no stranger's memories for a scope
never written, and isolation and counts kept under 4 concurrent clients."""

from __future__ import annotations

import threading

from experiments.conform.check import Check, Outcome, failed, passed
from experiments.conform.isolation import at_once, scoped_memories
from experiments.conform.probe import Probe

CLIENTS = 4


def timeout_s(probe: Probe) -> float:
    """The adapter's own request bound (`timeout_s`), else conform.timeout_s."""
    own = getattr(probe.system, "timeout_s", None)
    return float(own) if isinstance(own, int | float) else probe.settings.timeout_s


class FailureAnswersWithinTimeout(Check):
    """Ten searches each answer within the adapter's timeout, or fail loudly: never a late or an empty
    answer where the memory is held."""

    def run(self, probe: Probe) -> Outcome:
        scope = probe.scope({"user": "timed"})
        memories = [probe.memory(scope, f"m{j}", f"{probe.token(f'm{j}')} timed note {j}") for j in range(5)]
        probe.store(scope, memories)
        bound_ms, slow, silent, loud = timeout_s(probe) * 1000, [], [], []
        for n in range(10):
            memory = memories[n % len(memories)]
            asked = probe.search(scope, probe.token_of(memory), 10, step=f"ask.{n}", must=False)
            if asked.error is not None:
                loud.append(asked.step)
            elif asked.elapsed_ms > bound_ms:
                slow.append(f"{asked.step}: {asked.elapsed_ms:.0f} ms")
            elif memory.id not in asked.ids:
                silent.append(f"{asked.step}: {asked.ids}")
        timings = {"bound_ms": bound_ms}
        if slow or silent:
            return failed(
                f"answers past the {bound_ms:.0f} ms bound: {slow}; answers without the held memory: "
                f"{silent}",
                timings=timings,
            )
        return passed(
            f"{10 - len(loud)} answered within {bound_ms:.0f} ms, {len(loud)} failed loudly", timings=timings
        )


class FailureUnknownScopeEmpty(Check):
    """A search in a scope never written answers with nothing (not another scope's memories, not an
    error that reads as a crash)."""

    def run(self, probe: Probe) -> Outcome:
        written = probe.scope({"user": "written"})
        memories = [
            *probe.fillers(written, 3),
            probe.memory(written, "m0", f"{probe.token('m0')} {probe.token('bait')} a note"),
        ]
        probe.store(written, memories)
        found = probe.search(
            probe.scope({"user": "never-written"}), probe.token("bait"), 10, step="ask", must=False
        )
        if found.error is not None:
            return failed(f"a search of an unknown scope failed ({found.step}): {found.error}")
        if found.ids:
            return failed(f"a scope never written answered {found.ids} ({found.step})")
        return passed("a scope never written answers with nothing")


class FailureConcurrentClients(Check):
    """Four clients at once, each with its own scope (reset, ingest, search, count), keep isolation and
    counts."""

    def run(self, probe: Probe) -> Outcome:
        scopes = [probe.scope({"user": f"client{c}"}) for c in range(CLIENTS)]
        stored = scoped_memories(probe, scopes)
        problems: list[str] = []
        lock = threading.Lock()

        def client(c: int) -> None:
            probe.store(scopes[c], stored[c], step=f"c{c}.store")
            own = {m.id for m in stored[c]}
            for n in range(3):
                found = probe.search(scopes[c], probe.token("shared"), 10, step=f"c{c}.ask.{n}")
                foreign, missing = set(found.ids) - own, {stored[c][0].id} - set(found.ids)
                if foreign or missing:
                    with lock:
                        problems.append(f"{found.step}: foreign {sorted(foreign)}, missing {sorted(missing)}")
            counted = probe.count(scopes[c], step=f"c{c}.count")
            if counted.value not in (None, len(own)):
                with lock:
                    problems.append(f"{counted.step}: count {counted.value}, not {len(own)}")

        at_once(client, CLIENTS)
        if problems:
            return failed(
                f"under {CLIENTS} concurrent clients: " + "; ".join(sorted(problems)[:4]),
                problems=sorted(problems),
            )
        return passed(f"{CLIENTS} concurrent clients each saw exactly their own memories")
