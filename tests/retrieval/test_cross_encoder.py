"""The cross-encoder rerank stage: its rule (top N reordered, cut to K), its modes, its score cache,
its off switch, and a clear error for a missing model. A tiny random CrossEncoder built here stands
in for a trained one (no model can be downloaded on these machines)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from retrieval.encoder import ModelNotFoundError
from retrieval.pipeline import Pipeline
from retrieval.reranker import CrossEncoderScorer
from retrieval.retrievers.bm25 import BM25Retriever
from retrieval.stages.cross_encoder import CrossEncoderRerank
from retrieval.types import Candidates, Corpus
from tests.support import build_tiny_bert, memory, query


def build_tiny_cross_encoder(folder: Path, seed: int = 0) -> Path:
    """A randomly initialised 2-layer BERT with one output logit, saved with MiniLM's tokenizer."""
    return build_tiny_bert(folder, cross_encoder=True, seed=seed)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return build_tiny_cross_encoder(tmp_path_factory.mktemp("tiny_ce"))


@dataclass(frozen=True, kw_only=True)
class FixedScorer:
    """A scorer with known logits per memory text, counting what it was asked."""

    logits: dict[str, float]
    calls: list = field(default_factory=list, compare=False)

    def fingerprint(self) -> str:
        return "fixed"

    def score(self, query: str, texts) -> np.ndarray:
        self.calls.append(list(texts))
        return np.array([self.logits[t] for t in texts], dtype=np.float64)


TEXTS = [f"memory number {i}" for i in range(6)]


def candidates_in_order() -> Candidates:
    """Six candidates, first-stage scores 6..1 (memory 0 first)."""
    corpus = Corpus(tuple(memory(f"m{i}", t) for i, t in enumerate(TEXTS)))
    score = np.arange(6, 0, -1, dtype=np.float64)
    return Candidates(corpus, np.arange(6), {"fused": score, "score": score})


# CE logits: reverse of the first stage within the head of 4, so every mode has work to do.
LOGITS = {TEXTS[0]: 0.1, TEXTS[1]: 0.2, TEXTS[2]: 0.3, TEXTS[3]: 5.0, TEXTS[4]: 9.0, TEXTS[5]: 9.0}


def rerank(**config) -> tuple[Candidates, FixedScorer]:
    scorer = FixedScorer(logits=LOGITS)
    stage = CrossEncoderRerank(scorer=scorer, **{"top_n": 4, "top_k": 3, **config})
    return stage(query("q", "which memory"), candidates_in_order()), scorer


def ids(candidates: Candidates) -> list[str]:
    return list(candidates.corpus.ids[candidates.index])


def test_replace_orders_the_top_n_by_cross_encoder_and_cuts_to_k():
    out, scorer = rerank(mode="replace")
    assert ids(out) == ["m3", "m2", "m1"]
    assert scorer.calls == [TEXTS[:4]]  # only the head is scored: m4, m5 (CE 9.0) are out of reach
    np.testing.assert_array_equal(out.columns["cross_encoder"], [5.0, 0.3, 0.2])
    np.testing.assert_array_equal(out.columns["first_rank"], [4, 3, 2])
    np.testing.assert_array_equal(out.columns["fused"], [3.0, 4.0, 5.0])  # earlier columns travel along
    assert np.all(np.diff(out.score) < 0)


def test_tail_keep_returns_the_whole_head_then_the_rest_in_first_stage_order():
    out, _ = rerank(mode="replace", tail="keep")
    assert ids(out) == ["m3", "m2", "m1", "m0", "m4", "m5"]
    assert np.all(np.diff(out.score) < 0)  # scores agree with the order (trec_eval sorts by score)
    assert np.isnan(out.columns["cross_encoder"][4:]).all()


def test_rrf_mode_fuses_first_stage_rank_and_cross_encoder_rank():
    out, _ = rerank(mode="rrf", weight=0.5, rrf_k=60, tail="keep")
    # Ranks (first, ce) m0 (1,4) m1 (2,3) m2 (3,2) m3 (4,1): all sum to 5; m0/m3 have equal RRF
    # (1/61 + 1/64) > m1/m2 (1/62 + 1/63); ties keep the first-stage order.
    assert ids(out)[:4] == ["m0", "m3", "m1", "m2"]
    expected = 0.5 / (60 + np.array([4, 1, 3, 2])) + 0.5 / (60 + np.array([1, 4, 2, 3]))
    np.testing.assert_allclose(out.score[:4], expected)


