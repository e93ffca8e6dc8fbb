"""Time decay, ICM importance, access counts (metadata and replayed), and the importance prune."""

from __future__ import annotations

import math
from types import MappingProxyType

import numpy as np
import pytest

from experiments.configure.build import pipeline_from_config
from retrieval.aging import AccessLedger, epoch_days, importance_weight, recency
from retrieval.pipeline import Pipeline
from retrieval.retrievers.bm25 import BM25Retriever
from retrieval.stages.decay import TimeDecay
from retrieval.stages.importance_prune import ImportancePrune
from retrieval.types import Candidates, Corpus, Memory, Query

SCOPE = MappingProxyType({"conversation": "c1"})


def mem(mid: str, created: str | None = "2025-01-01", **kw) -> Memory:
    return Memory(id=mid, text=f"memory {mid}", scope=SCOPE, created_at=created, **kw)


def ask(now: str | None = "2025-01-31") -> Query:
    return Query(id="q", text="memory", scope=SCOPE, now=now)


def cands(memories, scores=None) -> Candidates:
    corpus = Corpus(tuple(memories))
    s = np.ones(len(memories)) if scores is None else np.asarray(scores, dtype=np.float64)
    return Candidates(corpus, np.arange(len(memories)), {"fused": s, "score": s})


def by_id(out: Candidates, column: str = "score") -> dict[str, float]:
    return dict(zip(out.corpus.ids[out.index], out.columns[column], strict=True))


def test_recency_formula_floor_and_cap():
    r = recency(np.array([0.0, 30.0, 1e6, np.nan, -5.0]), np.full(5, 0.3), np.full(5, 30.0))
    assert r[0] == 1.0 and r[3] == 1.0  # fresh, and unknown age: no decay
    assert r[1] == pytest.approx(0.3 + 0.7 * math.exp(-1))
    assert r[2] == pytest.approx(0.3)  # never below the floor
    assert r[4] == 1.0  # a memory "from the future" is capped at 1


def test_age_is_query_now_minus_created_at_in_days():
    out = TimeDecay(access="none")(
        ask("2025-01-31"), cands([mem("a", "2025-01-01"), mem("b", "2025-01-31T00:00:00")])
    )
    assert by_id(out, "age_days") == {"a": 30.0, "b": 0.0}
    assert epoch_days("2025-01-02") - epoch_days("2025-01-01") == 1.0
    assert math.isnan(epoch_days(None)) and math.isnan(epoch_days("not a date"))


def test_half_life_and_floor_per_memory_kind():
    stage = TimeDecay(access="none", half_life_days={"default": 30, "lesson": 300}, floor={"default": 0.1})
    out = stage(ask(), cands([mem("obs", tier="observation"), mem("les", tier="lesson")]))
    rec = by_id(out, "recency")
    assert rec["obs"] == pytest.approx(0.1 + 0.9 * math.exp(-1))
    assert rec["les"] == pytest.approx(0.1 + 0.9 * math.exp(-0.1))


def test_importance_multiplies_outside_the_recency_cap():
    weights = {"critical": 2.0, "low": 0.5}
    stage = TimeDecay(access="none", importance_weights=weights)
    out = stage(ask("2025-01-01"), cands([mem("c", importance="critical"), mem("l", importance="low")]))
    assert by_id(out) == {"c": pytest.approx(2.0), "l": pytest.approx(0.5)}  # recency 1, weight beyond it


def test_icm_medium_and_low_decay_with_access_critical_and_high_do_not():
    levels = np.array(["critical", "high", "medium", "low", None], dtype=object)
    w = importance_weight(
        levels, np.full(5, 10.0), {"critical": 1, "high": 0.8, "medium": 0.6, "low": 0.4}, 0.1
    )
    np.testing.assert_allclose(w, [1.0, 0.8, 0.3, 0.2, 1.0])


def test_metadata_access_count_and_history_up_to_now():
    memories = [
        mem("n", importance="medium", metadata=MappingProxyType({"access_count": 10})),
        mem(
            "h",
            importance="medium",
            metadata=MappingProxyType({"access_history": ["2025-01-02", "2025-03-01"]}),
        ),
        mem("z", importance="medium"),
    ]
    out = TimeDecay()(ask("2025-01-31"), cands(memories))
    assert by_id(out, "access_count") == {"n": 10.0, "h": 1.0, "z": 0.0}


