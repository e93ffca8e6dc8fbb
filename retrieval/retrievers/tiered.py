"""Tiered retrieval channel: the same BM25 + dense RRF over every memory tier, capped per tier.

Sits where retrievers sit (retriever -> fusion): `build(corpus)` makes one BM25 and one dense index
over the searched tiers (per scope, so a query sees only its own agent/project scope in every tier);
`search` takes each channel's top `cap` hits per tier (the per-tier cap before fusion) and fuses them
by RRF. `ranking` says where the ranks come from: "global" (default) ranks the capped hits of all
searched tiers together, so scores stay comparable across tiers; "tier" runs RRF inside each tier (the
literal design), where every tier's best match scores alike whatever its relevance (measured in
reports/stage_tiering/). `TierFusion` then applies per-tier weights and strength x confidence, so a
variant reads `stages: [tiered, fusion]`.

Rules: deleted memories and memories with confidence below `confidence_floor` are never indexed, so
never returned. `high_order: false` searches `base_tiers` only (observations), the switch the cost
measurement flips. Two tier modes serve the advisory policy: `always` tiers return all their
in-scope memories (matched ones by RRF, the rest after them with score 0); `escalation` tiers are
searched only when the other tiers returned fewer than `escalate_below` memories or the query's
context says `escalate: true` (with a dense channel the first rarely happens: dense returns every
in-scope memory up to the cap).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from retrieval.fusion_arithmetic import rrf_fuse
from retrieval.retrievers.bm25 import BM25Retriever
from retrieval.retrievers.dense import DenseRetriever
from retrieval.stage import Range, Retriever, top_n
from retrieval.tiering import HIGH_ORDER_TIERS, tier_of
from retrieval.types import Corpus, Query

_EMPTY = (np.empty(0, dtype=np.int64), np.empty(0))


class TieredHits(tuple):
    """The channel protocol's (indices, scores), carrying the per-channel columns as `.columns`.

    Unpacks as the 2-tuple every fusion expects; `TierFusion` also keeps `.columns` (bm25, dense and
    their ranks over the capped hits), so later stages (a similarity floor, reports) can read them.
    """

    columns: dict

    def __new__(cls, index: np.ndarray, scores: np.ndarray, columns: dict) -> TieredHits:
        hits = super().__new__(cls, (index, scores))
        hits.columns = columns
        return hits


class _TieredIndex:
    """One BM25 (+ dense) index per scope over the eligible memories of every searched tier.

    One shared index, not one per tier: a query costs one BM25 scoring and one matrix product over
    its scope's observations plus the (few) high-order memories, so searching the high-order tiers
    adds time in proportion to their size, and BM25's IDF and the ranks are comparable across tiers.
    Each channel's ranked hits are then split by tier and cut to the tier's cap.
    """

    def __init__(self, corpus: Corpus, retriever: TieredRetriever):
        self.r = retriever
        searched = retriever.searched_tiers()
        labels = np.array([tier_of(m, retriever.default_tier) for m in corpus.memories], dtype=object)
        eligible = np.array(
            [
                not m.deleted and (m.confidence is None or m.confidence >= retriever.confidence_floor)
                for m in corpus.memories
            ],
            dtype=bool,
        )
        self.members = np.flatnonzero(eligible & np.isin(labels, searched))
        self.labels = labels[self.members]  # tier per sub-corpus position
        self.tiers = [t for t in searched if np.any(self.labels == t)]
        # Integer tier codes per sub-corpus position: comparing object arrays per query is slow.
        self.codes = np.array([self.tiers.index(t) for t in self.labels], dtype=np.int64)
        self.caps = np.array([retriever.caps.get(t, retriever.cap) for t in self.tiers], dtype=np.int64)
        self.sub = Corpus(tuple(corpus.memories[i] for i in self.members))
        depth = retriever.search_depth
        self.channels = {"bm25": replace(retriever.bm25, top_n=depth).build(self.sub)}
        if retriever.dense is not None:
            self.channels["dense"] = replace(retriever.dense, top_n=depth).build(self.sub)

    def _capped(self, local: np.ndarray, tiers: list[str]) -> np.ndarray:
        """Positions into a channel's ranked hits: each tier's first `cap`, for the given tiers only."""
        code = self.codes[local]
        order = np.argsort(code, kind="stable")  # groups by tier, keeping rank order inside a group
        ranked = code[order]
        rank_in_tier = np.empty(len(code), dtype=np.int64)
        rank_in_tier[order] = np.arange(len(code)) - np.searchsorted(ranked, ranked, side="left")
        allowed = np.zeros(len(self.tiers), dtype=bool)
        allowed[[self.tiers.index(t) for t in tiers]] = True
        return np.flatnonzero(allowed[code] & (rank_in_tier < self.caps[code]))

    def _part(self, hits: dict, positions: dict) -> tuple[np.ndarray, np.ndarray, dict]:
        """RRF of the channels' hits at the given positions: sub-corpus index, fused, channel columns."""
        chosen = {name: (loc[positions[name]], sc[positions[name]]) for name, (loc, sc) in hits.items()}
        return rrf_fuse(chosen, k=self.r.rrf_k)

    def _fuse(self, hits: dict, query: Query, tiers: list[str]) -> TieredHits:
        r = self.r
        if r.ranking == "tier":  # RRF inside each tier: every tier's best match scores alike
            parts = []
            for t in tiers:
                index, fused, cols = self._part(
                    hits, {n: self._capped(loc, [t]) for n, (loc, _) in hits.items()}
                )
                best = top_n(fused, r.caps.get(t, r.cap))
                parts.append((index[best], fused[best], {k: v[best] for k, v in cols.items()}))
        else:  # "global": ranks over all searched tiers, after the per-tier cap
            parts = [self._part(hits, {n: self._capped(loc, tiers) for n, (loc, _) in hits.items()})]
        names = [c for name in hits for c in (name, f"{name}_rank")]
        for t in (t for t in tiers if t in r.always):  # unmatched members still come, last, scored 0
            scope = self.sub.partition(query.scope_key)
            rest = np.setdiff1d(scope[self.labels[scope] == t], np.concatenate([p[0] for p in parts] or [[]]))
            missed = {
                c: np.zeros(len(rest), np.int64) if c.endswith("_rank") else np.full(len(rest), np.nan)
                for c in names
            }
            parts.append((rest, np.zeros(len(rest)), missed))
        if not parts:
            return TieredHits(*_EMPTY, {})
        local = np.concatenate([p[0] for p in parts]).astype(np.int64)
        scores = np.concatenate([p[1] for p in parts]).astype(np.float64)
        index = self.members[local]
        order = np.lexsort((index, -scores))  # best first; ties by corpus index (deterministic)
        columns = {c: np.concatenate([p[2][c] for p in parts])[order] for c in names}
        return TieredHits(index[order], scores[order], columns)

    def search(self, query: Query) -> TieredHits:
        if not self.tiers:
            return TieredHits(*_EMPTY, {})
        hits = {name: index.search(query) for name, index in self.channels.items()}
        main = [t for t in self.tiers if t not in self.r.escalation]
        found = self._fuse(hits, query, main)
        escalated = [t for t in self.tiers if t in self.r.escalation]
        if escalated and (
            len(found[0]) < self.r.escalate_below or bool(query.context.get("escalate", False))
        ):
            found = self._fuse(hits, query, main + escalated)
        return found


