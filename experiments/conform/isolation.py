"""Isolation: a query in one scope never returns another scope's memories.

Each check stores a few memories in each of several scopes that look alike, one of each scope holding a
made-up word the scopes share (each memory its own word too), then searches that shared word in every
scope: every id returned must be the scope's own, and the scope's own must come back (otherwise isolation
is not shown, only emptiness).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence

from experiments.conform.check import Check, Outcome, failed, passed
from experiments.conform.probe import OperationFailed, Probe
from retrieval.types import Memory

PER_SCOPE = 3


def scoped_memories(probe: Probe, scopes: Sequence[Mapping[str, str]]) -> list[list[Memory]]:
    """PER_SCOPE memories per scope, each text holding its own word; the first the check's shared word too
    (one memory of each scope: a word in most of a scope is no match for BM25, see Probe.fillers)."""
    shared = probe.token("shared")
    return [
        [
            probe.memory(
                scope, f"s{i}.m{j}", f"{probe.token(f's{i}.m{j}')} {shared * (j == 0)} note {j} of scope {i}"
            )
            for j in range(PER_SCOPE)
        ]
        for i, scope in enumerate(scopes)
    ]


def at_once(work: Callable[[int], None], count: int) -> None:
    """`work(0)` ... `work(count - 1)`, each in its own thread, all at once; the first OperationFailed
    any of them raised is raised here once all have ended."""
    errors: list[OperationFailed] = []

    def one(i: int) -> None:
        try:
            work(i)
        except OperationFailed as err:
            errors.append(err)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def judge_isolation(probe: Probe, scopes: Sequence[Mapping[str, str]], stored: list[list[Memory]]) -> Outcome:
    """Search the shared word in every scope: only the scope's own memories, and its one holding the word."""
    leaks, missing = [], []
    for i, (scope, memories) in enumerate(zip(scopes, stored, strict=True)):
        own = {m.id for m in memories}
        found = probe.search(scope, probe.token("shared"), 10, step=f"ask.s{i}")
        foreign = [m for m in found.ids if m not in own]
        if foreign:
            leaks.append(f"scope {dict(scope)} returned {foreign} ({found.step})")
        if memories[0].id not in found.ids:
            missing.append(f"scope {dict(scope)} did not return its own {memories[0].id!r} ({found.step})")
    if leaks:
        return failed("another scope's memories came back: " + "; ".join(leaks[:3]), leaks=leaks)
    if missing:
        return failed(
            "isolation not shown, a scope's own memory did not come back: " + "; ".join(missing[:3])
        )
    return passed(f"{len(scopes)} scopes, each answered with its own memories only")


class _ScopeShapes(Check):
    """Shared by the shape checks: store in every scope of `shapes`, then judge."""

    shapes: tuple[Mapping[str, str], ...] = ()

    def run(self, probe: Probe) -> Outcome:
        scopes = [probe.scope(shape) for shape in self.shapes]
        stored = scoped_memories(probe, scopes)
        for i, (scope, memories) in enumerate(zip(scopes, stored, strict=True)):
            probe.store(scope, memories, step=f"store.s{i}")
        return judge_isolation(probe, scopes, stored)


class IsolationSingleKey(_ScopeShapes):
    """Two users' scopes ({"user": "alice"}, {"user": "bob"}) stay apart."""

    shapes = ({"user": "alice"}, {"user": "bob"})


class IsolationLookAlikeValues(_ScopeShapes):
    """Scope values that differ by a prefix, case, a trailing space or a leading zero stay apart."""

    shapes = ({"user": "u1"}, {"user": "u10"}, {"user": "U1"}, {"user": "u1 "}, {"user": "u01"})


class IsolationMultiKey(_ScopeShapes):
    """Scopes of several keys are compared whole: {user, agent} pairs that share a user, and an encoding
    that a join of `k=v|k=v` would confuse ({"a": "1|b=2"} vs {"a": "1", "b": "2"}), stay apart."""

    shapes = (
        {"user": "1", "agent": "x"},
        {"user": "1", "agent": "y"},
        {"user": "2", "agent": "x"},
        {"a": "1|b=2"},
        {"a": "1", "b": "2"},
    )


class IsolationUnicodeValues(_ScopeShapes):
    """Unicode scope values stay apart, compared as sent: NFC vs NFD "café", upper case, CJK, an emoji."""

    shapes = (
        {"user": "caf\u00e9"},
        {"user": "cafe\u0301"},
        {"user": "CAF\u00c9"},
        {"user": "東京"},
        {"user": "🧠"},
    )


class IsolationSlashPercent(_ScopeShapes):
    """Scope values with `/`, `%`, `..` and their percent-encodings stay apart (a value is never decoded
    into another one, nor into a path)."""

    shapes = (
        {"user": "team/a"},
        {"user": "team%2Fa"},
        {"user": "team"},
        {"user": "a%"},
        {"user": "a%25"},
        {"user": "../team"},
    )


class IsolationConcurrentIngest(Check):
    """Two scopes ingested at the same time, from two threads in several batches, stay apart."""

    def run(self, probe: Probe) -> Outcome:
        scopes = [probe.scope({"user": "left"}), probe.scope({"user": "right"})]
        stored = scoped_memories(probe, scopes)
        if probe.declares("reset"):
            for i, scope in enumerate(scopes):
                probe.reset(scope, step=f"reset.s{i}")

        def ingest(i: int) -> None:
            for j, memory in enumerate(stored[i]):  # one memory a call: the two scopes interleave
                probe.ingest(scopes[i], [memory], step=f"ingest.s{i}.{j}")

        at_once(ingest, len(scopes))
        for i, (scope, memories) in enumerate(zip(scopes, stored, strict=True)):
            probe.wait(scope, memories, step=f"wait.s{i}")
            for memory in memories:
                probe.settle(scope, memory, probe.token_of(memory), step=f"settle.s{i}.{memory.id[-2:]}")
        return judge_isolation(probe, scopes, stored)
