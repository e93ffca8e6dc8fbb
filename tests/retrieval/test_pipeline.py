"""The pipeline: stage order, scope isolation, off switches, fingerprints and the prefix cache."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from experiments.configure.build import build_pipeline, pipeline_from_config
from experiments.configure.compose import compose_config
from experiments.configure.settings import load_suite_from_config
from retrieval.fusion_arithmetic import rrf_fuse, weighted_fuse
from retrieval.fusions.rrf import RRFFusion
from retrieval.fusions.weighted import WeightedFusion
from retrieval.pipeline import Pipeline, PipelineConfigError
from retrieval.retrievers.bm25 import BM25Retriever
from retrieval.reuse import CandidateCache
from retrieval.stage import RankStage, top_n
from retrieval.types import Candidates, Corpus
from tests.support import memory


@dataclass(frozen=True, kw_only=True)
class AddToFirst(RankStage):
    """A test rank stage: adds `weight` to every candidate whose text mentions `word`."""

    name = "add_to_first"
    word: str = "app"
    weight: float = 1.0

    def __call__(self, query, candidates: Candidates) -> Candidates:
        texts = candidates.attribute("text")
        bonus = np.array([self.word in t for t in texts], dtype=float) * self.weight
        return candidates.with_score(self.name, candidates.score + bonus)


def bm25_only(*rank):
    return Pipeline((BM25Retriever(top_n=10), *rank), depth=100)


def test_a_query_sees_only_its_own_scope(tiny):
    out = Pipeline((BM25Retriever(), BM25Retriever(channel="bm25b", k1=1.2), RRFFusion()), depth=100).run(
        tiny.memories, tiny.queries, progress=False
    )
    scope_of = {m.id: m.scope_key for m in tiny.memories}
    for q, r in zip(tiny.queries, out.ranked, strict=True):
        assert {scope_of[m] for m in r.memory_ids} <= {q.scope_key}, q.id
    assert all(r.memory_ids for r in out.ranked[:3])  # the answerable ones find something
    assert out.ranked[0].memory_ids[0] == "c1:0"


def test_a_disabled_stage_is_bit_identical_to_no_stage(tiny):
    plain = bm25_only().run(tiny.memories, tiny.queries, progress=False)
    off = bm25_only(AddToFirst(enabled=False)).run(tiny.memories, tiny.queries, progress=False)
    on = bm25_only(AddToFirst()).run(tiny.memories, tiny.queries, progress=False)
    assert off.prefix_fingerprint == plain.prefix_fingerprint
    for a, b in zip(plain.ranked, off.ranked, strict=True):
        assert a.memory_ids == b.memory_ids and np.array_equal(a.scores, b.scores)
    assert any(not np.array_equal(a.scores, b.scores) for a, b in zip(plain.ranked, on.ranked, strict=True))


def test_rank_stages_keep_every_score_column(tiny):
    out = bm25_only(AddToFirst()).run(tiny.memories, tiny.queries, progress=False)
    cols = out.ranked[1].columns
    assert {"bm25", "bm25_rank", "add_to_first", "score"} <= set(cols)
    assert "add_to_first" in out.ranked[1].timings_ms and out.ranked[1].latency_ms >= 0


def test_fingerprints_follow_config_not_identity():
    assert BM25Retriever(k1=1.5).fingerprint() == BM25Retriever(k1=1.5).fingerprint()
    assert BM25Retriever(k1=1.5).fingerprint() != BM25Retriever(k1=1.2).fingerprint()
    assert AddToFirst(weight=0.0).fingerprint() == AddToFirst(weight=0).fingerprint()


def test_the_prefix_cache_reuses_candidates_and_changes_nothing(tiny, tmp_path):
    cache = CandidateCache(tmp_path)
    first = bm25_only(AddToFirst(weight=0.5)).run(
        tiny.memories, tiny.queries, suite_hash=tiny.content_hash, cache=cache, progress=False
    )
    second = bm25_only(AddToFirst(weight=0.5)).run(
        tiny.memories, tiny.queries, suite_hash=tiny.content_hash, cache=cache, progress=False
    )
    other_weight = bm25_only(AddToFirst(weight=2.0)).run(
        tiny.memories, tiny.queries, suite_hash=tiny.content_hash, cache=cache, progress=False
    )
    assert not first.prefix_cache_hit and second.prefix_cache_hit and other_weight.prefix_cache_hit
    for a, b in zip(first.ranked, second.ranked, strict=True):
        assert a.memory_ids == b.memory_ids and np.array_equal(a.scores, b.scores)
    changed_prefix = Pipeline((BM25Retriever(top_n=10, k1=1.2),), depth=100).run(
        tiny.memories, tiny.queries, suite_hash=tiny.content_hash, cache=cache, progress=False
    )
    assert not changed_prefix.prefix_cache_hit


def test_stage_order_and_fusion_rules_are_checked():
    with pytest.raises(PipelineConfigError, match="order"):
        Pipeline((AddToFirst(), BM25Retriever()), depth=100)
    with pytest.raises(PipelineConfigError, match="fusion"):
        Pipeline((BM25Retriever(), BM25Retriever(channel="other")), depth=100)
    with pytest.raises(PipelineConfigError, match="at least one retriever"):
        Pipeline((AddToFirst(),), depth=100)


def test_rrf_sums_reciprocal_ranks_over_channels():
    channels = {
        "a": (np.array([3, 1, 2]), np.array([9.0, 5.0, 1.0])),
        "b": (np.array([1, 4]), np.array([0.9, 0.2])),
    }
    index, fused, cols = rrf_fuse(channels, k=60)
    expected = {1: 1 / 62 + 1 / 61, 2: 1 / 63, 3: 1 / 61, 4: 1 / 62}
    assert dict(zip(index.tolist(), fused.tolist(), strict=True)) == pytest.approx(expected)
    assert cols["b_rank"].tolist() == [1, 0, 0, 2]  # 0 = the channel missed it
    assert np.isnan(cols["b"][1])


def test_weighted_fusion_normalises_each_channel_per_query():
    channels = {"a": (np.array([0, 1]), np.array([10.0, 0.0])), "b": (np.array([1, 2]), np.array([0.8, 0.4]))}
    index, fused, cols = weighted_fuse(channels, weights={"a": 0.25, "b": 0.75})
    assert index.tolist() == [0, 1, 2]
    assert fused.tolist() == pytest.approx([0.25, 0.75, 0.0])
    corpus = Corpus(tuple(memory(str(i), f"t{i}") for i in range(3)))
    cands = WeightedFusion(weights={"a": 0.25, "b": 0.75})(corpus, channels)
    assert cands.index.tolist() == [1, 0, 2]


def test_top_n_breaks_ties_by_index_deterministically():
    scores = np.array([1.0, 3.0, 3.0, 2.0, 3.0])
    assert top_n(scores, 2).tolist() == [1, 2]
    assert top_n(scores, 10).tolist() == [1, 2, 4, 3, 0]


def test_a_sweep_reuses_a_stage_only_while_its_config_and_the_files_it_names_are_unchanged(tmp_path):
    from omegaconf import OmegaConf

    from retrieval.reuse import ProcessMemo

    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 m1 1 2.0 x\n")
    stages = OmegaConf.create(
        {
            "trec": {"_target_": "retrieval.retrievers.trec_run.TrecRunRetriever", "path": str(run)},
            "boost": {"_target_": "retrieval.stages.instruction_boost.InstructionBoost", "weight": "${w}"},
        }
    )
    config = OmegaConf.create({"w": 0.1, "stage": stages})
    memo = ProcessMemo()
    build = lambda: pipeline_from_config(["trec", "boost"], config.stage, depth=10, memo=memo).stages  # noqa: E731
    first = build()
    assert [a is b for a, b in zip(first, build(), strict=True)] == [True, True]
    config.w = 0.2  # an interpolated value changed: that stage is built again, the other reused
    second = build()
    assert second[0] is first[0] and second[1] is not first[1] and second[1].weight == 0.2
    run.write_text("q1 Q0 m2 1 2.0 x\n")  # the file a stage names changed: built again, new hash
    third = build()
    assert third[0] is not first[0] and third[0].fingerprint() != first[0].fingerprint()
    rebuilt = pipeline_from_config(["trec"], config.stage, depth=10).stages[0]
    assert rebuilt is not third[0]  # no memo: always built


@pytest.mark.parametrize("variant", ["bm25", "exp05"])
def test_answer_is_one_query_of_run_in_both_its_rank_paths(variant, tmp_path):
    # memeval-serve answers with Pipeline.answer: it must rank each query as `run` does, whether `run`
    # ranks query by query (fresh candidates) or all queries at once (candidates from the cache).
    cfg = compose_config([f"variant={variant}", "tracking=none"])
    pipeline, suite = build_pipeline(cfg), load_suite_from_config(cfg)
    args = {"suite_hash": suite.content_hash, "knowledge": suite.knowledge, "progress": False}
    cache = CandidateCache(tmp_path)
    fresh = pipeline.run(suite.memories, suite.queries, cache=cache, **args)
    cached = pipeline.run(suite.memories, suite.queries, cache=cache, **args)
    assert not fresh.prefix_cache_hit and cached.prefix_cache_hit
    indexes = {r.channel: r.build(fresh.corpus) for r in pipeline.retrievers}
    for query, one, other in zip(suite.queries, fresh.ranked, cached.ranked, strict=True):
        top = pipeline.answer(query, fresh.corpus, indexes)
        assert tuple(fresh.corpus.ids[top.index]) == one.memory_ids == other.memory_ids
        assert top.columns["score"].tobytes() == one.scores.tobytes() == other.scores.tobytes()
