"""A built index keeps what it searches with, never its input: at BEAM 10M's size (240,000 memories of
~320 words) every scope's token lists held on would be gigabytes (the bm25 run's peak RSS was 4.4 GiB)."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from retrieval.bm25_scorer import bm25_scorer


class Docs(list):
    """A list that a weak reference can watch."""


@pytest.mark.parametrize("backend", ["bm25s", "rank_bm25"])
def test_a_bm25_scorer_lets_its_documents_go(backend):
    docs = Docs([["alpha", "beta"], ["beta", "gamma", "gamma"], ["delta"]])
    watch = weakref.ref(docs)
    score = bm25_scorer(backend, docs, 1.2, 0.75)
    del docs
    gc.collect()
    assert watch() is None  # nothing the scorer keeps refers to the token lists
    assert score(["gamma"]).argmax() == 1 and np.array_equal(score(["zeta"]), np.zeros(3))
