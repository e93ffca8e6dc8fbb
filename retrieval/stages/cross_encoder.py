"""Cross-encoder rerank: reorder the top N first-stage candidates by a cross-encoder, keep the top K.

Rank stage, after fusion (and any boosts). The head is the first `top_n` candidates in the order
the stage receives them; the cross-encoder scores each (query, memory text) pair through the
injected `CrossEncoderScorer` (lazy model, on-disk score cache). `mode` says how its scores set
the head's new order:
  replace   the cross-encoder logit alone;
  rrf       weight / (rrf_k + ce_rank) + (1 - weight) / (rrf_k + first_rank), ranks within the head;
  weighted  weight * minmax(ce) + (1 - weight) * minmax(first-stage score), within the head.
Ties keep the first-stage order. `tail`: `drop` returns the reordered head cut to `top_k` (the
contract "rerank 16 to 8"); `keep` returns the whole reordered head, then every candidate after
the head in its first-stage order, scored below the head so the list and its scores agree.
Columns kept: `cross_encoder` (logit, NaN where not scored), `cross_encoder_rank`, `first_rank`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from retrieval.fusion_arithmetic import minmax
from retrieval.reranker import CrossEncoderScorer
from retrieval.stage import MAX_CUTOFF, Range, RankStage
from retrieval.types import Candidates, Query

Mode = Literal["replace", "rrf", "weighted"]


def _ranks(scores: np.ndarray) -> np.ndarray:
    """1-based rank of each score, best first; ties by position (stable)."""
    order = np.argsort(-scores, kind="stable")
    ranks = np.empty(len(scores), dtype=np.int64)
    ranks[order] = np.arange(1, len(scores) + 1)
    return ranks


@dataclass(frozen=True, kw_only=True)
class CrossEncoderRerank(RankStage):
    name = "cross_encoder"
    ranges = {
        "top_n": Range(ge=1, le=MAX_CUTOFF),
        "top_k": Range(ge=1, le=MAX_CUTOFF),
        "weight": Range(ge=0, le=1),
        "rrf_k": Range(gt=0),
    }
    scorer: CrossEncoderScorer
    top_n: int = 16
    top_k: int = 8
    mode: Mode = "weighted"  # measured best on BEAM 100K (reports/cross_encoder); replace alone hurt
    weight: float = 0.5  # share of the cross-encoder in the rrf and weighted modes
    rrf_k: int = 60
    tail: Literal["drop", "keep"] = "drop"

    def config_problems(self) -> list[tuple[str, str]]:
        out = []
        if self.mode not in ("replace", "rrf", "weighted"):
            out.append(("mode", f"must be replace, rrf or weighted, not {self.mode!r}"))
        if self.tail not in ("drop", "keep"):
            out.append(("tail", f"must be drop or keep, not {self.tail!r}"))
        numbers = all(isinstance(v, int) for v in (self.top_k, self.top_n))
        if numbers and 1 <= self.top_k and 1 <= self.top_n < self.top_k:
            out.append(("top_k", f"needs 1 <= top_k <= top_n, got top_k={self.top_k}, top_n={self.top_n}"))
        return out

    def __call__(self, query: Query, candidates: Candidates) -> Candidates:
        n = min(self.top_n, len(candidates))
        head = candidates.top(n)
        ce = self.scorer.score(query.text, [str(t) for t in head.attribute("text")]) if n else np.empty(0)
        first_rank = np.arange(1, n + 1)
        ce_rank = _ranks(ce)
        if self.mode == "replace":
            new = ce
        elif self.mode == "rrf":
            new = self.weight / (self.rrf_k + ce_rank) + (1 - self.weight) / (self.rrf_k + first_rank)
        else:
            new = self.weight * minmax(ce) + (1 - self.weight) * minmax(head.score)
        order = np.argsort(-new, kind="stable")
        rest = len(candidates) - n
        floor = new.min() if n else 0.0
        positions = np.concatenate([order, np.arange(n, len(candidates))])
        out = candidates.select(positions)
        columns = {
            **out.columns,
            "cross_encoder": np.concatenate([ce[order], np.full(rest, np.nan)]),
            "cross_encoder_rank": np.concatenate([ce_rank[order], np.zeros(rest, dtype=np.int64)]),
            "first_rank": positions + 1,
            # The tail keeps its first-stage order, scored strictly below the head.
            "score": np.concatenate([new[order], floor - 1.0 - np.arange(rest)]).astype(np.float64),
        }
        out = Candidates(out.corpus, out.index, columns)
        return out.top(self.top_k) if self.tail == "drop" else out
