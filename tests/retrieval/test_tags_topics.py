"""Topic tags from BEAM's topic.json: the loader option and the topic_tags ingest stage."""

from __future__ import annotations

from types import MappingProxyType

import numpy as np

from experiments.configure.build import pipeline_from_config
from retrieval.stages.topic_tags import TopicTags
from retrieval.types import Memory


class FakeEncoder:
    """Vectors from a fixed table (unknown text -> its own direction), normalised."""

    def __init__(self, table):
        self.table = table

    def fingerprint(self) -> str:
        return "fake"

    def encode(self, texts, role):
        vecs = np.array([self.table.get(t, [0.0, 0.0, 1.0]) for t in texts], dtype=np.float64)
        return vecs / np.linalg.norm(vecs, axis=1, keepdims=True)


TOPIC = {"topic": {"title": "Budget app", "subtopics": ["Connecting SQLite database", "Designing the UI"]}}
TABLE = {
    "Connecting SQLite database": [1, 0, 0],
    "Designing the UI": [0, 1, 0],
    "the sqlite file is locked": [0.9, 0.1, 0],
    "make the buttons bigger": [0.2, 0.8, 0],
    "hello there": [0.1, 0.1, 1.0],
}


def mem(mid: str, text: str, meta=TOPIC, **kw) -> Memory:
    return Memory(
        id=mid,
        text=text,
        scope=MappingProxyType({"conversation": "c"}),
        metadata=MappingProxyType(meta),
        **kw,
    )


def test_each_message_gets_its_closest_subtopic_above_the_threshold():
    out = TopicTags(encoder=FakeEncoder(TABLE), threshold=0.5)(
        [mem("a", "the sqlite file is locked"), mem("b", "make the buttons bigger"), mem("c", "hello there")]
    )
    tags = {m.id: m.annotations["auto_tags"] for m in out}
    assert tags == {"a": ("Connecting SQLite database",), "b": ("Designing the UI",), "c": ()}


def test_no_topic_metadata_or_suite_tags_means_no_topic_tags():
    out = TopicTags(encoder=FakeEncoder(TABLE))(
        [mem("a", "the sqlite file is locked", meta={}), mem("b", "make the buttons bigger", tags=("ui",))]
    )
    assert [m.annotations["auto_tags"] for m in out] == [(), ()]


def test_per_memory_keeps_the_best_n():
    out = TopicTags(encoder=FakeEncoder(TABLE), threshold=0.0, per_memory=2)(
        [mem("b", "make the buttons bigger")]
    )
    assert out[0].annotations["auto_tags"] == ("Designing the UI", "Connecting SQLite database")


def test_beam_loader_adds_topic_metadata_only_when_asked(beam_synth_dir):
    import json

    from experiments.suites.beam import load_beam

    folder = beam_synth_dir / "1"
    plain, with_topics = load_beam(folder), load_beam(folder, topics=True)
    assert "topic" not in plain.memories[0].metadata
    topic = with_topics.memories[0].metadata["topic"]
    written = json.loads((folder / "topic.json").read_text())
    assert topic["subtopics"] == written["subtopics"] and topic["title"] == written["title"]
    assert plain.content_hash != with_topics.content_hash
    assert [m.text for m in plain.memories] == [m.text for m in with_topics.memories]


def test_topic_variant_config_builds_topic_tags_then_tag_boost():
    from experiments.configure.compose import compose_config
    from retrieval.stages.tag_boost import TagBoost

    cfg = compose_config(["suite=beam", "+suite.topics=true", "variant=tag_inference_topics"])
    assert cfg.suite.topics is True
    pipeline = pipeline_from_config(list(cfg.variant.stages), cfg.stage, depth=cfg.depth)
    assert isinstance(pipeline.ingest[0], TopicTags)
    assert isinstance(pipeline.rank[-1], TagBoost) and pipeline.rank[-1].threshold == 0.4
