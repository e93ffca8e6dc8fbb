"""Tiered memory retrieval: per-tier caps, floors, deletion, scope, fusion factors, both policies."""

from __future__ import annotations

from types import MappingProxyType

import numpy as np
import pytest

from experiments.configure.build import pipeline_from_config
from experiments.suites.generators.tiered_synth import tiered_synth
from retrieval.fusions.tier_fusion import TierFusion
from retrieval.pipeline import Pipeline
from retrieval.retrievers.bm25 import BM25Retriever
from retrieval.retrievers.tiered import TieredRetriever
from retrieval.stages.advisory_tiers import AdvisoryTiers
from retrieval.types import Corpus, Memory, Query

SCOPE_A = MappingProxyType({"agent": "a", "project": "p1"})
SCOPE_B = MappingProxyType({"agent": "a", "project": "p2"})


def mem(mid: str, text: str, tier: str | None = "observation", scope=SCOPE_A, **kw) -> Memory:
    return Memory(id=mid, text=text, scope=scope, tier=tier, **kw)


def ask(text: str, scope=SCOPE_A, **kw) -> Query:
    return Query(id="q", text=text, scope=scope, **kw)


def retriever(**kw) -> TieredRetriever:
    return TieredRetriever(bm25=BM25Retriever(), **kw)


def search(memories, query, **kw) -> list[str]:
    corpus = Corpus(tuple(memories) + filler(memories))
    index, _ = retriever(**kw).build(corpus).search(query)
    return [corpus.ids[i] for i in index]


POOL = [
    mem("o1", "billing api timeout seen at noon"),
    mem("o2", "billing api timeout again after release"),
    mem("o3", "disk full on the backup job"),
    mem("l1", "lesson: billing api timeout needs retries", tier="lesson"),
    mem("c1", "crystal: billing api timeout means raise the limit", tier="crystal", confidence=0.95),
]


# Unrelated observations, so that query terms are rare enough for BM25's IDF to stay positive.
def filler(memories) -> tuple[Memory, ...]:
    scopes = {m.scope_key: m.scope for m in memories}
    return tuple(
        mem(f"f{k}-{i}", f"unrelated note {i}", scope=s) for k, s in scopes.items() for i in range(40)
    )


def test_every_tier_is_searched_by_default():
    assert set(search(POOL, ask("billing api timeout"))) == {"o1", "o2", "l1", "c1"}


def test_high_order_switch_off_searches_observations_only_and_equals_an_observation_only_corpus():
    observations = [m for m in POOL if m.tier == "observation"]
    q = ask("billing api timeout")
    off = retriever(high_order=False).build(Corpus(tuple(POOL))).search(q)
    alone = retriever().build(Corpus(tuple(observations))).search(q)
    ids = Corpus(tuple(POOL)).ids
    assert list(ids[off[0]]) == list(Corpus(tuple(observations)).ids[alone[0]])
    np.testing.assert_array_equal(off[1], alone[1])


def test_deleted_memories_are_never_returned():
    pool = [*POOL, mem("d1", "billing api timeout billing api timeout", tier="lesson", deleted=True)]
    assert "d1" not in search(pool, ask("billing api timeout"))


def test_confidence_below_the_floor_is_never_returned_and_the_floor_itself_is():
    pool = [
        *POOL,
        mem("low", "billing api timeout", tier="insight", confidence=0.29),
        mem("edge", "billing api timeout", tier="insight", confidence=0.3),
    ]
    found = search(pool, ask("billing api timeout"))
    assert "low" not in found and "edge" in found
    assert "low" in search(pool, ask("billing api timeout"), confidence_floor=0.2)


def test_per_tier_cap_bounds_each_tier_before_fusion():
    pool = [mem(f"o{i}", f"timeout number {i}") for i in range(10)]
    pool += [mem(f"l{i}", f"timeout lesson {i}", tier="lesson") for i in range(4)]
    found = search(pool, ask("timeout"), cap=3, caps={"lesson": 1})
    assert sum(f.startswith("o") for f in found) == 3
    assert sum(f.startswith("l") for f in found) == 1