def test_rrf_weight_one_is_the_cross_encoder_order_and_zero_the_first_stage_order():
    assert ids(rerank(mode="rrf", weight=1.0)[0]) == ids(rerank(mode="replace")[0])
    assert ids(rerank(mode="rrf", weight=0.0)[0]) == ["m0", "m1", "m2"]


def test_weighted_mode_blends_min_max_normalised_scores():
    out, _ = rerank(mode="weighted", weight=0.3, tail="keep")
    ce = np.array([0.1, 0.2, 0.3, 5.0])
    first = np.array([6.0, 5.0, 4.0, 3.0])
    blend = 0.3 * (ce - ce.min()) / np.ptp(ce) + 0.7 * (first - first.min()) / np.ptp(first)
    order = np.argsort(-blend, kind="stable")
    assert ids(out)[:4] == [f"m{i}" for i in order]
    np.testing.assert_allclose(out.score[:4], blend[order])


def test_fewer_candidates_than_top_n_and_none_at_all():
    stage = CrossEncoderRerank(scorer=FixedScorer(logits=LOGITS), top_n=16, top_k=8, mode="replace")
    out = stage(query("q", "x"), candidates_in_order().top(2))
    assert ids(out) == ["m1", "m0"]
    empty = stage(query("q", "x"), candidates_in_order().top(0))
    assert len(empty) == 0


def test_bad_config_is_refused():
    with pytest.raises(ValueError, match="mode"):
        CrossEncoderRerank(scorer=FixedScorer(logits={}), mode="max")
    with pytest.raises(ValueError, match="top_k"):
        CrossEncoderRerank(scorer=FixedScorer(logits={}), top_n=4, top_k=8)


def test_real_cross_encoder_scores_are_cached_on_disk_and_a_second_call_hits(tiny_model, tmp_path):
    scorer = CrossEncoderScorer(model=str(tiny_model), max_length=32, cache_dir=str(tmp_path / "scores"))
    first = scorer.score("which database", TEXTS)
    assert first.shape == (6,) and np.isfinite(first).all() and len(set(first.round(6))) > 1
    assert scorer.stats == {"hits": 0, "misses": 6}
    again = scorer.score("which database", TEXTS[:3])
    assert scorer.stats == {"hits": 3, "misses": 6}
    np.testing.assert_array_equal(again, first[:3])
    # A fresh scorer (a new sweep job) reads the shards and scores nothing.
    fresh = CrossEncoderScorer(model=str(tiny_model), max_length=32, cache_dir=str(tmp_path / "scores"))
    np.testing.assert_allclose(fresh.score("which database", TEXTS), first)
    assert fresh.stats == {"hits": 6, "misses": 0}
    # Another truncation length is another model as far as scores go: its own cache.
    other = CrossEncoderScorer(model=str(tiny_model), max_length=16, cache_dir=str(tmp_path / "scores"))
    assert other.fingerprint() != scorer.fingerprint()
    other.score("which database", TEXTS[:1])
    assert other.stats["misses"] == 1


def test_a_copy_for_another_model_never_shares_scores(tiny_model, tmp_path):
    import dataclasses

    other_model = build_tiny_cross_encoder(tmp_path / "other", seed=1)
    scorer = CrossEncoderScorer(model=str(tiny_model), max_length=32, cache_dir=None)
    first = scorer.score("which database", TEXTS)
    other = dataclasses.replace(scorer, model=str(other_model))
    second = other.score("which database", TEXTS)
    assert other.stats == {"hits": 0, "misses": 6}
    assert not np.allclose(first, second)


def test_scores_are_keyed_by_query_and_memory_text(tiny_model, tmp_path):
    scorer = CrossEncoderScorer(model=str(tiny_model), max_length=32, cache_dir=str(tmp_path))
    a = scorer.score("budget for travel", TEXTS[:2])
    b = scorer.score("code formatting rules", TEXTS[:2])
    assert scorer.stats["misses"] == 4
    assert not np.allclose(a, b)


