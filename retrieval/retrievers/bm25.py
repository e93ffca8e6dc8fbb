"""BM25 channel: one lexical index per scope, behind two interchangeable backends.

`rank_bm25` is the reference implementation; `bm25s` (sparse, precomputed scores) is much faster
and the default. Both score the same model, Robertson's BM25 with negative IDF clipped to 0
(rank-bm25 with epsilon=0; bm25s method="robertson"), over the same tokens, so they rank the same
(bm25s omits the constant (k1+1) factor, which changes no order). tests/ and the benchmark check it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from retrieval import progress
from retrieval.bm25_scorer import Backend, bm25_scorer
from retrieval.stage import Range, Retriever, top_n
from retrieval.tokenize import tokenize
from retrieval.types import Corpus, Query


class _BM25Index:
    def __init__(self, corpus: Corpus, retriever: BM25Retriever):
        self._top_n = retriever.top_n
        self._scopes = {}
        texts = corpus.texts()
        for key in progress.by_scope(corpus.scopes):
            part = corpus.partition(key)
            docs = [tokenize(texts[i]) for i in part]
            self._scopes[key] = (part, bm25_scorer(retriever.backend, docs, retriever.k1, retriever.b))

    def search(self, query: Query) -> tuple[np.ndarray, np.ndarray]:
        if query.scope_key not in self._scopes:
            return np.empty(0, dtype=np.int64), np.empty(0)
        part, score = self._scopes[query.scope_key]
        scores = score(tokenize(query.text))
        best = top_n(scores, self._top_n)
        best = best[scores[best] > 0]  # a document sharing no query term is not a lexical match
        return part[best], scores[best]


@dataclass(frozen=True, kw_only=True)
class BM25Retriever(Retriever):
    name = "bm25"
    ranges = {"k1": Range(ge=0), "b": Range(ge=0, le=1)}
    channel: str = "bm25"
    backend: Backend = "bm25s"
    k1: float = 1.5
    b: float = 0.75

    def build(self, corpus: Corpus) -> _BM25Index:
        return _BM25Index(corpus, self)
