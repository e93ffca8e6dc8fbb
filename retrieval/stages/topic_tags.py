"""Topic tagging at ingest: tag each message with the conversation's subtopics it is about.

For BEAM loaded with `topics=True` (suite option `+suite.topics=true`), every message carries its
conversation's topic.json as `metadata.topic` (eight subtopics such as "Connecting SQLite database").
A memory gets as `auto_tags` the `per_memory` subtopics whose embedding is closest to its text, if
the cosine similarity is at least `threshold` (injected encoder; the message vectors are the dense
channel's, from the same cache). Memories with suite tags (with `only_untagged`) or no topic
metadata get none. Subtopic names are phrases, so a query rarely contains one word for word: with
these tags the tag_boost stage mostly infers query tags through its embedding fallback.

Data flow: suite memories -> topic_tags -> retrievers ... -> tag_boost (reads tags + auto_tags).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from retrieval.encoder import SentenceEncoder
from retrieval.stage import IngestStage, Range
from retrieval.stages.keyword_tags import AUTO_TAGS
from retrieval.types import Memory


@dataclass(frozen=True, kw_only=True)
class TopicTags(IngestStage):
    name = "topic_tags"
    ranges = {"threshold": Range(), "per_memory": Range(ge=0)}
    encoder: SentenceEncoder
    topic_field: str = "topic"
    threshold: float = 0.3
    per_memory: int = 1
    only_untagged: bool = True

    def __call__(self, memories: Sequence[Memory]) -> list[Memory]:
        subtopics = [tuple((m.metadata.get(self.topic_field) or {}).get("subtopics") or ()) for m in memories]
        todo = [i for i, m in enumerate(memories) if subtopics[i] and not (self.only_untagged and m.tags)]
        tags: dict[int, tuple[str, ...]] = {}
        if todo:
            names = sorted({s for i in todo for s in subtopics[i]})
            name_vec = dict(zip(names, self.encoder.encode(names, role="document"), strict=True))
            texts = self.encoder.encode([memories[i].text for i in todo], role="document")
            for i, vec in zip(todo, texts, strict=True):
                options = subtopics[i]
                sims = np.array([name_vec[s] @ vec for s in options])
                best = np.argsort(-sims, kind="stable")[: self.per_memory]
                tags[i] = tuple(options[j] for j in best if sims[j] >= self.threshold)
        return [m.annotate(**{AUTO_TAGS: tags.get(i, ())}) for i, m in enumerate(memories)]