def pipeline_memories():
    texts = [
        "the flask app uses sqlite for transactions",
        "sqlite stores the expense transactions table",
        "my travel budget is 2000 dollars",
        "chart.js renders the monthly expense chart",
        "deploy the flask app on a free host",
        "transactions are exported as csv every month",
    ]
    return [memory(f"m{i}", t) for i, t in enumerate(texts)]


def test_the_stage_switched_off_is_identical_to_its_absence(tiny_model, tmp_path):
    scorer = CrossEncoderScorer(model=str(tiny_model), max_length=32, cache_dir=str(tmp_path))
    queries = [query("q1", "sqlite expense chart csv"), query("q2", "flask deploy")]
    bm25 = BM25Retriever(channel="bm25")
    plain = Pipeline((bm25,), depth=100).run(pipeline_memories(), queries, progress=False)
    off = CrossEncoderRerank(scorer=scorer, top_n=4, top_k=2, enabled=False)
    switched = Pipeline((bm25, off), depth=100).run(pipeline_memories(), queries, progress=False)
    for a, b in zip(plain.ranked, switched.ranked, strict=True):
        assert a.memory_ids == b.memory_ids
        np.testing.assert_array_equal(a.scores, b.scores)
    assert scorer.stats == {"hits": 0, "misses": 0}
    on = CrossEncoderRerank(scorer=scorer, top_n=4, top_k=2, mode="replace")
    reranked = Pipeline((bm25, on), depth=100).run(pipeline_memories(), queries, progress=False)
    assert [len(r.memory_ids) for r in reranked.ranked] == [min(2, len(a.memory_ids)) for a in plain.ranked]
    assert len(plain.ranked[0].memory_ids) > 2  # the cut is exercised
    assert all("cross_encoder" in r.timings_ms for r in reranked.ranked)
    for a, r in zip(plain.ranked, reranked.ranked, strict=True):
        assert set(r.memory_ids) <= set(a.memory_ids[:4])


def test_a_missing_local_model_is_a_clear_error_naming_it_and_how_to_get_one(tmp_path):
    missing = str(tmp_path / "no-such-model")
    stage = CrossEncoderRerank(scorer=CrossEncoderScorer(model=missing, cache_dir=None))
    with pytest.raises(ModelNotFoundError) as err:
        stage(query("q", "x"), candidates_in_order())
    message = str(err.value)
    assert missing in message and "memeval-train-reranker" in message


def test_a_missing_hub_model_offline_fails_fast_with_the_same_advice(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    scorer = CrossEncoderScorer(model="nobody-here/no-such-cross-encoder", cache_dir=None)
    with pytest.raises(ModelNotFoundError, match="nobody-here/no-such-cross-encoder.*memeval-train-reranker"):
        scorer.score("q", ["a memory"])


def test_defaults_rerank_16_to_8_and_the_yaml_states_every_default():
    import dataclasses

    from hydra.utils import instantiate

    from experiments.configure.compose import compose_config

    cfg = compose_config(["variant=cross_encoder"])
    assert list(cfg.variant.stages) == ["bm25", "dense", "fusion", "cross_encoder"]
    stage = instantiate(cfg.stage.cross_encoder, _convert_="all")
    assert (stage.top_n, stage.top_k, stage.tail) == (16, 8, "drop")
    defaults = CrossEncoderRerank(scorer=stage.scorer)
    assert dataclasses.replace(stage, scorer=None) == dataclasses.replace(defaults, scorer=None)
    # Except the backend: runs use the measured fast one (reports/benchmarks/backends.md), while the class
    # keeps torch, so library callers and tests never export a model as a side effect.
    skip = ("cache_dir", "_memory", "backend")
    yaml_scorer = {k: v for k, v in dataclasses.asdict(stage.scorer).items() if k not in skip}
    code_scorer = {k: v for k, v in dataclasses.asdict(CrossEncoderScorer()).items() if k not in skip}
    assert yaml_scorer == code_scorer
    assert (stage.scorer.backend, CrossEncoderScorer().backend) == ("openvino", "torch")
