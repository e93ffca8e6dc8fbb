"""bm25s (default, fast) and rank-bm25 (reference) rank BEAM the same way."""

from __future__ import annotations

import numpy as np

from retrieval.pipeline import Pipeline
from retrieval.retrievers.bm25 import BM25Retriever


def _assert_same_rankings(suite) -> None:
    runs = {
        backend: Pipeline((BM25Retriever(backend=backend, top_n=10),), depth=100).run(
            suite.memories, suite.queries, progress=False
        )
        for backend in ("bm25s", "rank_bm25")
    }
    fast, ref = runs["bm25s"].ranked, runs["rank_bm25"].ranked
    same = 0
    for a, b in zip(fast, ref, strict=True):
        # bm25s omits BM25's constant (k1 + 1) factor; float32 vs float64 differ in the 6th digit.
        assert np.allclose(a.scores * (1.5 + 1), b.scores, rtol=1e-4), a.query_id
        same += a.memory_ids == b.memory_ids
    # identical top-10 lists except where two documents tie to float32 precision
    assert same >= len(fast) - 2, f"{len(fast) - same} queries differ"


def test_both_backends_rank_beam_100k_identically(beam_suite):
    _assert_same_rankings(beam_suite)


def test_both_backends_rank_a_generated_beam_suite_identically(beam_synth_dir):
    from experiments.suites.beam import load_beam

    _assert_same_rankings(load_beam(beam_synth_dir))
