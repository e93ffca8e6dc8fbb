"""Caches work per scope: after one conversation changed, a re-run retrieves and embeds that conversation
only, and answers exactly what a cold run on the changed suite answers.

Real components: a BEAM-format suite written by the project's generator and read by the BEAM loader, the
BM25 channel, a dense channel on a tiny real sentence-transformers model, RRF, the on-disk caches.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from experiments.suites.beam import load_beam
from experiments.suites.generators.beam_synth import generate
from retrieval.encoder import SentenceEncoder
from retrieval.fusions.rrf import RRFFusion
from retrieval.pipeline import Pipeline
from retrieval.retrievers.bm25 import BM25Retriever
from retrieval.retrievers.dense import DenseRetriever
from retrieval.reuse import CandidateCache
from tests.retrieval.test_cross_encoder import build_tiny_cross_encoder


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    out = tmp_path_factory.mktemp("beam3")
    generate(out, n_conversations=3, messages_per_conversation=120, seed=2)
    return load_beam(out)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    return str(build_tiny_cross_encoder(tmp_path_factory.mktemp("tiny_model")))


def changed_in_one_conversation(suite):
    """The suite with one memory of its second conversation reworded."""
    second = sorted({m.scope["conversation"] for m in suite.memories})[1]
    at = next(i for i, m in enumerate(suite.memories) if m.scope["conversation"] == second)
    memories = list(suite.memories)
    memories[at] = dataclasses.replace(memories[at], text=memories[at].text + " Reworded since.")
    return dataclasses.replace(suite, memories=tuple(memories)), second


def run(pipeline, suite, cache=None):
    hashed = suite.content_hash
    return pipeline.run(suite.memories, suite.queries, suite_hash=hashed, cache=cache, progress=False)


def test_a_rerun_after_one_conversation_changed_retrieves_that_conversation_only(suite, tmp_path, tiny_model):
    cache_dir = tmp_path / "cache"
    encoder = SentenceEncoder(model=tiny_model, cache_dir=str(cache_dir / "embeddings"), show_progress=False)
    pipeline = Pipeline(
        (BM25Retriever(top_n=20), DenseRetriever(encoder=encoder, top_n=20), RRFFusion()), depth=20
    )
    candidates = CandidateCache(cache_dir / "candidates")
    first = run(pipeline, suite, candidates)
    scopes = {m.scope_key for m in suite.memories}
    assert len(list((cache_dir / "candidates").glob("scope-*.npz"))) == len(scopes) == 3
    assert "scopes" not in first.cache["prefix_candidates"]  # cold: nothing reused

    changed, _ = changed_in_one_conversation(suite)
    before = dict(encoder.stats)
    again = run(pipeline, changed, candidates)
    assert again.cache["prefix_candidates"] == {
        "hit": False,
        "source": None,
        "scopes": {"reused": 2, "retrieved": 1},
    }
    # embeddings are keyed per text: the one reworded memory is the only new one (its scope's queries too,
    # but those were embedded in the first run and hit)
    assert encoder.stats["misses"] - before["misses"] == 1
    assert len(list((cache_dir / "candidates").glob("scope-*.npz"))) == 4  # one new entry, for that scope

    cold = run(pipeline, changed)  # no cache at all
    for x, y in zip(again.ranked, cold.ranked, strict=True):
        assert x.memory_ids == y.memory_ids
        np.testing.assert_array_equal(x.scores, y.scores)
    for r in again.ranked:  # part of the prefix was reused: no latency is replayed or half-measured
        assert math.isnan(r.latency_ms)


def test_every_scope_from_its_own_entry_is_a_disk_hit(suite, tmp_path):
    pipeline = Pipeline((BM25Retriever(top_n=20),), depth=20)
    candidates = CandidateCache(tmp_path / "candidates")
    run(pipeline, suite, candidates)
    for whole in (tmp_path / "candidates").glob("[!s]*.npz"):  # only the scopes' entries are left
        whole.unlink()
    again = run(pipeline, suite, candidates)
    assert again.cache["prefix_candidates"] == {
        "hit": True,
        "source": "disk",
        "scopes": {"reused": 3, "retrieved": 0},
    }
    cold = run(pipeline, suite)
    assert [r.memory_ids for r in again.ranked] == [r.memory_ids for r in cold.ranked]


def test_a_scope_entry_is_keyed_by_that_scope_only(suite):
    from retrieval.reuse import scope_digests
    from retrieval.types import Corpus

    changed, conversation = changed_in_one_conversation(suite)
    before = scope_digests(Corpus(suite.memories), suite.queries)
    after = scope_digests(Corpus(changed.memories), changed.queries)
    moved = {scope for scope in before if before[scope] != after[scope]}
    assert len(moved) == 1 and conversation in next(iter(moved))


def test_a_channel_reading_a_run_file_is_never_split_by_scope(suite, tmp_path):
    # A run file names every scope's queries: its channel cannot be built on some scopes only.
    from retrieval.retrievers.trec_run import TrecRunRetriever

    ranked = run(Pipeline((BM25Retriever(top_n=5),), depth=5), suite).ranked
    lines = [
        f"{r.query_id} Q0 {m} {i} {s} bm25"
        for r in ranked
        for i, (m, s) in enumerate(zip(r.memory_ids, r.scores, strict=True))
    ]
    (tmp_path / "run.txt").write_text("\n".join(lines) + "\n")
    pipeline = Pipeline((TrecRunRetriever(path=str(tmp_path / "run.txt"), top_n=5),), depth=5)
    first = run(pipeline, suite, CandidateCache(tmp_path / "candidates"))
    assert not list((tmp_path / "candidates").glob("scope-*.npz"))
    again = run(pipeline, suite, CandidateCache(tmp_path / "candidates"))  # the suite's entry still answers
    assert again.cache["prefix_candidates"] == {"hit": True, "source": "disk"}
    assert [r.memory_ids for r in again.ranked] == [r.memory_ids for r in first.ranked]
