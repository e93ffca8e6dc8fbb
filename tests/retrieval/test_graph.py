"""Concept graphs and feedback records: the suite format's rules, the BFS, the derived graph, and the
graph/feedback channels on the generated suite whose ground truth says what each must find."""

from __future__ import annotations

import json
from types import MappingProxyType

import pytest

from experiments.evaluate.table import evaluate
from experiments.suites.generators.graph_synth import graph_synth
from experiments.suites.jsonl import load_suite, save_suite
from experiments.suites.suite import SuiteError
from retrieval.concept_graph import ScopeGraph, expand
from retrieval.fusions.rrf import RRFFusion
from retrieval.pipeline import Pipeline
from retrieval.retrievers.bm25 import BM25Retriever
from retrieval.retrievers.feedback import FeedbackRetriever
from retrieval.retrievers.graph import GraphRetriever
from retrieval.stage import FieldError
from retrieval.stages.graph_build import GraphBuild
from retrieval.stages.graph_expand import GraphExpand
from retrieval.types import Memory

SCOPE = {"conversation": "c1"}


def _write(root, name, records):
    (root / name).write_text(
        "".join(json.dumps(r) + "\n" if isinstance(r, dict) else r + "\n" for r in records)
    )


@pytest.fixture
def suite_dir(tmp_path):
    root = tmp_path / "s"
    root.mkdir()
    _write(
        root,
        "memories.jsonl",
        [{"id": f"m{i}", "text": f"memory number {i}", "scope": SCOPE} for i in range(3)],
    )
    _write(root, "queries.jsonl", [{"id": "q", "text": "memory", "scope": SCOPE}])
    (root / "qrels.tsv").write_text("q 0 m0 1\n")
    _write(
        root,
        "concepts.jsonl",
        [
            {"id": "a", "name": "alpha", "scope": SCOPE, "memory_ids": ["m0"]},
            {"id": "b", "name": "beta", "scope": SCOPE, "memory_ids": ["m1"]},
        ],
    )
    _write(root, "relations.jsonl", [{"source": "a", "target": "b", "relation": "depends_on"}])
    _write(
        root,
        "feedback.jsonl",
        [
            {
                "id": "f",
                "topic": "t",
                "prediction": "p",
                "correction": "c",
                "scope": SCOPE,
                "memory_ids": ["m2"],
            }
        ],
    )
    return root


def test_a_valid_graph_suite_loads_round_trips_and_is_hashed(suite_dir, tmp_path):
    suite = load_suite(suite_dir)
    assert [c.id for c in suite.knowledge.concepts] == ["a", "b"]
    assert suite.knowledge.relations[0].relation == "depends_on"
    assert suite.knowledge.feedback[0].importance == 1.0
    again = load_suite(save_suite(suite, tmp_path / "copy"), name=suite.name)
    assert again.content_hash == suite.content_hash
    (suite_dir / "relations.jsonl").unlink()
    assert load_suite(suite_dir).content_hash != suite.content_hash  # the graph is part of the identity