def test_unrated_memories_use_default_importance():
    memories = [mem("u", metadata=MappingProxyType({"access_count": 10}))]
    assert by_id(TimeDecay()(ask("2025-01-01"), cands(memories)))["u"] == 1.0
    assert by_id(TimeDecay(default_importance="medium")(ask("2025-01-01"), cands(memories)))["u"] == 0.3


def test_replay_counts_earlier_queries_returns_in_order():
    ledger = AccessLedger(top_k=1)
    stage = TimeDecay(access="replay", ledger=ledger, default_importance="medium")
    given = cands([mem("a"), mem("b")], scores=[1.0, 0.95])
    first = stage(ask("2025-01-01"), given)
    assert by_id(first, "access_count") == {"a": 0.0, "b": 0.0}  # never counts the current query
    second = stage(ask("2025-01-01"), given)
    assert by_id(second, "access_count") == {"a": 1.0, "b": 0.0}
    assert list(second.corpus.ids[second.index]) == ["b", "a"]  # 0.6/1.1 x 1.0 < 0.6 x 0.95
    third = stage(ask("2025-01-01"), given)
    assert by_id(third, "access_count") == {"a": 1.0, "b": 1.0}
    assert ledger.counts(Corpus(given.corpus.memories), np.arange(2)).sum() == 0  # a new corpus: zero


def test_replay_without_a_ledger_is_a_clear_error():
    with pytest.raises(ValueError, match="ledger"):
        TimeDecay(access="replay")(ask(), cands([mem("a")]))


def test_prune_drops_medium_and_low_under_min_weight_only():
    memories = [
        mem("crit", importance="critical", metadata=MappingProxyType({"access_count": 100})),
        mem("med", importance="medium", metadata=MappingProxyType({"access_count": 10})),  # 0.3
        mem("low", importance="low", metadata=MappingProxyType({"access_count": 1})),  # 0.364
        mem("low2", importance="low", metadata=MappingProxyType({"access_count": 5})),  # 0.267
    ]
    kept = set(
        ImportancePrune(min_weight=0.3)(ask(), cands(memories)).corpus.ids[
            ImportancePrune(min_weight=0.3)(ask(), cands(memories)).index
        ]
    )
    assert kept == {"crit", "med", "low"}


def test_prune_uses_the_decay_stages_replayed_weights():
    given = cands([mem("a", importance="low"), mem("b", importance="low")], scores=[1.0, 0.9])
    decayed = TimeDecay(access="none", importance_weights={"low": 0.25})(ask(), given)
    assert len(ImportancePrune(min_weight=0.3)(ask(), decayed)) == 0


def test_defaults():
    stage = TimeDecay()
    assert stage.half_life_days == {"default": 30.0} and stage.floor == {"default": 0.3}
    assert stage.importance_weights == {"critical": 1.0, "high": 0.8, "medium": 0.6, "low": 0.4}
    assert (stage.access, stage.access_step, stage.default_importance) == ("metadata", 0.1, None)
    assert ImportancePrune().min_weight == 0.3


def test_switched_off_decay_and_prune_are_identical_to_their_absence():
    memories = [mem(str(i), f"2024-{1 + i % 12:02d}-01", importance="low") for i in range(40)]
    memories = [Memory(**{**m.__dict__, "text": f"memory note {i % 7}"}) for i, m in enumerate(memories)]
    queries = [Query(id=f"q{i}", text=f"note {i}", scope=SCOPE, now="2025-01-01") for i in range(3)]
    base = Pipeline((BM25Retriever(),), depth=100).run(memories, queries, progress=False)
    off = Pipeline(
        (BM25Retriever(), TimeDecay(enabled=False), ImportancePrune(enabled=False, min_weight=0.9)), depth=100
    ).run(memories, queries, progress=False)
    on = Pipeline((BM25Retriever(), TimeDecay()), depth=100).run(memories, queries, progress=False)
    for a, b in zip(base.ranked, off.ranked, strict=True):
        assert a.memory_ids == b.memory_ids and np.array_equal(a.scores, b.scores)
    assert any(a.memory_ids != c.memory_ids for a, c in zip(base.ranked, on.ranked, strict=True))


def test_variant_config_replays_access_and_prunes():
    from experiments.configure.compose import compose_config

    cfg = compose_config(["variant=decay", "tracking=none"])
    pipeline = pipeline_from_config(list(cfg.variant.stages), cfg.stage, depth=cfg.depth)
    decay, prune = pipeline.rank
    assert decay.access == "replay" and isinstance(decay.ledger, AccessLedger) and decay.ledger.top_k == 10
    assert isinstance(prune, ImportancePrune)