def test_scope_is_enforced_in_every_tier():
    pool = POOL + [mem(m.id + "b", m.text, m.tier, scope=SCOPE_B) for m in POOL]
    found = search(pool, ask("billing api timeout", scope=SCOPE_B))
    assert found and all(f.endswith("b") for f in found)


def test_tier_ranking_scores_each_tiers_best_match_alike_and_global_does_not():
    q = ask("billing api timeout seen at noon")
    corpus = Corpus(tuple(POOL) + filler(POOL))
    _, tier_scores = retriever(ranking="tier").build(corpus).search(q)
    _, global_scores = retriever(ranking="global").build(corpus).search(q)
    assert np.sum(np.isclose(tier_scores, tier_scores.max())) == 3  # observation, lesson, crystal
    assert np.sum(np.isclose(global_scores, global_scores.max())) == 1


def fuse(memories, query, fusion: TierFusion):
    corpus = Corpus(tuple(memories) + filler(memories))
    hits = retriever().build(corpus).search(query)
    return fusion(corpus, {"tiered": hits})


def test_fusion_multiplies_tier_weight_strength_and_confidence_and_carries_the_tier():
    pool = [
        mem("o", "timeout"),
        mem("l", "timeout", tier="lesson", strength=0.5, confidence=0.8),
    ]
    out = fuse(pool, ask("timeout"), TierFusion(weights={"lesson": 2.0}))
    by_id = {out.corpus.ids[i]: k for k, i in enumerate(out.index)}
    lesson, obs = by_id["l"], by_id["o"]
    assert out.columns["tier"][lesson] == "lesson" and out.columns["tier"][obs] == "observation"
    assert out.score[lesson] == pytest.approx(out.columns["tiered"][lesson] * 2.0 * 0.5 * 0.8)
    assert out.score[obs] == pytest.approx(out.columns["tiered"][obs])  # missing factors count 1.0


def test_high_confidence_memories_get_the_boost_and_factors_switch_off():
    pool = [mem("c", "timeout", tier="crystal", confidence=0.9)]
    on = fuse(pool, ask("timeout"), TierFusion())
    off = fuse(pool, ask("timeout"), TierFusion(factors=False, high_confidence_weight=1.0))
    assert on.score[0] == pytest.approx(off.score[0] * 1.2 * 0.9)


def test_fusion_refuses_other_channels():
    with pytest.raises(ValueError, match="tiered"):
        TierFusion()(Corpus(tuple(POOL)), {"bm25": (np.array([0]), np.array([1.0]))})


def insight(mid, text="timeout handling", **meta):
    created = meta.pop("created_at", "2025-01-01")
    confidence = meta.pop("confidence", None)
    return mem(
        mid, text, tier=None, created_at=created, confidence=confidence, metadata=MappingProxyType(meta)
    )


def test_advisory_policy_rules():
    policy = AdvisoryTiers(trusted_sources=("curated",), recent_days=14)
    memories = [
        insight("pinned", times_validated=15, reliability=0.95),
        insight("nearly", times_validated=15, reliability=0.94),
        insight("promoted", promoted=True, source="curated"),
        insight("untrusted", promoted=True, source="twitter"),
        insight("validated", times_validated=3, reliability=0.7),
        insight("recent", created_at="2025-03-01"),
        insight("confident", confidence=0.9),
        insight("newest", created_at="2025-03-10"),
    ]
    tiers = {m.id: m.annotations["search_tier"] for m in policy(memories)}
    assert tiers == {
        "pinned": "pinned",
        "nearly": "active",  # validated >= 3 and reliability >= 0.70
        "promoted": "pinned",
        "untrusted": "archive",
        "validated": "active",
        "recent": "active",  # 9 days before the newest memory of its scope
        "confident": "active",
        "newest": "active",
    }


def advisory_retriever(**kw) -> TieredRetriever:
    return retriever(
        tiers=("pinned", "active", "archive"),
        default_tier="archive",
        base_tiers=("pinned", "active", "archive"),
        always=("pinned",),
        escalation=("archive",),
        **kw,
    )


