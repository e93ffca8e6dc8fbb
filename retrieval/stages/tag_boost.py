"""Query tag inference and the soft tag boost (a rank stage).

Query tags, cheapest first, each step only when the ones before found nothing:
  1. hashtags in the query (`#lease` -> lease);
  2. the tag vocabulary (every tag on the suite's memories, deduplicated) matched as whole words in
     the lowercased query (multi-word and hyphenated tags match as token sequences: `billing-api`);
  3. the fallback: `embedding` = tag names whose cosine similarity to the query (injected encoder)
     is at least `threshold`, the best `fallback_top`; `none` = nothing.
Boost: overlap = |memory tags n query tags|, score x min(max_boost, 1 + overlap x step). A soft signal
only, never a filter; it multiplies the score whatever stage came before, so it sits outside any
recency cap (the decay stage caps its own factor). No query tags -> the candidates come back as given.
Memory tags are the suite's `tags` plus the `auto_tags` an ingest stage (keyword_tags) wrote.
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from retrieval.encoder import SentenceEncoder
from retrieval.stage import Range, RankStage
from retrieval.types import Candidates, Corpus, Query

if TYPE_CHECKING:  # scipy (~0.1 s) when a vocabulary is built: the stage scan behind --help imports this
    from scipy import sparse

_HASHTAG = re.compile(r"#([A-Za-z0-9][\w-]*)")
_WORD = re.compile(r"[a-z0-9]+")


def tag_key(tag: str) -> str:
    """Canonical form: lowercased word tokens joined by one space (`Billing-API` -> `billing api`)."""
    return " ".join(_WORD.findall(tag.lower()))


@dataclass(frozen=True, eq=False)
class TagVocabulary:
    """Every tag of a corpus (canonical keys, sorted) and a memories x tags incidence matrix."""

    keys: tuple[str, ...]
    column: dict[str, int]
    incidence: sparse.csr_matrix
    longest: int

    @classmethod
    def of(cls, corpus: Corpus, fields: tuple[str, ...]) -> TagVocabulary:
        per_memory = [
            {k for f in fields for t in (m.get(f) or ()) if (k := tag_key(str(t)))} for m in corpus.memories
        ]
        keys = tuple(sorted(set().union(*per_memory))) if per_memory else ()
        col = {k: j for j, k in enumerate(keys)}
        rows = [i for i, tags in enumerate(per_memory) for _ in tags]
        cols = [col[k] for tags in per_memory for k in tags]
        from scipy import sparse  # see TYPE_CHECKING above

        incidence = sparse.csr_matrix(
            (np.ones(len(rows)), (rows, cols)), shape=(len(corpus), len(keys)), dtype=np.float64
        )
        return cls(keys, col, incidence, max((k.count(" ") + 1 for k in keys), default=0))


# Derived per-corpus data (vocabulary, tag-name vectors), built once per corpus object and dropped with it.
_VOCABULARIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@dataclass(frozen=True, kw_only=True)
class TagBoost(RankStage):
    name = "tag_boost"
    ranges = {"step": Range(), "max_boost": Range(), "threshold": Range(), "fallback_top": Range(ge=0)}
    step: float = 0.15
    max_boost: float = 1.5
    tag_fields: tuple[str, ...] = ("tags", "auto_tags")
    fallback: Literal["embedding", "none"] = "embedding"
    encoder: SentenceEncoder | None = None
    threshold: float = 0.5
    fallback_top: int = 3

    def vocabulary(self, corpus: Corpus) -> TagVocabulary:
        slot = _VOCABULARIES.setdefault(corpus, {})
        key = tuple(self.tag_fields)
        if key not in slot:
            slot[key] = TagVocabulary.of(corpus, key)
        return slot[key]

    def _name_vectors(self, vocab: TagVocabulary) -> np.ndarray:
        slot = _VOCABULARIES.setdefault(vocab, {})  # keyed by the vocabulary, itself cached per corpus
        fp = self.encoder.fingerprint()
        if fp not in slot:
            slot[fp] = self.encoder.encode(list(vocab.keys), role="document")
        return slot[fp]

    def query_tags(self, query: Query, vocab: TagVocabulary) -> list[str]:
        """Inferred tags (canonical keys), by the first rule that finds any."""
        hashtags = sorted({tag_key(h) for h in _HASHTAG.findall(query.text)} - {""})
        if hashtags:
            return hashtags
        words = _WORD.findall(query.text.lower())
        grams = {
            " ".join(words[i : i + n]) for n in range(1, vocab.longest + 1) for i in range(len(words) - n + 1)
        }
        matched = sorted(grams.intersection(vocab.keys))
        if matched or self.fallback == "none" or not vocab.keys:
            return matched
        if self.fallback != "embedding":
            raise ValueError(f"tag_boost.fallback must be 'embedding' or 'none', not {self.fallback!r}")
        if self.encoder is None:
            raise ValueError("tag_boost.fallback=embedding needs an encoder (encoder: ${encoder})")
        names = self._name_vectors(vocab)
        sims = names @ self.encoder.encode([query.text], role="query")[0]
        best = np.argsort(-sims, kind="stable")[: self.fallback_top]
        return [vocab.keys[j] for j in best if sims[j] >= self.threshold]

    def __call__(self, query: Query, candidates: Candidates) -> Candidates:
        vocab = self.vocabulary(candidates.corpus)
        tags = set(self.query_tags(query, vocab))
        cols = sorted(vocab.column[k] for k in tags if k in vocab.column)
        if not cols or len(candidates) == 0:
            return candidates
        overlap = np.asarray(vocab.incidence[candidates.index][:, cols].sum(axis=1)).ravel()
        multiplier = np.minimum(self.max_boost, 1.0 + overlap * self.step)
        return candidates.with_score(
            "tag_boost",
            candidates.score * multiplier,
            extra={"tag_overlap": overlap, "tag_multiplier": multiplier},
        )
