"""BM25 scoring of one set of tokenised documents, behind two interchangeable backends: `rank_bm25`
(the reference implementation) and `bm25s` (sparse, precomputed scores, the default). Both score
Robertson's BM25 with negative IDF clipped to 0 over the same tokens, so they rank the same.

A building block below the stages: the BM25, passage and feedback channels (retrieval/retrievers/) and
the concept graphs (retrieval/concept_graph.py) score with it.
"""

from __future__ import annotations

import logging
from typing import Literal

import numpy as np

Backend = Literal["bm25s", "rank_bm25"]


def bm25_scorer(backend: Backend, docs: list[list[str]], k1: float, b: float):
    """A function query-tokens -> score per document, for one scope's documents."""
    if backend == "rank_bm25":
        from rank_bm25 import BM25Okapi

        # rank_bm25 divides by zero on an empty corpus or all-empty documents.
        if not any(docs):
            return lambda tokens: np.zeros(len(docs))
        model = BM25Okapi(docs, k1=k1, b=b, epsilon=0.0)
        return lambda tokens: np.asarray(model.get_scores(tokens), dtype=np.float64)
    if backend == "bm25s":
        import bm25s

        # bm25s sets its own logger to DEBUG on import (one line per index built): keep it quiet.
        logging.getLogger("bm25s").setLevel(logging.WARNING)

        model = bm25s.BM25(k1=k1, b=b, method="robertson")
        model.index(docs, show_progress=False)
        vocab, n_docs = model.vocab_dict, len(docs)  # not `docs`: every scope's tokens would stay in memory

        def score(tokens: list[str]) -> np.ndarray:
            known = [t for t in tokens if t in vocab]
            if not known:
                return np.zeros(n_docs)
            return model.get_scores(known).astype(np.float64)

        return score
    raise ValueError(f"unknown BM25 backend {backend!r}: choose 'bm25s' or 'rank_bm25'")
