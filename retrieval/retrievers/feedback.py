"""Feedback channel: BM25 search over the scope's feedback records (topic and prediction: what an
agent would be about to say), returning the memories each matching correction is about.

A record's score is its BM25 score times its `importance` (0..1); a memory scores the best of the
records that name it. Records come from the suite (`feedback.jsonl`); a scope without any returns
nothing, so fusing this channel changes nothing there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from retrieval import progress
from retrieval.bm25_scorer import bm25_scorer
from retrieval.stage import Range, Retriever, top_n
from retrieval.tokenize import tokenize
from retrieval.types import Corpus, Query

FIELDS = ("topic", "prediction", "correction", "context")


class _FeedbackIndex:
    def __init__(self, corpus: Corpus, retriever: FeedbackRetriever):
        self._top_n = retriever.top_n
        position = {mid: i for i, mid in enumerate(corpus.ids)}
        scope_of = [m.scope_key for m in corpus.memories]
        grouped: dict[str, list] = {}
        for record in corpus.knowledge.feedback:
            grouped.setdefault(record.scope_key, []).append(record)
        self._scopes = {}
        for key in progress.by_scope(grouped):
            records = grouped[key]
            docs = [tokenize(" ".join(getattr(r, f) for f in retriever.fields)) for r in records]
            links = [  # only memories of the record's own scope, whatever the record says
                [position[m] for m in r.memory_ids if m in position and scope_of[position[m]] == key]
                for r in records
            ]
            weight = np.array([r.importance for r in records], dtype=np.float64)
            self._scopes[key] = (bm25_scorer("bm25s", docs, retriever.k1, retriever.b), weight, links)

    def search(self, query: Query) -> tuple[np.ndarray, np.ndarray]:
        if query.scope_key not in self._scopes:
            return np.empty(0, dtype=np.int64), np.empty(0)
        score, weight, links = self._scopes[query.scope_key]
        scores = score(tokenize(query.text)) * weight
        best: dict[int, float] = {}
        for r in np.flatnonzero(scores > 0):
            for memory in links[r]:
                best[memory] = max(best.get(memory, 0.0), float(scores[r]))
        index = np.array(sorted(best), dtype=np.int64)
        values = np.array([best[i] for i in index], dtype=np.float64)
        keep = top_n(values, self._top_n)
        return index[keep], values[keep]


@dataclass(frozen=True, kw_only=True)
class FeedbackRetriever(Retriever):
    name = "feedback"
    ranges = {"k1": Range(ge=0), "b": Range(ge=0, le=1)}
    channel: str = "feedback"
    fields: Sequence[str] = ("topic", "prediction")
    k1: float = 1.2
    b: float = 0.75

    def config_problems(self) -> list[tuple[str, str]]:
        bad = [f for f in self.fields if f not in FIELDS]
        return (
            [("fields", f"unknown record fields {bad} (known: {', '.join(FIELDS)})")]
            if bad or not self.fields
            else []
        )

    def build(self, corpus: Corpus) -> _FeedbackIndex:
        return _FeedbackIndex(corpus, self)
