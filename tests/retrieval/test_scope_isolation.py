"""Scope isolation cannot be bypassed by crafted scope values, and the leak counter catches a real leak.

Two users whose scopes a `k=v|k=v` join would merge: `{"user": "1|workspace=2"}` and
`{"user": "1", "workspace": "2"}`. The partition key (retrieval.types.scope_key) must keep them apart, and
the leak counter (experiments.evaluate.table.scope_leaks), which shares no code with it, must count a memory
of the other user that a test-only rank stage injects on purpose.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import pytest

from experiments.evaluate.table import evaluate, scope_leaks
from experiments.suites.jsonl import load_suite, save_suite
from experiments.suites.suite import Suite
from retrieval.pipeline import Pipeline
from retrieval.retrievers.bm25 import BM25Retriever
from retrieval.stage import RankStage
from retrieval.types import Candidates, Memory, Query, scope_key

ALICE = {"user": "1|workspace=2"}
BOB = {"user": "1", "workspace": "2"}


def collision_suite() -> Suite:
    """Alice asks for "my password": only Bob ever wrote one down. A merged scope would hand it to her."""
    alice = MappingProxyType(ALICE)
    bob = MappingProxyType(BOB)
    memories = [
        Memory(id="alice:0", text="the deploy script runs every night at two", scope=alice),
        Memory(id="alice:1", text="the bank opens at nine on friday", scope=alice),
        Memory(id="alice:2", text="lunch with the design team", scope=alice),
        Memory(id="bob:0", text="my password for the bank is hunter2", scope=bob),
        Memory(id="bob:1", text="the password manager is installed", scope=bob),
        Memory(id="bob:2", text="the gym is closed on sunday", scope=bob),
    ]
    queries = [
        Query(id="alice:q", text="what is my password for the bank", scope=alice),
        Query(id="bob:q", text="what is my password for the bank", scope=bob),
    ]
    qrels = {"bob:q": {"bob:0": 1}}
    return Suite(name="collision", memories=tuple(memories), queries=tuple(queries), qrels=qrels)


@pytest.mark.parametrize(
    "first, second",
    [
        (ALICE, BOB),
        ({"a": "1=2"}, {"a=1": "2"}),
        ({"a": "x", "b": "y"}, {"a": 'x"],["b","y'}),
        ({"a": "1", "b": ""}, {"a": "1"}),
    ],
)
def test_scope_key_is_injective_on_crafted_values(first, second):
    assert scope_key(first) != scope_key(second)
    assert scope_key(dict(reversed(list(first.items())))) == scope_key(first)  # order-free


def test_a_scope_collision_suite_gives_no_cross_scope_result(tmp_path):
    suite = load_suite(save_suite(collision_suite(), tmp_path / "collision"))  # the loader keeps them apart
    assert suite.summary()["scopes"] == 2
    output = Pipeline((BM25Retriever(),), depth=100).run(suite.memories, suite.queries, progress=False)
    ranked = {r.query_id: r.memory_ids for r in output.ranked}
    assert ranked["alice:q"] == ("alice:1",)  # her own memory only; Bob's password never
    assert ranked["bob:q"][0] == "bob:0"
    evaluation = evaluate(suite, output, ["P@5"])
    assert evaluation.metrics["scope_leaks"] == 0
    assert evaluation.per_query["scope_leaks"].tolist() == [0, 0]


@dataclass(frozen=True, kw_only=True)
class InjectMemory(RankStage):
    """Test only: puts one named memory first in every query's list, whatever its scope (a leak)."""

    name = "inject_memory"
    memory_id: str = ""

    def __call__(self, query, candidates: Candidates) -> Candidates:
        where = int(np.flatnonzero(candidates.corpus.ids == self.memory_id)[0])
        if where in candidates.index:
            return candidates
        top = float(candidates.score.max()) + 1.0 if len(candidates) else 1.0
        columns = {
            name: np.concatenate([np.full(1, top, dtype=values.dtype), values])
            for name, values in candidates.columns.items()
        }
        return Candidates(candidates.corpus, np.concatenate([[where], candidates.index]), columns)


def test_the_leak_counter_catches_a_deliberate_leak_between_colliding_scopes():
    suite = collision_suite()
    output = Pipeline((BM25Retriever(), InjectMemory(memory_id="bob:0")), depth=100).run(
        suite.memories, suite.queries, progress=False
    )
    ranked = {r.query_id: r.memory_ids for r in output.ranked}
    assert ranked["alice:q"][0] == "bob:0"  # the stage really leaked Bob's memory to Alice
    leaks = scope_leaks(suite, output)
    assert leaks.to_dict() == {"alice:q": 1, "bob:q": 0}
    evaluation = evaluate(suite, output, ["P@5"])
    assert evaluation.metrics["scope_leaks"] == 1
    assert evaluation.per_query.loc["alice:q", "scope_leaks"] == 1


def test_the_leak_counter_does_not_share_the_partition_encoding():
    source = inspect.getsource(scope_leaks)
    assert "scope_key" not in source.split('"""')[-1]  # compares scope mappings, not their encoding


def test_the_graph_and_feedback_channels_never_reach_another_scopes_knowledge():
    """Bob's concept graph and feedback name his password memory; Alice's query matches their words
    exactly. Neither channel, nor the graph expansion, may hand her anything of Bob's."""
    from retrieval.fusions.rrf import RRFFusion
    from retrieval.retrievers.feedback import FeedbackRetriever
    from retrieval.retrievers.graph import GraphRetriever
    from retrieval.stages.graph_build import GraphBuild
    from retrieval.stages.graph_expand import GraphExpand
    from retrieval.types import Concept, Feedback, Knowledge, Relation

    suite = collision_suite()
    bob = MappingProxyType(BOB)
    knowledge = Knowledge(
        concepts=(
            Concept("bob:pw", "password bank", bob, memory_ids=("bob:0",)),
            Concept("bob:mgr", "password manager", bob, memory_ids=("bob:1",)),
        ),
        relations=(Relation("bob:pw", "bob:mgr", "related_to"),),
        feedback=(Feedback("bob:f", "password bank", "hunter1", "hunter2", bob, memory_ids=("bob:0",)),),
    )
    suite = Suite(suite.name, suite.memories, suite.queries, suite.qrels, knowledge=knowledge)
    stages = (
        GraphBuild(max_df=1.0, min_df=1),
        BM25Retriever(),
        GraphRetriever(),
        FeedbackRetriever(),
        RRFFusion(),
        GraphExpand(),
    )
    output = Pipeline(stages, depth=100).run(
        suite.memories, suite.queries, progress=False, knowledge=knowledge
    )
    ranked = {r.query_id: r.memory_ids for r in output.ranked}
    assert not any(m.startswith("bob:") for m in ranked["alice:q"])
    assert ranked["bob:q"][0] == "bob:0"
    assert evaluate(suite, output, ["P@5"]).metrics["scope_leaks"] == 0
