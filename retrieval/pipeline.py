"""A retrieval variant as a pipeline of stages, and its execution over a set of queries.

    ingest stages -> index per scope -> channel candidates -> fusion -> rank stages -> cut to depth

The stages come in that order (a variant reads top to bottom as its stages). Disabled stages are
dropped before anything runs, so a variant with a stage switched off is the same pipeline, with the
same fingerprints and the same numbers, as one without it.

Caching: the candidate lists after the retrieval prefix (ingest + channels + fusion) are stored on
disk, as plain arrays, under the prefix's fingerprint (KEY_RULES["candidates"] in
retrieval/code_version.py: suite content hash + query ids + the `retrieval` package's source hash + the
versions of the libraries it computes with + every prefix stage's fingerprint), so a sweep over a later
stage's weight re-runs only the rank stages, and a code, library or model change never reads an old
entry. Entries are checksummed (retrieval/cache_io.py).
Timings come only from work done in this run: a stage whose output was reused (prefix cache, process
memo) has a NaN timing, so its query latency is NaN (absent), never an earlier run's figure replayed.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from retrieval import cache_io
from retrieval import progress as phases
from retrieval.code_version import KEY_RULES, source_hash
from retrieval.reuse import CandidateCache, ProcessMemo, Reuse, ScopedPrefix, scope_digests
from retrieval.stage import (
    BatchRankStage,
    ChecksQueries,
    Fusion,
    IngestStage,
    Prefetches,
    RankStage,
    Reports,
    Retriever,
    Stage,
)
from retrieval.types import CandidateBatch, Candidates, Corpus, Knowledge, Memory, Query, RankedList


class PipelineConfigError(ValueError):
    """A variant that cannot make a pipeline; `problems` lists each one (`stage.<name>.<field>: ...`)."""

    def __init__(self, problems: str | Sequence[str]):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


@dataclass(frozen=True)
class RunOutput:
    """Ranked lists in query order, plus what the run cost and what it could reuse."""

    ranked: list[RankedList]
    corpus: Corpus
    build_ms: Mapping[str, float]
    prefix_cache_hit: bool
    prefix_fingerprint: str
    # What came from a cache (prefix candidates, rank levels, embeddings, rerank scores) and whether the
    # latencies were all measured in this run: the `cache` section of metrics.json.
    cache: Mapping[str, Any] = field(default_factory=dict)
    # What a channel's index reports of its own cost (a live system's latency, ingest, errors...), by
    # channel: only indexes with a `report()` (experiments/systems/retriever.py) have one.
    channel_reports: Mapping[str, Any] = field(default_factory=dict)


# The only order a pipeline accepts its stages in, by kind.
STAGE_KINDS = ("ingest", "retriever", "fusion", "rank")


@dataclass(frozen=True)
class Pipeline:
    stages: tuple[Stage, ...]
    depth: int  # ranked list length kept per query: the run config's `depth` (conf/config.yaml)
    ingest: tuple[IngestStage, ...] = field(init=False)
    retrievers: tuple[Retriever, ...] = field(init=False)
    fusion: Fusion | None = field(init=False)
    rank: tuple[RankStage, ...] = field(init=False)

    def __post_init__(self) -> None:
        active = tuple(s for s in self.stages if s.enabled)
        kinds = [_kind(s) for s in active]
        expected = sorted(kinds, key=STAGE_KINDS.index)
        if kinds != expected:
            raise PipelineConfigError(
                "stages must come in the order ingest -> retriever -> fusion -> rank; got "
                + ", ".join(f"{s.name} ({k})" for s, k in zip(active, kinds, strict=True))
            )
        retrievers = tuple(s for s in active if isinstance(s, Retriever))
        fusions = [s for s in active if isinstance(s, Fusion)]
        if not retrievers:
            raise PipelineConfigError("a pipeline needs at least one retriever stage (bm25, dense...)")
        if len(fusions) > 1 or (len(retrievers) > 1 and not fusions):
            raise PipelineConfigError("several retrievers need exactly one fusion stage (rrf or weighted)")
        channels = [r.channel for r in retrievers]
        if len(set(channels)) != len(channels):
            raise PipelineConfigError(f"two retrievers share a channel name: {channels}")
        object.__setattr__(self, "stages", active)
        object.__setattr__(self, "ingest", tuple(s for s in active if isinstance(s, IngestStage)))
        object.__setattr__(self, "retrievers", retrievers)
        object.__setattr__(self, "fusion", fusions[0] if fusions else None)
        object.__setattr__(self, "rank", tuple(s for s in active if isinstance(s, RankStage)))

    def models(self) -> list[tuple[str, Any]]:
        """(`stage.field...` path, component) of every component with a model (one with `check_available()`:
        the encoder, the cross-encoder scorer), at any depth, in stage order."""
        found, todo = [], [(s.name, s) for s in reversed(self.stages)]
        while todo:
            path, value = todo.pop()
            if callable(getattr(value, "check_available", None)):
                found.append((path, value))
            elif dataclasses.is_dataclass(value) and not isinstance(value, type):
                fields = dataclasses.fields(value)
                todo += [(f"{path}.{f.name}", getattr(value, f.name)) for f in reversed(fields)]
            elif isinstance(value, (list, tuple)):
                todo += [(f"{path}[{i}]", v) for i, v in reversed(list(enumerate(value)))]
        return found

    def check_models(self) -> None:
        """Fail before any work when a model a stage needs (encoder, cross-encoder) cannot be loaded:
        every component of `models()` is asked (they raise ModelNotFoundError)."""
        for _, model in self.models():
            model.check_available()

    def compute(self) -> dict[str, str]:
        """Where and in what precision each model computes (retrieval.compute.compute_identity), by its
        path (`dense.encoder`): a run's tags record it."""
        return {
            path: model.compute()
            for path, model in self.models()
            if callable(getattr(model, "compute", None))
        }

    def prefix_fingerprint(self, suite_hash: str, query_ids: Sequence[str]) -> str:
        """The candidates' key (KEY_RULES["candidates"]): suite, queries, the `retrieval` package's source,
        the libraries it computes with, and every prefix stage's fingerprint (models' content included)."""
        prefix = [*self.ingest, *self.retrievers, *([self.fusion] if self.fusion else [])]
        queries = hashlib.sha256("\n".join(query_ids).encode()).hexdigest()
        stages = [s.fingerprint() for s in prefix]
        return KEY_RULES["candidates"].key(suite=suite_hash, queries=queries, stages=stages)[:24]

    def fingerprint(self) -> str:
        """Every stage's fingerprint (models' content included, through their components) and the depth."""
        parts = [*(s.fingerprint() for s in self.stages), f"depth={self.depth}"]
        return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]

    @property
    def live(self) -> tuple[str, ...]:
        """The channels answered by a live system (a retriever whose `live` is true): their answers may
        change while their config does not, so such a pipeline is never answered from the candidate
        cache or the process memo, only from the service (or its cassette, through the channel)."""
        return tuple(r.channel for r in self.retrievers if r.live)

    def ingest_memories(self, memories: Sequence[Memory]) -> list[Memory]:
        out = list(memories)
        for stage in self.ingest:
            out = stage(out)
        return out

    def run(
        self,
        memories: Sequence[Memory],
        queries: Sequence[Query],
        *,
        suite_hash: str | None = None,
        cache: CandidateCache | None = None,
        progress: bool = True,
        memo: ProcessMemo | None = None,
        knowledge: Knowledge | None = None,
        on_phase: phases.PhaseCallback | None = None,
    ) -> RunOutput:
        """`memo` (needs `suite_hash`) reuses this process's corpus, indexes and candidates across runs.
        `knowledge` is the suite's concept graphs and feedback records (part of its `suite_hash`).
        `on_phase` is told each phase (retrieval/progress.py): ingest, index, encode, search, rank.
        `progress` false also keeps the model loaders' own bars off."""
        with phases.reporting_to(on_phase), phases.library_bars(progress):
            return self._run(memories, queries, suite_hash, cache, progress, memo, knowledge)

    def _run(
        self,
        memories: Sequence[Memory],
        queries: Sequence[Query],
        suite_hash: str | None,
        cache: CandidateCache | None,
        progress: bool,
        memo: ProcessMemo | None,
        knowledge: Knowledge | None,
    ) -> RunOutput:
        uncached = bool(self.live) or any(r.builds_rows for r in self.retrievers)
        reuse = Reuse.of(memo, cache, suite_hash, live=uncached)
        build_ms: dict[str, float] = {}
        channel_reports: dict[str, Any] = {}
        counts_before = dict(cache_io.COUNTS)
        t0 = time.perf_counter()
        phases.phase("ingest")
        ingest_key = (suite_hash, source_hash("retrieval"), tuple(s.fingerprint() for s in self.ingest))
        corpus = reuse.made(
            "corpus", ingest_key, lambda: Corpus(tuple(self.ingest_memories(memories)), knowledge)
        )
        build_ms["ingest"] = (time.perf_counter() - t0) * 1000

        key = self.prefix_fingerprint(suite_hash or "", [q.id for q in queries])
        retrieve = functools.partial(
            self._retrieve, build_ms=build_ms, progress=progress, reuse=reuse, channel_reports=channel_reports
        )
        prefix, source, scopes = reuse.prefix(
            key,
            lambda: retrieve(corpus, queries, ingest_key=ingest_key),
            # per scope unless a channel cannot be built on some scopes only (one reading a run file)
            (lambda: (self._scoped(corpus, queries, ingest_key, retrieve), [q.id for q in queries]))
            if all(getattr(r, "by_scope", True) for r in self.retrievers)
            else None,
        )
        prefix_hit = source is not None  # from the process memo or the disk cache

        # Rank stages one at a time over all queries. The candidates after each stage are kept under the
        # chain of fingerprints so far, so a sweep over a later stage's field re-runs only that stage and
        # the ones after it (the kept stages' timings become NaN: not measured here).
        chain = [key]
        for stage in self.rank:
            chain.append(hashlib.sha256(f"{chain[-1]}|{stage.fingerprint()}".encode()).hexdigest()[:24])
        state, start = reuse.deepest_rank_level(chain, prefix)
        reused = prefix_hit or start > 0 or bool(scopes and scopes["reused"])
        if reused:  # reused work was not timed in this run: its timings are unknown, not replayed
            state = {q: (index, columns, _unmeasured(times)) for q, (index, columns, times) in state.items()}
        todo = len(queries) * (len(self.rank) - start)
        with tqdm(total=todo, desc="rank", disable=not progress or not todo, leave=False) as bar:
            laid_out = None  # the batch `state` is the split of, when a batch stage made it
            for level in range(start, len(self.rank)):
                stage = self.rank[level]
                told = _told(queries, f"rank {stage.name}", (level - start) * len(queries), todo)
                t = time.perf_counter()
                # Latency unmeasured anyway (reused work): a batch stage ranks all queries at once.
                done = _apply_all(stage, queries, corpus, state, bar, laid_out) if reused else None
                if done is None:
                    state, laid_out = (
                        {q.id: _apply(stage, q, corpus, state[q.id], reuse.shares, bar) for q in told},
                        None,
                    )
                else:
                    state, laid_out = done
                build_ms[f"rank.{stage.name}"] = (time.perf_counter() - t) * 1000  # all queries together
                reuse.keep_rank_level(chain[level + 1], state)
        ranked = []
        entries = [state[q.id] for q in queries]
        # Each query's top `depth`, in new arrays (the memo stays intact): all queries at once when their
        # columns line up, else one by one.
        batch = (
            laid_out if laid_out is not None else CandidateBatch.of(corpus, [(i, c) for i, c, _ in entries])
        )
        if batch is not None:
            tops = batch.top(self.depth).split()
        else:
            tops = [
                (top.index, top.columns)
                for index, columns, _ in entries
                for top in [Candidates(corpus, index, columns).top(self.depth)]
            ]
        for query, (index, columns), (_, _, timings) in zip(queries, tops, entries, strict=True):
            ranked.append(
                RankedList(query.id, tuple(corpus.ids[index]), columns["score"], dict(columns), dict(timings))
            )
        counts = {k: v - counts_before.get(k, 0) for k, v in cache_io.COUNTS.items()}
        report = {
            "prefix_candidates": {
                "hit": prefix_hit,
                "source": source,
                **({"scopes": scopes} if scopes and scopes["reused"] else {}),
            },
            "rank_levels_reused": start,
            "rank_levels": len(self.rank),
            **{
                kind: {"hits": counts.get(f"{kind}.hits", 0), "misses": counts.get(f"{kind}.misses", 0)}
                for kind in ("embeddings", "rerank_scores")
            },
            "latency_measured": not reused,
            "live_channels": list(self.live),
            "unmeasured_stages": sorted(
                {s for r in ranked for s, ms in r.timings_ms.items() if math.isnan(ms)}
            ),
        }
        return RunOutput(ranked, corpus, build_ms, prefix_hit, key, report, channel_reports)

    def _scoped(
        self, corpus: Corpus, queries: Sequence[Query], ingest_key: tuple, retrieve: Any
    ) -> ScopedPrefix:
        """The prefix split by scope (retrieval/reuse.py): each scope's key, and a retrieval of some scopes
        only, on the corpus of their memories, answered in this corpus's positions."""
        digests = scope_digests(corpus, queries, corpus.knowledge)
        keys = {scope: self.prefix_fingerprint(digest, []) for scope, digest in digests.items()}
        by_scope: dict[str, list[Query]] = {}
        for q in queries:
            by_scope.setdefault(q.scope_key, []).append(q)

        def some(scopes: list[str]) -> dict:
            members = np.sort(np.concatenate([corpus.partition(s) for s in scopes])).astype(np.int64)
            wanted = set(scopes)
            asked = [q for q in queries if q.scope_key in wanted]
            if len(members) == len(corpus):  # every memory: the corpus itself (and its memoised indexes)
                return retrieve(corpus, asked, ingest_key=ingest_key)
            sub = Corpus(tuple(corpus.memories[i] for i in members), corpus.knowledge)
            found = retrieve(sub, asked, ingest_key=(*ingest_key, "scopes", tuple(scopes)))
            return {q: (members[index], columns, times) for q, (index, columns, times) in found.items()}

        return ScopedPrefix(
            keys, {s: corpus.partition(s) for s in keys}, {s: [q.id for q in by_scope[s]] for s in keys}, some
        )

    def _retrieve(
        self,
        corpus: Corpus,
        queries: Sequence[Query],
        build_ms: dict,
        progress: bool,
        reuse: Reuse,
        ingest_key: tuple = (),
        channel_reports: dict | None = None,
    ) -> dict:
        indexes = {}
        for retriever in self.retrievers:
            t = time.perf_counter()
            phases.phase(f"index {retriever.channel}")
            build = functools.partial(retriever.build, corpus)
            indexes[retriever.channel] = reuse.made("index", (*ingest_key, retriever.fingerprint()), build)
            build_ms[f"index_{retriever.channel}"] = (time.perf_counter() - t) * 1000
            # An index built from outside data (a TREC run file) checks the queries it will be asked.
            if isinstance(indexes[retriever.channel], ChecksQueries):
                indexes[retriever.channel].check_queries(queries)
        # An index that answers from a service asks it for every query at once, concurrently
        # (`prefetch`), and then times each query by its own wall latency (`latency_ms`), not by the
        # lookup of the prefetched answer.
        measured = {}
        for channel, index in indexes.items():
            if isinstance(index, Prefetches):
                index.prefetch(queries)
                measured[channel] = index.latency_ms
        out = {}
        places = phases.scope_places([q.scope_key for q in queries])
        for done, query in enumerate(tqdm(queries, desc="retrieve", disable=not progress, leave=False)):
            phases.phase("search", done, len(queries), places[done])
            out[query.id] = self._search(query, corpus, indexes, measured)
        for channel, index in indexes.items():
            if channel_reports is not None and isinstance(index, Reports):
                channel_reports[channel] = index.report()
        return out

    def _search(
        self, query: Query, corpus: Corpus, indexes: Mapping[str, Any], measured: Mapping[str, Any]
    ) -> tuple:
        """One query's channels -> fusion: its candidates as (index, columns, timings by stage name). A
        channel in `measured` is timed by its own `latency_ms(query)` (a prefetched live answer)."""
        timings, channels = {}, {}
        for retriever in self.retrievers:
            t = time.perf_counter()
            channels[retriever.channel] = indexes[retriever.channel].search(query)
            elapsed = (time.perf_counter() - t) * 1000
            latency = measured.get(retriever.channel)
            timings[retriever.name] = latency(query) if latency is not None else elapsed
        t = time.perf_counter()
        if self.fusion is not None:
            candidates = self.fusion(corpus, channels)
            timings[self.fusion.name] = (time.perf_counter() - t) * 1000
        else:
            candidates = _single_channel(corpus, *next(iter(channels.items())))
        return candidates.index, dict(candidates.columns), timings

    def answer(self, query: Query, corpus: Corpus, indexes: Mapping[str, Any]) -> Candidates:
        """One query through the pipeline over an ingested corpus and its channel indexes (by channel, as
        `Retriever.build` made them): channels -> fusion -> each rank stage -> its top `depth`, best first.
        The same steps `run` takes for each query (there the rank stages go level by level over all
        queries, so a sweep can reuse a level), without its caches, timings or progress."""
        entry = self._search(query, corpus, indexes, {})
        for stage in self.rank:
            entry = _apply(stage, query, corpus, entry)
        index, columns, _ = entry
        return Candidates(corpus, index, columns).top(self.depth)


