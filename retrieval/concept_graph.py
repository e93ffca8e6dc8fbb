"""Concept graphs per scope, as the graph channel and the graph-expansion stage read them.

A scope's graph joins the suite's own concepts and relations (`Corpus.knowledge`) with the ones an
ingest stage derived from the memories (`graph_concepts` / `graph_relations` annotations, see
retrieval/stages/graph_build.py). Each concept keeps the corpus indices of the memories it links;
relations are traversed in both directions, each with its relation type's weight. Nothing crosses a
scope: a concept only ever links memories of its own scope partition, and a query only reads the
graph of its own scope.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from retrieval.bm25_scorer import bm25_scorer
from retrieval.tokenize import tokenize
from retrieval.types import Corpus


@dataclass
class ScopeGraph:
    """One scope's concepts (position = concept number), their memories, and typed adjacency."""

    ids: list[str] = field(default_factory=list)
    texts: list[list[str]] = field(default_factory=list)
    memories: list[list[int]] = field(default_factory=list)
    adjacency: list[list[tuple[int, str]]] = field(default_factory=list)
    memory_concepts: dict[int, list[int]] = field(default_factory=dict)
    _search: object = None

    def concept(self, concept_id: str, text: str) -> int:
        position = self._positions.get(concept_id)
        if position is None:
            position = self._positions[concept_id] = len(self.ids)
            self.ids.append(concept_id)
            self.texts.append(tokenize(text))
            self.memories.append([])
            self.adjacency.append([])
        return position

    def __post_init__(self) -> None:
        self._positions: dict[str, int] = {}
        self._links: set[tuple[int, int]] = set()

    def link(self, concept: int, memory: int) -> None:
        if (concept, memory) not in self._links:
            self._links.add((concept, memory))
            self.memories[concept].append(memory)
            self.memory_concepts.setdefault(memory, []).append(concept)

    def relate(self, source: str, target: str, relation: str) -> None:
        a, b = self._positions.get(source), self._positions.get(target)
        if a is not None and b is not None and a != b:
            self.adjacency[a].append((b, relation))
            self.adjacency[b].append((a, relation))

    def search(self, tokens: list[str]) -> np.ndarray:
        """BM25 score of every concept (name, content, labels) for the query tokens."""
        if self._search is None:
            self._search = (
                bm25_scorer("bm25s", self.texts, 1.2, 0.75) if self.ids else (lambda t: np.zeros(0))
            )
        return self._search(tokens)


def scope_graphs(corpus: Corpus) -> dict[str, ScopeGraph]:
    """The concept graph of every scope of the corpus (suite knowledge + derived annotations)."""
    position = {mid: i for i, mid in enumerate(corpus.ids)}
    scope_of = [m.scope_key for m in corpus.memories]
    graphs: dict[str, ScopeGraph] = {}
    knowledge = corpus.knowledge
    concept_scope: dict[str, str] = {}
    for concept in knowledge.concepts:
        graph = graphs.setdefault(concept.scope_key, ScopeGraph())
        node = graph.concept(concept.id, " ".join([concept.name, concept.content, *concept.labels]))
        concept_scope[concept.id] = concept.scope_key
        for mid in concept.memory_ids:
            index = position.get(mid)
            if index is not None and scope_of[index] == concept.scope_key:  # never another scope's memory
                graph.link(node, index)
    for relation in knowledge.relations:
        key = concept_scope.get(relation.source)
        if key is not None and concept_scope.get(relation.target) == key:
            graphs[key].relate(relation.source, relation.target, relation.relation)
    for index, memory in enumerate(corpus.memories):  # concepts an ingest stage derived
        names = memory.annotations.get("graph_concepts", ())
        if not names:
            continue
        graph = graphs.setdefault(scope_of[index], ScopeGraph())
        for name in names:
            graph.link(graph.concept(f"~{name}", name), index)
    for index, memory in enumerate(corpus.memories):
        for source, target, relation in memory.annotations.get("graph_relations", ()):
            graphs[scope_of[index]].relate(f"~{source}", f"~{target}", relation)
    return graphs


def expand(
    graph: ScopeGraph,
    seeds: Mapping[int, float],
    *,
    depth: int,
    weights: Mapping[str, float],
    fan_out: int,
) -> dict[int, float]:
    """Breadth-first neighbourhood of the seed concepts, `depth` hops deep: each reached concept's
    score is the best over paths of seed score x the product of the relation weights on the path.
    From each concept at most `fan_out` neighbours are followed (best weight first, then concept
    order, so the result is deterministic); relations with weight 0 (or none given) are not followed."""
    best = dict(seeds)
    frontier = dict(seeds)
    for _ in range(depth):
        reached: dict[int, float] = {}
        for node in sorted(frontier):
            score = frontier[node]
            steps = [(score * weights.get(rel, 0.0), nb) for nb, rel in graph.adjacency[node]]
            steps = sorted((s for s in steps if s[0] > 0), key=lambda s: (-s[0], s[1]))[:fan_out]
            for value, neighbour in steps:
                if value > best.get(neighbour, 0.0) and value > reached.get(neighbour, 0.0):
                    reached[neighbour] = value
        if not reached:
            break
        best.update(reached)
        frontier = reached
    return best
