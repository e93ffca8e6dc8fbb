"""Which memories the answerer reads for a query (`answer.context`), and the cut to the model's window.

- `retrieved`: the run's top `answer.k` for the query, in rank order (what the system under test gives
  an agent);
- `gold`: the query's relevant memories (qrels grade > 0), in the suite's order: the reader's ceiling;
- `random`: `answer.k` memories drawn from the query's own scope, seeded by (seed, query id): the floor;
- `none`: nothing: what the model answers from its own knowledge.

The window cut (`answer.window_tokens`): the prompt's size is estimated at `chars_per_token` characters a
token (3 is on the safe side for English under llama-family tokenizers), and while it and `max_tokens`
would not fit, the lowest-ranked memory is dropped. The count of memories dropped and of queries cut is
in metrics.json (never silent).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from experiments.suites.suite import Suite
from retrieval.pipeline import RunOutput
from retrieval.types import Memory, Query


class Contexts:
    """The memories of each context mode for the queries of one run."""

    def __init__(self, suite: Suite, output: RunOutput, k: int, seed: int):
        self.k = k
        self.seed = seed
        self.qrels = suite.qrels
        self.ranked = {r.query_id: r.memory_ids for r in output.ranked}
        self.by_id: dict[str, Memory] = {m.id: m for m in suite.memories}
        self.by_id.update({m.id: m for m in output.corpus.memories if m.id not in self.by_id})
        self.by_scope: dict[str, list[Memory]] = {}
        for memory in suite.memories:
            if not memory.deleted:
                self.by_scope.setdefault(memory.scope_key, []).append(memory)

    def memories(self, query: Query, mode: str) -> list[Memory]:
        if mode == "retrieved":
            return [self.by_id[i] for i in self.ranked.get(query.id, ())[: self.k] if i in self.by_id]
        if mode == "gold":
            relevant = {m for m, grade in self.qrels.get(query.id, {}).items() if grade > 0}
            return [m for m in self.by_scope.get(query.scope_key, ()) if m.id in relevant]
        if mode == "random":
            pool = self.by_scope.get(query.scope_key, [])
            digest = hashlib.sha256(f"{self.seed}\x00{query.id}".encode()).digest()
            rng = np.random.default_rng(int.from_bytes(digest[:8], "big"))
            picked = rng.choice(len(pool), size=min(self.k, len(pool)), replace=False) if pool else []
            return [pool[i] for i in picked]
        return []

    def evidence_share(self, query: Query, memories: Sequence[Memory]) -> str | None:
        """`all`, `some` or `none` of the query's evidence in `memories`; None for a query with none."""
        relevant = {m for m, grade in self.qrels.get(query.id, {}).items() if grade > 0}
        if not relevant:
            return None
        held = len(relevant & {m.id for m in memories})
        return "all" if held == len(relevant) else "some" if held else "none"


def fit_window(
    memories: list[Memory],
    build: Callable[[list[Memory]], list[Mapping[str, str]]],
    *,
    window_tokens: int | None,
    max_tokens: int,
    chars_per_token: float,
) -> tuple[list[Mapping[str, str]], int]:
    """The messages for the longest prefix of `memories` that fits the window, and how many were dropped."""
    messages = build(memories)
    if window_tokens is None:
        return messages, 0
    kept = len(memories)
    while kept > 0 and _estimate(messages, chars_per_token) + max_tokens > window_tokens:
        kept -= 1
        messages = build(memories[:kept])
    return messages, len(memories) - kept


def _estimate(messages: Sequence[Mapping[str, str]], chars_per_token: float) -> float:
    return sum(len(m.get("content", "")) for m in messages) / chars_per_token
