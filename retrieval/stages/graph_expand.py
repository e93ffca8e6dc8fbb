"""Graph expansion (rank): pull the graph neighbours of the current top-k into the list.

Scores are first min-max scaled within the query (`score_norm`), so the decay means the same on
any scale (RRF scores of the top 10 differ by a few percent; BM25 scores by a factor of ten).
For each of the `top_k` best candidates, the concepts it is linked to are expanded `depth` hops
through typed relations (retrieval/concept_graph.py); every other memory those concepts link gets
`decay` x path weight x the candidate's scaled score, kept as the `graph` column (the best over parents).
A concept linking more than `max_memories` memories (a session, a common word) is not followed.
A memory already in the list keeps the larger of its score and that; one not yet there is added
(its other columns empty: NaN scores, rank 0). A neighbour always scores below its parent, so the
expansion fills the places right after the evidence it hangs on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from retrieval.concept_graph import expand, scope_graphs
from retrieval.fusion_arithmetic import minmax
from retrieval.retrievers.graph import DEFAULT_WEIGHTS, relation_weight_problems
from retrieval.stage import Range, RankStage
from retrieval.types import Candidates, Query


def _empty_like(column: np.ndarray, n: int) -> np.ndarray:
    if column.dtype.kind == "f":
        return np.full(n, np.nan)
    if column.dtype.kind in "iu":
        return np.zeros(n, dtype=column.dtype)
    if column.dtype.kind == "b":
        return np.zeros(n, dtype=bool)
    return np.full(n, None, dtype=object)


@dataclass(frozen=True, kw_only=True)
class GraphExpand(RankStage):
    name = "graph_expand"
    ranges = {
        "top_k": Range(ge=1),
        "depth": Range(ge=0),
        "fan_out": Range(ge=1),
        "max_memories": Range(ge=1),
        "decay": Range(gt=0, lt=1),
        "weights": Range(ge=0, le=1),
    }
    top_k: int = 10
    depth: int = 1
    decay: float = 0.9
    fan_out: int = 10
    max_memories: int = 10
    weights: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))

    def config_problems(self) -> list[tuple[str, str]]:
        return relation_weight_problems(self.weights)

    def __call__(self, query: Query, candidates: Candidates) -> Candidates:
        corpus = candidates.corpus
        graph = corpus.derived("scope_graphs", lambda: scope_graphs(corpus)).get(query.scope_key)
        if graph is None or not len(candidates):
            return candidates
        scaled = minmax(np.nan_to_num(candidates.score, nan=np.nanmin(candidates.score)))
        gain: dict[int, float] = {}
        for memory, score in zip(candidates.index[: self.top_k], scaled[: self.top_k], strict=True):
            seeds = dict.fromkeys(graph.memory_concepts.get(int(memory), []), 1.0)
            reached = expand(graph, seeds, depth=self.depth, weights=self.weights, fan_out=self.fan_out)
            for concept in sorted(reached):
                value = self.decay * reached[concept] * float(score)
                linked = graph.memories[concept]
                if len(linked) > self.max_memories:  # a session or a common word: too broad to follow
                    continue
                for other in linked:
                    if other != memory and value > gain.get(other, 0.0):
                        gain[other] = value
        present = {int(m): i for i, m in enumerate(candidates.index)}
        new = np.array(sorted(m for m in gain if m not in present), dtype=np.int64)
        index = np.concatenate([candidates.index, new])
        columns = {k: np.concatenate([v, _empty_like(v, len(new))]) for k, v in candidates.columns.items()}
        graph_col = np.array([gain.get(int(m), 0.0) for m in index])
        scaled = np.concatenate([scaled, np.zeros(len(new))])
        expanded = Candidates(corpus, index, columns)
        extra = {"graph": graph_col, "score_norm": scaled}
        return expanded.with_score("graph_expand", np.fmax(scaled, graph_col), extra=extra)
