"""Keyword tagging at ingest, query tag inference (hashtags -> vocabulary -> fallback), soft tag boost."""

from __future__ import annotations

from types import MappingProxyType

import numpy as np
import pytest

from experiments.configure.build import pipeline_from_config
from retrieval.pipeline import Pipeline
from retrieval.retrievers.bm25 import BM25Retriever
from retrieval.stages.keyword_tags import KeywordTags
from retrieval.stages.tag_boost import TagBoost, tag_key
from retrieval.types import Candidates, Corpus, Memory, Query


def mem(mid: str, text: str = "note", scope: str = "c1", **kw) -> Memory:
    return Memory(id=mid, text=text, scope=MappingProxyType({"conversation": scope}), **kw)


def ask(text: str, scope: str = "c1", qid: str = "q") -> Query:
    return Query(id=qid, text=text, scope=MappingProxyType({"conversation": scope}))


class FakeEncoder:
    """Vectors from a fixed table (unknown text -> a direction of its own), normalised."""

    def __init__(self, table: dict[str, list[float]]):
        self.table = table

    def fingerprint(self) -> str:
        return "fake"

    def encode(self, texts, role):
        vecs = np.array([self.table.get(t, [0.0, 0.0, 1.0]) for t in texts], dtype=np.float64)
        return vecs / np.linalg.norm(vecs, axis=1, keepdims=True)


# ---- keyword tags -------------------------------------------------------------------------------


def test_keyword_tags_keep_distinctive_repeated_terms_only():
    texts = ["the flask server crashed", "flask routes again", "deploy to heroku"] + [
        f"filler words number {i}" for i in range(20)
    ]
    out = KeywordTags(per_memory=2)([mem(str(i), t) for i, t in enumerate(texts)])
    assert out[0].annotations["auto_tags"] == ("flask",)  # "crashed", "server" occur once: not tags
    assert out[2].annotations["auto_tags"] == ()
    assert all(len(m.annotations["auto_tags"]) <= 2 for m in out)


def test_keyword_tags_drop_the_scope_theme_above_max_df_share():
    texts = [f"budget item {i}" for i in range(10)] + ["budget report", "budget report"]
    out = KeywordTags(max_df_share=0.5)([mem(str(i), t) for i, t in enumerate(texts)])
    assert "budget" not in out[10].annotations["auto_tags"]
    assert out[10].annotations["auto_tags"] == ("report",)


def test_keyword_tags_drop_words_used_in_most_scopes():
    memories = []
    for s in range(4):
        memories += [
            mem(f"{s}a", "general advice here", f"s{s}"),
            mem(f"{s}b", "general advice again", f"s{s}"),
        ]
        memories += [mem(f"{s}{i}", f"topic{s} noise {i}", f"s{s}") for i in range(20)]
    memories += [mem("x1", "kubernetes pods", "s0"), mem("x2", "kubernetes nodes", "s0")]
    out = {m.id: m.annotations["auto_tags"] for m in KeywordTags()(memories)}
    assert "general" not in out["0a"] and "advice" not in out["0a"]
    assert out["x1"] == ("kubernetes",)


def test_keyword_tags_leave_suite_tagged_memories_alone_unless_told():
    memories = [mem("a", "lease renewal", tags=("housing",)), mem("b", "lease terms")] + [
        mem(f"f{i}", f"filler {i}") for i in range(20)
    ]
    assert KeywordTags()(memories)[0].annotations["auto_tags"] == ()
    assert KeywordTags(only_untagged=False)(memories)[0].annotations["auto_tags"] == ("lease",)


def test_keyword_tags_are_deterministic():
    memories = [mem(str(i), f"alpha beta gamma {i % 3}") for i in range(30)]
    a = [m.annotations["auto_tags"] for m in KeywordTags(max_df_share=1.0)(memories)]
    b = [m.annotations["auto_tags"] for m in KeywordTags(max_df_share=1.0)(list(memories))]
    assert a == b


# ---- query tag inference ------------------------------------------------------------------------

POOL = (
    mem("0", "lease ends in june", tags=("lease",)),
    mem("1", "api keys rotate", tags=("Billing-API", "security")),
    mem("2", "the release went out"),
    mem("3", "pets allowed", tags=("pets", "lease")),
    mem("4", "nothing tagged here"),
)


def infer(text: str, **kw) -> list[str]:
    stage = TagBoost(**{"fallback": "none", **kw})
    corpus = Corpus(POOL)
    return stage.query_tags(ask(text), stage.vocabulary(corpus))


def test_hashtags_come_first_and_win_over_vocabulary_words():
    assert infer("#Pets and the lease") == ["pets"]


def test_vocabulary_matches_whole_words_only():
    assert infer("when is the lease up") == ["lease"]
    assert infer("what was in the release") == []  # "lease" inside "release" is not a match


def test_multi_word_and_hyphenated_tags_match_as_token_sequences():
    assert tag_key("Billing-API") == "billing api"
    assert infer("is the billing api down") == ["billing api"]
    assert infer("billing went down, api too") == []


