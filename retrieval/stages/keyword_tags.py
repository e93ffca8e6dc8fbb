"""Keyword tagging at ingest: give memories that carry no tags a few distinctive keywords as tags.

BEAM messages have no tags, so the tag-inference variant needs some. Per scope (one conversation,
one agent's project), every memory's terms (the shared BM25 tokenizer, stop words removed) are scored
by tf x idf within the scope; terms that occur in fewer than `min_df` memories (typos, one-offs) or in
more than `max_df_share` of them (the conversation's theme, which tells memories apart no better than
nothing) are not tags, nor are terms found in more than `max_scope_share` of the scopes (general
words; applied when there are at least 4 scopes). Each memory keeps its `per_memory` best terms as
the annotation `auto_tags` (deterministic: ties by term). Suite-provided `tags` are kept; with
`only_untagged` a memory that already has tags gets none added, so a suite with its own tags
keeps exactly those.

Data flow: suite memories -> keyword_tags -> retrievers ... -> tag_boost (reads tags + auto_tags).
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from retrieval.stage import IngestStage, Range
from retrieval.tokenize import tokenize
from retrieval.types import Memory

AUTO_TAGS = "auto_tags"


@dataclass(frozen=True, kw_only=True)
class KeywordTags(IngestStage):
    name = "keyword_tags"
    ranges = {
        "per_memory": Range(ge=0),
        "min_df": Range(ge=1),
        "max_df_share": Range(gt=0, le=1),
        "min_length": Range(ge=1),
        "max_scope_share": Range(ge=0, le=1),
    }
    per_memory: int = 3
    min_df: int = 2
    max_df_share: float = 0.1
    min_length: int = 4
    max_scope_share: float = 0.5
    only_untagged: bool = True

    def _candidate(self, term: str) -> bool:
        return len(term) >= self.min_length and term.isalpha()

    def __call__(self, memories: Sequence[Memory]) -> list[Memory]:
        # Interned, in tuples: one string per distinct term, not one per occurrence (at BEAM 10M's shape,
        # 240,000 memories of ~150 candidate terms each, lists of fresh strings took 2 GB more).
        tokens = [tuple(sys.intern(t) for t in tokenize(m.text) if self._candidate(t)) for m in memories]
        df_by_scope: dict[str, Counter] = {}
        size: Counter = Counter()
        for m, toks in zip(memories, tokens, strict=True):
            df_by_scope.setdefault(m.scope_key, Counter()).update(set(toks))
            size[m.scope_key] += 1
        # A term used in most scopes is a general word ("about", "before"), not a topic: with a
        # suite-wide tag vocabulary it would match nearly every query. Needs a few scopes to tell.
        spread = Counter(t for df in df_by_scope.values() for t in df)
        general = {t for t, c in spread.items() if c > self.max_scope_share * len(df_by_scope)}
        if len(df_by_scope) < 4:
            general = set()
        out = []
        for m, toks in zip(memories, tokens, strict=True):
            if self.only_untagged and m.tags:
                out.append(m.annotate(**{AUTO_TAGS: ()}))
                continue
            df, n = df_by_scope[m.scope_key], size[m.scope_key]
            scores = {
                term: tf * math.log(n / df[term])
                for term, tf in Counter(toks).items()
                if self.min_df <= df[term] <= self.max_df_share * n and term not in general
            }
            best = sorted(scores, key=lambda t: (-scores[t], t))[: self.per_memory]
            out.append(m.annotate(**{AUTO_TAGS: tuple(best)}))
        return out