def _apply(
    stage: RankStage, query: Query, corpus: Corpus, entry: tuple, shared: bool = False, bar: Any = None
) -> tuple:
    """One rank stage on one query's candidates -> (index, columns, timings with this stage's ms)."""
    index, columns, timings = entry
    if shared:  # kept for later runs: a stage must never see another run's edits
        index, columns = index.copy(), {k: v.copy() for k, v in columns.items()}
    t = time.perf_counter()
    candidates = stage(query, Candidates(corpus, index, columns))
    elapsed = (time.perf_counter() - t) * 1000
    if bar is not None:
        bar.update()
    return (
        candidates.index,
        dict(candidates.columns),
        {**timings, stage.name: timings.get(stage.name, 0.0) + elapsed},
    )


def _apply_all(
    stage: RankStage,
    queries: Sequence[Query],
    corpus: Corpus,
    state: dict,
    bar: Any,
    laid_out: CandidateBatch | None = None,
) -> tuple[dict, CandidateBatch | None] | None:
    """A `BatchRankStage` over every query's candidates at once (`laid_out`: those candidates already laid
    end to end) -> the new state, its time per query unmeasured (NaN), and the batch it is the split of;
    None for any other stage, or candidates whose columns differ between queries."""
    if not isinstance(stage, BatchRankStage):
        return None
    entries = [state[q.id] for q in queries]
    parts = [(index, columns) for index, columns, _ in entries]
    batch = laid_out if laid_out is not None else CandidateBatch.of(corpus, parts)
    if batch is None:
        return None
    ranked, laid_out = stage.rank_laid_out(batch, parts)
    bar.update(len(queries))
    # Arrays ranked are new ones; those left as they were are the memo's, which nothing changes.
    new = {
        q.id: (index, columns, {**timings, stage.name: math.nan})
        for q, (index, columns), (_, _, timings) in zip(queries, ranked, entries, strict=True)
    }
    return new, laid_out