def test_fallback_runs_only_when_hashtags_and_vocabulary_find_nothing():
    encoder = FakeEncoder({"rental agreement": [1, 0, 0], "lease": [0.9, 0.1, 0], "pets": [0, 1, 0]})
    assert infer("rental agreement", fallback="embedding", encoder=encoder) == ["lease"]
    assert infer("the lease", fallback="embedding", encoder=encoder) == ["lease"]  # vocabulary, no fallback
    assert infer("rental agreement", fallback="embedding", encoder=encoder, threshold=0.999) == []
    assert infer("rental agreement", fallback="none", encoder=encoder) == []


def test_embedding_fallback_without_an_encoder_is_a_clear_error():
    with pytest.raises(ValueError, match="encoder"):
        infer("rental agreement", fallback="embedding")


# ---- boost --------------------------------------------------------------------------------------


def candidates(scores=(1.0, 1.0, 1.0, 1.0, 1.0)) -> Candidates:
    corpus = Corpus(POOL)
    s = np.array(scores, dtype=np.float64)
    return Candidates(corpus, np.arange(len(POOL)), {"fused": s, "score": s})


def test_boost_is_one_plus_overlap_times_step_capped_at_max():
    out = TagBoost(fallback="none", step=0.3, max_boost=1.5)(ask("#lease #pets"), candidates())
    by_id = dict(zip(out.corpus.ids[out.index], out.score, strict=True))
    assert by_id["3"] == pytest.approx(1.5)  # overlap 2: 1 + 0.6 capped at 1.5
    assert by_id["0"] == pytest.approx(1.3)
    assert by_id["1"] == by_id["4"] == 1.0
    assert list(out.corpus.ids[out.index[:2]]) == ["3", "0"]


def test_defaults_are_step_015_max_15():
    stage = TagBoost()
    assert (stage.step, stage.max_boost, stage.fallback, stage.threshold) == (0.15, 1.5, "embedding", 0.5)
    out = TagBoost(fallback="none")(ask("#lease"), candidates())
    assert max(out.score) == pytest.approx(1.15)


def test_boost_is_soft_never_a_filter():
    out = TagBoost(fallback="none")(ask("#lease"), candidates((0.1, 5.0, 0.2, 0.3, 0.4)))
    assert len(out) == len(POOL) and out.corpus.ids[out.index[0]] == "1"


def test_no_query_tags_leaves_the_candidates_unchanged():
    given = candidates((0.1, 0.5, 0.2, 0.3, 0.4))
    assert TagBoost(fallback="none")(ask("tell me something"), given) is given


def test_switched_off_tag_boost_is_identical_to_no_tag_boost():
    def text(i: int) -> str:
        return "pets rule" if i % 10 == 1 else f"filler {i}"

    suite = [mem(str(i), text(i), tags=("lease",) if i % 20 == 11 else ()) for i in range(60)]
    queries = [ask("#lease pets rule", qid="q1"), ask("pets rule", qid="q2")]
    base = Pipeline((BM25Retriever(),), depth=100).run(suite, queries, progress=False)
    off = Pipeline((BM25Retriever(), TagBoost(fallback="none", enabled=False)), depth=100).run(
        suite, queries, progress=False
    )
    on = Pipeline((BM25Retriever(), TagBoost(fallback="none")), depth=100).run(suite, queries, progress=False)
    for a, b in zip(base.ranked, off.ranked, strict=True):
        assert a.memory_ids == b.memory_ids and np.array_equal(a.scores, b.scores)
    assert base.ranked[0].memory_ids != on.ranked[0].memory_ids


def test_variant_config_builds_keyword_tags_then_tag_boost():
    from experiments.configure.compose import compose_config

    cfg = compose_config(["variant=tag_inference", "tracking=none"])
    pipeline = pipeline_from_config(list(cfg.variant.stages), cfg.stage, depth=cfg.depth)
    assert isinstance(pipeline.ingest[0], KeywordTags) and isinstance(pipeline.rank[-1], TagBoost)
    assert pipeline.rank[-1].encoder is not None


def test_tag_boost_after_decay_is_outside_the_recency_cap():
    from retrieval.stages.decay import TimeDecay

    fresh = Memory(
        id="m",
        text="x",
        scope=MappingProxyType({"conversation": "c1"}),
        tags=("lease",),
        created_at="2025-01-01",
    )
    corpus = Corpus((fresh,))
    given = Candidates(corpus, np.array([0]), {"fused": np.array([1.0]), "score": np.array([1.0])})
    q = Query(id="q", text="#lease", scope=MappingProxyType({"conversation": "c1"}), now="2025-01-01")
    out = TagBoost(fallback="none", step=0.5)(q, TimeDecay(access="none")(q, given))
    assert out.columns["recency"][0] == 1.0 and out.score[0] == pytest.approx(1.5)  # not clipped to 1


def test_keyword_tags_defaults():
    k = KeywordTags()
    assert (k.per_memory, k.min_df, k.max_df_share, k.min_length, k.max_scope_share, k.only_untagged) == (
        3,
        2,
        0.1,
        4,
        0.5,
        True,
    )