BAD = {
    "self-loop": (
        "relations.jsonl",
        {"source": "a", "target": "a", "relation": "refines"},
        "relations.jsonl:2: target: a self-loop",
    ),
    "unknown relation type": (
        "relations.jsonl",
        {"source": "a", "target": "b", "relation": "likes"},
        "relations.jsonl:2: relation: must be one of part_of",
    ),
    "duplicate triple": (
        "relations.jsonl",
        {"source": "a", "target": "b", "relation": "depends_on"},
        "relations.jsonl:2: duplicate relation a b depends_on",
    ),
    "unknown concept": (
        "relations.jsonl",
        {"source": "a", "target": "zz", "relation": "refines"},
        "relations.jsonl:2: target: unknown concept 'zz'",
    ),
    "unknown memory": (
        "concepts.jsonl",
        {"id": "c", "name": "gamma", "scope": SCOPE, "memory_ids": ["nope"]},
        "concepts.jsonl:3: memory_ids: unknown memory 'nope'",
    ),
    "other scope": (
        "concepts.jsonl",
        {"id": "c", "name": "g", "scope": {"conversation": "c2"}, "memory_ids": ["m0"]},
        "concepts.jsonl:3: memory_ids: memory 'm0' is of another scope",
    ),
    "duplicate concept": (
        "concepts.jsonl",
        {"id": "a", "name": "again", "scope": SCOPE, "memory_ids": []},
        "concepts.jsonl:3: id: duplicate concepts id 'a'",
    ),
    "NaN importance": (
        "feedback.jsonl",
        '{"id": "g", "topic": "t", "prediction": "p", "correction": "c", '
        '"scope": {"conversation": "c1"}, "memory_ids": [], "importance": NaN}',
        "feedback.jsonl:2: importance: NaN is not a JSON number",
    ),
    "importance above 1": (
        "feedback.jsonl",
        {
            "id": "g",
            "topic": "t",
            "prediction": "p",
            "correction": "c",
            "scope": SCOPE,
            "memory_ids": [],
            "importance": 3,
        },
        "feedback.jsonl:2: importance: must be between 0 and 1",
    ),
    "missing correction": (
        "feedback.jsonl",
        {"id": "g", "topic": "t", "prediction": "p", "scope": SCOPE, "memory_ids": []},
        "feedback.jsonl:2: correction: missing required field",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_graph_record_is_named_by_file_line_and_field(suite_dir, case):
    name, record, expected = BAD[case]
    with open(suite_dir / name, "a") as fh:
        fh.write((record if isinstance(record, str) else json.dumps(record)) + "\n")
    with pytest.raises(SuiteError) as err:
        load_suite(suite_dir)
    assert expected in str(err.value)


def test_every_problem_of_the_graph_files_is_listed_at_once(suite_dir):
    _write(
        suite_dir,
        "relations.jsonl",
        [
            {"source": "a", "target": "a", "relation": "refines"},
            {"source": "a", "target": "b", "relation": "likes"},
            {"source": "b", "target": "zz", "relation": "refines"},
        ],
    )
    with pytest.raises(SuiteError) as err:
        load_suite(suite_dir)
    assert "relations.jsonl:2: relation" in str(err.value)  # per-line schema problems come first
    _write(
        suite_dir,
        "relations.jsonl",
        [
            {"source": "a", "target": "a", "relation": "refines"},
            {"source": "b", "target": "zz", "relation": "refines"},
        ],
    )
    with pytest.raises(SuiteError) as err:
        load_suite(suite_dir)
    assert "relations.jsonl:1: target: a self-loop" in str(err.value)
    assert "relations.jsonl:2: target: unknown concept 'zz'" in str(err.value)


def _chain(n: int, relation: str = "depends_on") -> ScopeGraph:
    graph = ScopeGraph()
    for i in range(n):
        graph.concept(f"c{i}", f"concept {i}")
    for i in range(n - 1):
        graph.relate(f"c{i}", f"c{i + 1}", relation)
    return graph


def test_bfs_reaches_exactly_depth_hops_with_the_product_of_weights():
    graph = _chain(5)
    for depth in range(4):
        reached = expand(graph, {0: 1.0}, depth=depth, weights={"depends_on": 0.5}, fan_out=10)
        assert sorted(reached) == list(range(depth + 1))
        assert reached[depth] == pytest.approx(0.5**depth)
    assert expand(graph, {0: 1.0}, depth=3, weights={"refines": 1.0}, fan_out=10) == {
        0: 1.0
    }  # unweighted: not followed


def test_bfs_fan_out_keeps_the_best_weighted_neighbours_then_concept_order():
    graph = ScopeGraph()
    for i in range(6):
        graph.concept(f"c{i}", "x")
    for i, rel in zip(
        range(1, 6), ["related_to", "depends_on", "related_to", "depends_on", "related_to"], strict=True
    ):
        graph.relate("c0", f"c{i}", rel)
    reached = expand(graph, {0: 1.0}, depth=1, weights={"depends_on": 0.9, "related_to": 0.3}, fan_out=3)
    assert sorted(reached) == [0, 1, 2, 4]  # both depends_on, then the first related_to


def test_stage_configs_reject_unknown_relation_types_and_bad_ranges():
    with pytest.raises(FieldError, match="weights\\['likes'\\]: not a relation type"):
        GraphRetriever(weights={"likes": 0.5})
    with pytest.raises(FieldError, match="decay"):
        GraphExpand(decay=1.5)


def _memories(texts, scope=SCOPE):
    return [
        Memory(id=f"{i}", text=t, scope=MappingProxyType(scope), metadata=MappingProxyType({"batch": i // 3}))
        for i, t in enumerate(texts)
    ]


def test_the_graph_build_is_deterministic_and_order_free_per_scope():
    suite = graph_synth(conversations=2, services=9, filler=5)
    first = GraphBuild()(suite.memories)
    second = GraphBuild()(tuple(reversed(suite.memories)))
    by_id = {m.id: m.annotations["graph_concepts"] for m in second}
    assert all(by_id[m.id] == m.annotations["graph_concepts"] for m in first)
    assert [m.annotations for m in GraphBuild()(suite.memories)] == [dict(m.annotations) for m in first]
    assert any(r[2] == "related_to" for m in first for r in m.annotations["graph_relations"])


def _rates(suite, stages, knowledge=True):
    out = Pipeline(stages, depth=100).run(
        suite.memories, suite.queries, progress=False, knowledge=suite.knowledge if knowledge else None
    )
    by_label = evaluate(suite, out, ["R_all@10"]).metrics["by_label"]["ability"]
    return {label: values["R_all@10"] for label, values in by_label.items()}


def test_each_mechanism_finds_the_evidence_built_for_it_and_keeps_the_controls():
    suite = graph_synth(conversations=2, services=30, filler=20)
    bm25 = _rates(suite, (BM25Retriever(),))
    graph = _rates(suite, (BM25Retriever(), GraphRetriever(), RRFFusion()))
    expanded = _rates(suite, (BM25Retriever(), GraphExpand()))
    derived = _rates(suite, (GraphBuild(max_df=0.05), BM25Retriever(), GraphExpand()), knowledge=False)
    feedback = _rates(suite, (BM25Retriever(), FeedbackRetriever(), RRFFusion()))
    assert bm25["multi_hop"] < 0.5 and bm25["correction"] < 0.5  # the suite is hard without the links
    for rates in (graph, expanded, derived):
        assert rates["multi_hop"] >= bm25["multi_hop"] + 0.5
    assert feedback["correction"] >= bm25["correction"] + 0.5
    for rates in (graph, expanded, derived, feedback):
        assert rates["control"] >= bm25["control"]
