"""Passage channel: a long memory scored by its best passages, so its end is read too.

MiniLM reads 256 word pieces, and BEAM messages average 319 words: whole-message dense scoring never
sees the end of about half of them. This channel cuts each memory into overlapping word windows
(retrieval/passages.py), scores every passage with a dense bi-encoder or BM25, and gives each memory
the max (top_m=1) or the sum of its top_m passage scores. It is a channel of its own (column
`passage`) rather than an option of the dense and bm25 channels: those keep their whole-message
scores and cache entries unchanged, and fusion (RRF or learned) can weigh passage evidence against
whole-message evidence as separate columns. Passage vectors go through the encoder's embedding cache;
a memory no longer than `size` words is its own single passage and reuses its whole-message vector.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from retrieval import progress
from retrieval.blas_threads import one_blas_thread
from retrieval.bm25_scorer import Backend, bm25_scorer
from retrieval.encoder import SentenceEncoder
from retrieval.passages import aggregate_passages, split_passages
from retrieval.stage import Range, Retriever, top_n
from retrieval.tokenize import tokenize
from retrieval.types import Corpus, Query


class _PassageIndex:
    def __init__(self, corpus: Corpus, retriever: PassageRetriever):
        self._r = retriever
        texts = corpus.texts()
        passages: list[str] = []
        owners: list[int] = []  # position of the passage's memory within its scope
        spans = {}
        for key in corpus.scopes:
            part = corpus.partition(key)
            start = len(passages)
            for pos, i in enumerate(part):
                pieces = split_passages(texts[i], retriever.size, retriever.stride)
                passages += pieces
                owners += [pos] * len(pieces)
            spans[key] = (part, start, len(passages))
        self.n_passages = len(passages)
        owner = np.asarray(owners, dtype=np.int64)
        self._scopes = {}
        for key in progress.by_scope(spans):
            part, lo, hi = spans[key]
            if retriever.scorer == "dense":
                # One scope at a time: the encoder persists each call's new vectors, so an interrupted
                # first build keeps the conversations it finished (passages outnumber the messages).
                score = retriever.encoder.encode(passages[lo:hi], role="document")
            else:
                docs = [tokenize(p) for p in passages[lo:hi]]
                score = bm25_scorer(retriever.backend, docs, retriever.k1, retriever.b)
            self._scopes[key] = (part, owner[lo:hi], score)

    def search(self, query: Query) -> tuple[np.ndarray, np.ndarray]:
        if query.scope_key not in self._scopes:
            return np.empty(0, dtype=np.int64), np.empty(0)
        part, owner, score = self._scopes[query.scope_key]
        if self._r.scorer == "dense":
            q = self._r.encoder.encode([query.text], role="query")[0]
            with one_blas_thread():
                passage_scores = (score @ q).astype(np.float64)
        else:
            passage_scores = score(tokenize(query.text))
        scores = aggregate_passages(passage_scores, owner, len(part), self._r.top_m)
        best = top_n(scores, self._r.top_n)
        if self._r.scorer == "bm25":
            best = best[scores[best] > 0]  # as the bm25 channel: no shared term, no lexical match
        return part[best], scores[best]


@dataclass(frozen=True, kw_only=True)
class PassageRetriever(Retriever):
    name = "passage"
    ranges = {
        "size": Range(ge=1),
        "stride": Range(ge=1),
        "top_m": Range(ge=1),
        "k1": Range(ge=0),
        "b": Range(ge=0, le=1),
    }
    channel: str = "passage"
    scorer: Literal["dense", "bm25"] = "dense"
    size: int = 128  # words per passage (MiniLM's 256 word pieces hold about 190 English words)
    stride: int = 96  # words between passage starts (size - stride words of overlap)
    top_m: int = 1  # 1: a memory scores its best passage; m > 1: the sum of its m best
    encoder: SentenceEncoder | None = None  # the dense scorer's bi-encoder
    backend: Backend = "bm25s"  # the bm25 scorer's settings, as the bm25 channel's
    k1: float = 1.5
    b: float = 0.75

    def config_problems(self) -> list[tuple[str, str]]:
        problems = []
        if isinstance(self.stride, int) and isinstance(self.size, int) and self.stride > self.size:
            problems.append(("stride", f"must be <= size ({self.size}): a larger stride skips words"))
        if self.scorer == "dense" and self.encoder is None:
            problems.append(("encoder", "the dense scorer needs an encoder"))
        return problems

    def build(self, corpus: Corpus) -> _PassageIndex:
        return _PassageIndex(corpus, self)