def _told(queries: Sequence[Query], name: str, offset: int, total: int) -> Iterator[Query]:
    """`queries`, telling retrieval/progress.py how far phase `name` is before each (offset + i of total)."""
    places = phases.scope_places([q.scope_key for q in queries])
    for i, query in enumerate(queries):
        phases.phase(name, offset + i, total, places[i])
        yield query


def _unmeasured(timings: Mapping[str, float]) -> dict[str, float]:
    return dict.fromkeys(timings, math.nan)


def _single_channel(corpus: Corpus, channel: str, hits: tuple[np.ndarray, np.ndarray]) -> Candidates:
    index, scores = hits
    rank = np.arange(1, len(index) + 1)
    return Candidates(corpus, index, {channel: scores, f"{channel}_rank": rank, "score": scores})


def stage_kind(cls: type) -> str | None:
    """A stage class's kind (one of STAGE_KINDS), or None for a class that is no stage."""
    for kind, base in zip(STAGE_KINDS, (IngestStage, Retriever, Fusion, RankStage), strict=True):
        if isinstance(cls, type) and issubclass(cls, base):
            return kind
    return None


def _kind(stage: Stage) -> str:
    kind = stage_kind(type(stage))
    if kind is None:
        raise PipelineConfigError(f"{type(stage).__name__} is not an ingest, retriever, fusion or rank stage")
    return kind
