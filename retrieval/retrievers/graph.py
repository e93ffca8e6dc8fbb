"""Graph channel: full-text (BM25) search over the scope's concepts, then a breadth-first expansion
through typed relations to the memories the reached concepts link.

A memory's score is the sum over reached concepts of the concept's score (BM25, scaled so the best
seed is 1, times the relation weights along its path) over 1 + ln(its number of memories): a concept
linking many memories says little about any one of them, and one linking more than `max_memories`
is skipped. Concepts come from the suite
(`concepts.jsonl`, `relations.jsonl`) and from the graph_build ingest stage (retrieval/concept_graph.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from retrieval.concept_graph import ScopeGraph, expand, scope_graphs
from retrieval.stage import Range, Retriever, top_n
from retrieval.tokenize import tokenize
from retrieval.types import RELATION_TYPES, Corpus, Query

DEFAULT_WEIGHTS = {
    "part_of": 0.0,  # a session or a whole: too broad to follow by default
    "depends_on": 0.8,
    "related_to": 0.5,
    "contradicts": 0.5,
    "refines": 0.8,
    "alternative_to": 0.5,
    "caused_by": 0.8,
    "instance_of": 0.6,
    "superseded_by": 0.9,
}


def relation_weight_problems(weights: dict[str, float]) -> list[tuple[str, str]]:
    """`weights` keys that are not one of the relation types (a stage's config problems)."""
    return [
        (f"weights[{k!r}]", f"not a relation type ({', '.join(RELATION_TYPES)})")
        for k in weights
        if k not in RELATION_TYPES
    ]


def memory_scores(
    graph: ScopeGraph, reached: dict[int, float], max_memories: int
) -> tuple[np.ndarray, np.ndarray]:
    """Corpus indices (ascending) and summed scores of the memories the reached concepts link."""
    totals: dict[int, float] = {}
    for concept, score in reached.items():
        linked = graph.memories[concept]
        share = score / (1.0 + math.log(len(linked))) if linked else 0.0
        if len(linked) > max_memories:  # a session or a common word: says nothing about one memory
            continue
        for memory in linked:
            totals[memory] = totals.get(memory, 0.0) + share
    index = np.array(sorted(totals), dtype=np.int64)
    return index, np.array([totals[i] for i in index], dtype=np.float64)


class _GraphIndex:
    def __init__(self, corpus: Corpus, retriever: GraphRetriever):
        self._graphs = corpus.derived("scope_graphs", lambda: scope_graphs(corpus))
        self._r = retriever

    def search(self, query: Query) -> tuple[np.ndarray, np.ndarray]:
        graph = self._graphs.get(query.scope_key)
        empty = np.empty(0, dtype=np.int64), np.empty(0)
        if graph is None or not graph.ids:
            return empty
        scores = graph.search(tokenize(query.text))
        seeds = top_n(scores, self._r.seeds)
        seeds = seeds[scores[seeds] > 0]
        if not len(seeds):
            return empty
        start = {int(c): float(scores[c] / scores[seeds[0]]) for c in seeds}
        reached = expand(graph, start, depth=self._r.depth, weights=self._r.weights, fan_out=self._r.fan_out)
        index, values = memory_scores(graph, reached, self._r.max_memories)
        best = top_n(values, self._r.top_n)
        return index[best], values[best]


@dataclass(frozen=True, kw_only=True)
class GraphRetriever(Retriever):
    name = "graph"
    ranges = {
        "seeds": Range(ge=1),
        "depth": Range(ge=0),
        "fan_out": Range(ge=1),
        "max_memories": Range(ge=1),
        "weights": Range(ge=0, le=1),
    }
    channel: str = "graph"
    seeds: int = 5
    depth: int = 1
    fan_out: int = 10
    max_memories: int = 50
    weights: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))

    def config_problems(self) -> list[tuple[str, str]]:
        return relation_weight_problems(self.weights)

    def build(self, corpus: Corpus) -> _GraphIndex:
        return _GraphIndex(corpus, self)
