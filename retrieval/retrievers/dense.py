"""Dense channel: cosine similarity between bi-encoder embeddings, within the query's scope.

Document vectors come from the encoder's on-disk cache (computed once per text and model); each
scope keeps its own matrix, so a query is one matrix-vector product over its own memories only.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from retrieval.encoder import SentenceEncoder
from retrieval.stage import Retriever, top_n
from retrieval.types import Corpus, Query


@functools.lru_cache(maxsize=1)
def _blas_controller():
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def _one_blas_thread():
    """One BLAS thread for a query's matrix-vector product. Measured on the shared 2-core box
    (reports/benchmarks/backends.md, "Dense search threads"): at 2,432 memories p95 0.4 ms instead of
    8-70 ms (load-dependent; no thread wake-ups), and less CPU per query at 2.4k, 38k and 100k."""
    return _blas_controller().limit(limits=1, user_api="blas")


class _DenseIndex:
    def __init__(self, corpus: Corpus, retriever: DenseRetriever):
        self._encoder = retriever.encoder
        self._top_n = retriever.top_n
        vectors = self._encoder.encode(corpus.texts(), role="document")
        self._scopes = {
            key: (part, vectors[part]) for key in corpus.scopes for part in [corpus.partition(key)]
        }

    def search(self, query: Query) -> tuple[np.ndarray, np.ndarray]:
        if query.scope_key not in self._scopes:
            return np.empty(0, dtype=np.int64), np.empty(0)
        part, matrix = self._scopes[query.scope_key]
        q = self._encoder.encode([query.text], role="query")[0]
        with _one_blas_thread():
            scores = (matrix @ q).astype(np.float64)  # vectors are normalised: dot product = cosine
        best = top_n(scores, self._top_n)
        return part[best], scores[best]


@dataclass(frozen=True, kw_only=True)
class DenseRetriever(Retriever):
    name = "dense"
    channel: str = "dense"
    encoder: SentenceEncoder

    def build(self, corpus: Corpus) -> _DenseIndex:
        return _DenseIndex(corpus, self)
