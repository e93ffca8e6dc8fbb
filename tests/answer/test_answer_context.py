"""The answerer's context: each mode's memories, and the window cut from the bottom of the ranking."""

from __future__ import annotations

from types import MappingProxyType

import numpy as np

from experiments.answer.context import Contexts, fit_window
from experiments.suites.suite import Suite
from retrieval.pipeline import RunOutput
from retrieval.types import Corpus, Memory, Query, RankedList


def _memory(i: int, scope: str) -> Memory:
    return Memory(
        id=f"{scope}:m{i}", text=f"memory number {i} " * 5, scope=MappingProxyType({"conversation": scope})
    )


def _setup():
    memories = tuple(_memory(i, s) for s in ("a", "b") for i in range(8))
    query = Query(id="a:q", text="?", scope=MappingProxyType({"conversation": "a"}), answer="x")
    suite = Suite("t", memories, (query,), {"a:q": {"a:m5": 1, "a:m2": 1}}, k=3)
    ranked = RankedList("a:q", ("a:m5", "a:m7", "a:m1", "a:m0"), np.zeros(4), {}, {})
    output = RunOutput([ranked], Corpus(memories), {}, False, "")
    return Contexts(suite, output, k=3, seed=0), query


def test_each_mode_takes_its_memories_from_the_querys_own_scope():
    contexts, query = _setup()
    assert [m.id for m in contexts.memories(query, "retrieved")] == ["a:m5", "a:m7", "a:m1"]
    assert [m.id for m in contexts.memories(query, "gold")] == ["a:m2", "a:m5"]
    drawn = contexts.memories(query, "random")
    assert len(drawn) == 3 and all(m.scope["conversation"] == "a" for m in drawn)
    assert [m.id for m in drawn] == [m.id for m in contexts.memories(query, "random")]  # seeded
    assert contexts.memories(query, "none") == []
    assert contexts.evidence_share(query, contexts.memories(query, "retrieved")) == "some"
    assert contexts.evidence_share(query, contexts.memories(query, "gold")) == "all"


def test_a_context_over_the_window_loses_memories_from_the_bottom_and_says_how_many():
    contexts, query = _setup()
    memories = contexts.memories(query, "retrieved")

    def build(ms):
        return [{"role": "user", "content": "\n".join(m.text for m in ms) + "\nQuestion: ?"}]

    whole = len(build(memories)[0]["content"])
    messages, dropped = fit_window(memories, build, window_tokens=None, max_tokens=10, chars_per_token=1.0)
    assert dropped == 0 and messages == build(memories)
    one_less = len(build(memories[:2])[0]["content"])
    messages, dropped = fit_window(
        memories, build, window_tokens=one_less + 10, max_tokens=10, chars_per_token=1.0
    )
    assert dropped == 1 and messages == build(memories[:2]) and whole + 10 > one_less + 10