@dataclass(frozen=True, kw_only=True)
class TieredRetriever(Retriever):
    name = "tiered"
    ranges = {
        "rrf_k": Range(gt=0),
        "cap": Range(ge=1),
        "caps": Range(ge=1),
        "confidence_floor": Range(ge=0, le=1),
        "escalate_below": Range(ge=0),
        "search_depth": Range(ge=1),
    }
    channel: str = "tiered"
    bm25: BM25Retriever
    dense: DenseRetriever | None = None
    rrf_k: int = 60
    tiers: tuple[str, ...] = HIGH_ORDER_TIERS  # searched, in this order
    default_tier: str = "observation"  # a memory with no tier (and no policy annotation)
    high_order: bool = True  # false: search base_tiers only
    base_tiers: tuple[str, ...] = ("observation",)
    cap: int = 50  # per-tier candidate cap before fusion
    caps: dict[str, int] = field(default_factory=dict)  # per-tier override of `cap`
    confidence_floor: float = 0.3
    always: tuple[str, ...] = ()  # tiers whose in-scope memories are always candidates (pinned)
    escalation: tuple[str, ...] = ()  # tiers searched only on escalation (archive)
    escalate_below: int = 3
    search_depth: int = 100_000  # hits per channel before the per-tier cut (default: the whole scope)
    ranking: str = "global"  # "global": channel ranks across tiers; "tier": RRF within each tier

    def config_problems(self) -> list[tuple[str, str]]:
        if self.ranking not in ("global", "tier"):
            return [("ranking", f"must be 'global' or 'tier', not {self.ranking!r}")]
        return []

    def searched_tiers(self) -> list[str]:
        return [t for t in self.tiers if self.high_order or t in self.base_tiers]

    def build(self, corpus: Corpus) -> _TieredIndex:
        if self.ranking not in ("global", "tier"):
            raise ValueError(f"tiered.ranking must be 'global' or 'tier', not {self.ranking!r}")
        return _TieredIndex(corpus, self)
