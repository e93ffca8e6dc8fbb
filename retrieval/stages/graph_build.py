"""Graph build (ingest): derive a concept graph from the memories when a suite holds none.

Per scope, deterministic and offline: a memory's concepts are its `max_concepts` most distinctive
terms (shared tokenizer; tf x idf, terms in at least `min_df` memories and at most `max_df` of the
scope's memories, so neither one-off words nor everyday words become concepts). Two concepts that are
key terms of the same memory in at least `min_cooccurrence` memories are `related_to`; a concept is
`part_of` the session (`session_field` in the memory's metadata, e.g. BEAM's batch) it appears in.
The result is written as annotations (`graph_concepts`: the memory's concept names;
`graph_relations`: the relations first evidenced by this memory); retrieval/concept_graph.py assembles them.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

from retrieval.stage import IngestStage, Range
from retrieval.tokenize import tokenize
from retrieval.types import Memory


@dataclass(frozen=True, kw_only=True)
class GraphBuild(IngestStage):
    name = "graph_build"
    ranges = {
        "max_concepts": Range(ge=1),
        "min_df": Range(ge=1),
        "max_df": Range(gt=0, le=1),
        "min_cooccurrence": Range(ge=1),
    }
    max_concepts: int = 6
    min_df: int = 2
    max_df: float = 0.02
    min_cooccurrence: int = 1
    session_field: str | None = "batch"

    def __call__(self, memories: Sequence[Memory]) -> list[Memory]:
        scopes: dict[str, list[int]] = defaultdict(list)
        for i, memory in enumerate(memories):
            scopes[memory.scope_key].append(i)
        out = list(memories)
        for part in scopes.values():
            for i, (concepts, relations) in zip(part, self._scope([memories[i] for i in part]), strict=True):
                out[i] = memories[i].annotate(graph_concepts=concepts, graph_relations=relations)
        return out

    def _scope(
        self, memories: list[Memory]
    ) -> list[tuple[tuple[str, ...], tuple[tuple[str, str, str], ...]]]:
        counts = [Counter(t for t in tokenize(m.text) if len(t) > 2 and not t.isdigit()) for m in memories]
        df = Counter(t for c in counts for t in c)
        ceiling = max(self.min_df, self.max_df * len(memories))
        idf = {t: math.log(len(memories) / n) for t, n in df.items() if self.min_df <= n <= ceiling}
        keys = []
        for c in counts:
            scored = sorted(((-tf * idf[t], t) for t, tf in c.items() if t in idf))[: self.max_concepts]
            keys.append(tuple(sorted(t for _, t in scored)))
        pairs = Counter(pair for k in keys for pair in combinations(k, 2))
        seen: set[tuple[str, str, str]] = set()
        out = []
        for memory, k in zip(memories, keys, strict=True):
            relations = [
                (a, b, "related_to") for a, b in combinations(k, 2) if pairs[a, b] >= self.min_cooccurrence
            ]
            session = memory.metadata.get(self.session_field) if self.session_field else None
            concepts = k
            if session is not None and k:
                concepts = (*k, f"session {session}")
                relations += [(t, f"session {session}", "part_of") for t in k]
            fresh = tuple(r for r in relations if r not in seen)
            seen.update(fresh)
            out.append((concepts, fresh))
        return out
