"""A batch rank stage over many queries at once gives each query exactly what the per-query rule gives."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval.fusion_arithmetic import minmax
from retrieval.stages.conciseness_penalty import ConcisenessPenalty
from retrieval.stages.instruction_boost import InstructionBoost
from retrieval.types import CandidateBatch, Candidates, Corpus
from tests.support import memory, query

Q = query("q", "anything")


def per_query_boost(stage: InstructionBoost, c: Candidates) -> Candidates:
    """InstructionBoost as first written, one query at a time."""
    if stage.weight == 0 or len(c) == 0:
        return c
    tagged = c.attribute("fact_role") == stage.fact_role
    if stage.max_boosted is not None:
        tagged &= np.cumsum(tagged) <= stage.max_boosted
    base = minmax(c.score)
    return c.with_score(
        stage.name, base + stage.weight * tagged.astype(np.float64), extra={f"{stage.name}_base": base}
    )


def per_query_penalty(stage: ConcisenessPenalty, c: Candidates) -> Candidates:
    """ConcisenessPenalty as first written, one query at a time."""
    if stage.weight == 0 or len(c) == 0:
        return c
    words = np.array([len(str(t).split()) for t in c.attribute("text")], dtype=np.float64)
    base = minmax(c.score)
    excess = np.clip((words - stage.max_words) / stage.max_words, 0.0, 1.0)
    return c.with_score(stage.name, base - stage.weight * excess, extra={"words": words})


def random_queries(seed: int, size: int | None = None) -> tuple[Corpus, list[Candidates]]:
    """Queries of random sizes (empty and one-candidate ones among them), or all of `size` candidates (the
    usual batch, which `with_score` sorts as one matrix)."""
    rng = np.random.default_rng(seed)
    mems = [
        memory(f"m{i}", " ".join(["w"] * int(rng.integers(1, 40)))).annotate(
            fact_role="instruction" if rng.random() < 0.3 else "fact"
        )
        for i in range(300)
    ]
    corpus = Corpus(tuple(mems))
    out = []
    for q in range(int(rng.integers(1, 30))):
        n = [0, 1, 2, 50][q % 4] if q < 8 else int(rng.integers(0, 60))
        n = n if size is None else size if q % 6 else 0  # and empty ones
        index = rng.choice(len(mems), n, replace=False)
        score = rng.choice([1.0, 0.5, 0.25, 0.0, -1.0], n) if q % 3 == 0 else rng.normal(size=n)  # ties
        if q % 5 == 1:
            score = np.full(n, 0.7)  # a constant list: minmax's ones
        if q % 7 == 2 and n:
            score[int(rng.integers(0, n))] = np.nan
        score = np.sort(score)[::-1].copy()
        out.append(Candidates(corpus, index, {"bm25": rng.random(n), "score": score, "rank": np.arange(n)}))
    return corpus, out


STAGES = [
    (InstructionBoost(weight=0.3), per_query_boost),
    (InstructionBoost(weight=0.05, max_boosted=2), per_query_boost),
    (InstructionBoost(weight=0.0), per_query_boost),
    (ConcisenessPenalty(weight=0.2, max_words=10), per_query_penalty),
]


def test_every_registered_batch_stage_has_cases_here():
    """STAGES pairs each batch stage with its per-query rule by hand; the registry's scan says which
    stages rank in batches, so a new one cannot go unchecked."""
    from experiments.configure.nodes import stage_classes
    from retrieval.stage import BatchRankStage

    batch = {c for c in stage_classes().values() if issubclass(c, BatchRankStage)}
    assert batch == {type(stage) for stage, _ in STAGES}


@pytest.mark.parametrize("size", [None, 1, 40])
@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("which", range(len(STAGES)))
def test_a_batch_stage_ranks_every_query_as_the_per_query_rule_does_to_the_bit(seed, which, size):
    stage, reference = STAGES[which]
    corpus, queries = random_queries(seed, size)
    ranked = stage.rank_each(corpus, [(c.index, c.columns) for c in queries])
    assert len(ranked) == len(queries)
    for c, (index, columns) in zip(queries, ranked, strict=True):
        expected = reference(stage, c)
        np.testing.assert_array_equal(index, expected.index)
        assert list(columns) == list(expected.columns)  # the column order ranking.csv prints
        for name, column in expected.columns.items():
            np.testing.assert_array_equal(columns[name], column)  # NaN where NaN, every bit else
            assert columns[name].dtype == column.dtype
        one = stage(Q, c)  # the per-query call: a batch of one
        np.testing.assert_array_equal(one.index, expected.index)


def test_batch_minmax_and_running_count_work_within_each_query():
    corpus, queries = random_queries(3)
    batch = CandidateBatch.of(corpus, [(c.index, c.columns) for c in queries])
    got = batch.minmax(batch.score)
    flags = batch.attribute("fact_role") == "instruction"
    counts = batch.running_count(flags)
    for i, c in enumerate(queries):
        a, b = batch.bounds[i], batch.bounds[i + 1]
        np.testing.assert_array_equal(got[a:b], minmax(c.score))
        np.testing.assert_array_equal(counts[a:b], np.cumsum(flags[a:b]))


def test_queries_whose_columns_differ_are_not_batched():
    """(The pipeline then runs the stage query by query.)"""
    corpus, queries = random_queries(1)
    parts = [(c.index, c.columns) for c in queries]
    assert CandidateBatch.of(corpus, parts) is not None
    first = dict(parts[0][1])
    assert CandidateBatch.of(corpus, [(parts[0][0], {**first, "extra": first["score"]}), *parts[1:]]) is None
    assert (
        CandidateBatch.of(corpus, [(parts[0][0], {**first, "rank": first["rank"] * 1.0}), *parts[1:]]) is None
    )
    assert CandidateBatch.of(corpus, []) is None


@pytest.mark.parametrize("k", [0, 1, 3, 100])
def test_batch_top_is_each_querys_top(k):
    corpus, queries = random_queries(6)
    batch = CandidateBatch.of(corpus, [(c.index, c.columns) for c in queries])
    for c, (index, columns) in zip(queries, batch.top(k).split(), strict=True):
        expected = c.top(k)
        np.testing.assert_array_equal(index, expected.index)
        assert list(columns) == list(expected.columns)
        for name in columns:
            np.testing.assert_array_equal(columns[name], expected.columns[name])
            assert not np.shares_memory(columns[name], c.columns[name])  # new arrays


def test_a_pipeline_from_reused_candidates_ranks_as_one_that_measures_each_query():
    """Reused prefix candidates (the batch path, two batch stages in a row, a query with no candidates)
    give the same ranked lists, columns and order as a cold run (the per-query path)."""
    from retrieval.pipeline import Pipeline
    from retrieval.retrievers.bm25 import BM25Retriever
    from retrieval.reuse import ProcessMemo
    from tests.support import tiny_suite

    suite = tiny_suite()
    queries = (*suite.queries, query("nowhere", "anything at all", scope="no-such-scope"))
    stages = (
        BM25Retriever(top_n=6),
        InstructionBoost(weight=0.4),
        ConcisenessPenalty(weight=0.3, max_words=3),
    )
    cold = Pipeline(stages, depth=100).run(suite.memories, queries, progress=False)
    memo = ProcessMemo()
    other = (stages[0], InstructionBoost(weight=0.1), stages[2])  # both rank stages re-run after it
    Pipeline(other, depth=100).run(suite.memories, queries, suite_hash="h", memo=memo, progress=False)
    warm = Pipeline(stages, depth=100).run(suite.memories, queries, suite_hash="h", memo=memo, progress=False)
    assert warm.prefix_cache_hit and not cold.prefix_cache_hit
    assert warm.cache["rank_levels_reused"] == 0  # the batch path ran both stages
    # the first stage ran batched; the query without candidates kept its own columns, so the second
    # could not line them up and ran query by query (timed)
    assert all(np.isnan(r.timings_ms["instruction_boost"]) for r in warm.ranked)
    for a, b in zip(cold.ranked, warm.ranked, strict=True):
        assert a.query_id == b.query_id and a.memory_ids == b.memory_ids
        assert list(a.columns) == list(b.columns)
        for name in a.columns:
            np.testing.assert_array_equal(a.columns[name], b.columns[name])
    assert any(not r.memory_ids for r in warm.ranked)