def test_advisory_pinned_always_included_and_archive_only_on_escalation():
    pool = [
        insight("pin", "format code with black", times_validated=20, reliability=0.99),
        insight("act", "timeout retries with backoff", times_validated=5, reliability=0.8),
        insight("arc", "timeout tweet from someone"),
    ]
    corpus = Corpus(tuple(AdvisoryTiers(recent_days=-1)(pool + list(filler(pool)))))  # filler: archive
    index = advisory_retriever(escalate_below=2).build(corpus)
    plain = [corpus.ids[i] for i in index.search(ask("timeout"))[0]]  # 2 results: escalate_below=2 holds
    assert plain == ["act", "pin"]  # pinned despite no match; archive not searched
    escalated = [corpus.ids[i] for i in index.search(ask("timeout", context={"escalate": True}))[0]]
    assert set(escalated) == {"act", "arc", "pin"}


def test_advisory_escalates_when_too_few_results():
    pool = [
        insight("act", "timeout retries", times_validated=5, reliability=0.8),
        insight("arc", "timeout tweet"),
    ]
    corpus = Corpus(tuple(AdvisoryTiers(recent_days=-1)(pool + list(filler(pool)))))  # filler: archive
    found = advisory_retriever(escalate_below=2).build(corpus).search(ask("timeout"))[0]
    assert {corpus.ids[i] for i in found} == {"act", "arc"}
    found = advisory_retriever(escalate_below=1).build(corpus).search(ask("timeout"))[0]
    assert {corpus.ids[i] for i in found} == {"act"}


def test_tiered_synth_is_deterministic_with_every_tier_and_judged_decoys():
    a, b = tiered_synth(observations=80, scopes=2), tiered_synth(observations=80, scopes=2)
    assert a.content_hash == b.content_hash
    assert {m.tier for m in a.memories} >= {"observation", "lesson", "crystal"}
    decoys = [m for m in a.memories if m.id.endswith(":decoy")]
    assert decoys and all(m.deleted or m.confidence < 0.3 for m in decoys)
    assert all(a.qrels[q.id][d.id] == 0 for d in decoys for q in a.queries if d.id in a.qrels[q.id])


def test_pipeline_on_synth_never_returns_decoys_and_never_leaks():
    suite = tiered_synth(observations=160, scopes=2)
    out = Pipeline((TieredRetriever(bm25=BM25Retriever()), TierFusion()), depth=100).run(
        suite.memories, suite.queries, progress=False
    )
    decoys = {m.id for m in suite.memories if m.id.endswith(":decoy")}
    scope_of = {m.id: m.scope_key for m in suite.memories}
    for query, ranked in zip(suite.queries, out.ranked, strict=True):
        assert not decoys & set(ranked.memory_ids)
        assert {scope_of[i] for i in ranked.memory_ids} == {query.scope_key}
        assert set(ranked.columns["tier"]) <= {
            "observation",
            "lesson",
            "semantic",
            "procedural",
            "crystal",
            "insight",
            "facet",
        }


def test_configs_build_both_policies_of_the_one_mechanism():
    from hydra.utils import instantiate

    from experiments.configure.compose import compose_config

    overrides = [
        "variant=tiering",
        "tracking=none",
        "+stage@stage.advisory_policy=advisory_tiers",
        "+stage@stage.advisory_tiered=tiered_advisory",
        "+stage@stage.advisory_fusion=tier_fusion_advisory",
        "variant.stages=[tiered,fusion]",  # the advisory nodes are only instantiated below, not run
    ]
    cfg = compose_config(overrides)
    pipeline = pipeline_from_config(list(cfg.variant.stages), cfg.stage, depth=cfg.depth)
    high_order, fusion = pipeline.stages
    assert isinstance(high_order, TieredRetriever)
    assert high_order.cap == 50 and high_order.confidence_floor == 0.3
    assert isinstance(fusion, TierFusion) and fusion.weights["crystal"] > fusion.weights["observation"]
    advisory = instantiate(cfg.stage.advisory_tiered, _convert_="all")
    assert type(advisory) is TieredRetriever
    assert list(advisory.tiers) == ["pinned", "active", "archive"]
    assert list(advisory.always) == ["pinned"] and list(advisory.escalation) == ["archive"]
    assert instantiate(cfg.stage.advisory_fusion, _convert_="all").weights == {
        "pinned": 1.5,
        "active": 1.0,
        "archive": 0.8,
    }
    policy = instantiate(cfg.stage.advisory_policy, _convert_="all")
    assert policy.fingerprint() == AdvisoryTiers().fingerprint()


def test_tiering_advisory_variant_is_the_same_mechanism_under_the_advisory_policy():
    from experiments.configure.compose import compose_config

    cfg = compose_config(["variant=tiering_advisory", "tracking=none"])
    policy, tiered, fusion = pipeline_from_config(list(cfg.variant.stages), cfg.stage, depth=cfg.depth).stages
    assert (
        isinstance(policy, AdvisoryTiers) and type(tiered) is TieredRetriever and type(fusion) is TierFusion
    )
    assert list(tiered.escalation) == ["archive"] and fusion.default_tier == "archive"


def test_tiered_synth_round_trips_through_the_canonical_format(tmp_path):
    from experiments.suites.generators.tiered_synth import main
    from experiments.suites.jsonl import load_suite

    main([str(tmp_path / "synth"), "--observations", "40", "--scopes", "2"])
    loaded = load_suite(tmp_path / "synth")
    assert loaded.content_hash == tiered_synth(observations=40, scopes=2).content_hash


def test_channel_scores_survive_fusion_as_columns_aligned_with_candidates():
    out = fuse(POOL, ask("billing api timeout"), TierFusion())
    bm25, rank = out.columns["bm25"], out.columns["bm25_rank"]
    assert len(bm25) == len(out) and np.all(bm25 > 0)
    by_rank = np.argsort(rank)
    assert np.all(np.diff(bm25[by_rank]) <= 1e-12)  # rank 1 holds the highest BM25 score
    expected = Corpus(tuple(POOL) + filler(POOL))
    scores = dict(
        zip(
            *[
                list(expected.ids[BM25Retriever().build(expected).search(ask("billing api timeout"))[0]]),
                BM25Retriever().build(expected).search(ask("billing api timeout"))[1],
            ],
            strict=True,
        )
    )
    for memory_id, value in zip(out.corpus.ids[out.index], bm25, strict=True):
        assert value == pytest.approx(scores[memory_id])  # one shared index: the plain BM25 score


def test_defaults():
    r = retriever()
    assert (r.cap, r.confidence_floor, r.rrf_k, r.high_order, r.ranking) == (50, 0.3, 60, True, "global")
    assert list(r.tiers) == ["observation", "lesson", "semantic", "procedural", "crystal", "insight", "facet"]
    assert (r.always, r.escalation, r.default_tier) == ((), (), "observation")
    f = TierFusion()
    assert (f.high_confidence, f.high_confidence_weight, f.factors, f.weights) == (0.85, 1.2, True, {})
    a = AdvisoryTiers()
    assert (a.pinned_validated, a.pinned_reliability, a.active_validated, a.active_reliability) == (
        15,
        0.95,
        3,
        0.7,
    )


def test_switched_off_tier_fusion_leaves_the_tiered_channel_as_ranked():
    corpus_memories = tuple(POOL) + filler(POOL)
    q = [ask("billing api timeout")]
    alone = Pipeline((retriever(),), depth=100).run(corpus_memories, q, progress=False).ranked[0]
    off = (
        Pipeline((retriever(), TierFusion(enabled=False)), depth=100)
        .run(corpus_memories, q, progress=False)
        .ranked[0]
    )
    assert alone.memory_ids == off.memory_ids and np.array_equal(alone.scores, off.scores)


def test_unknown_ranking_mode_is_a_clear_error():
    with pytest.raises(ValueError, match="ranking"):
        retriever(ranking="per-tier").build(Corpus(tuple(POOL)))
