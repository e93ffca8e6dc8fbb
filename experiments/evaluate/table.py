"""From a pipeline run to numbers: the per-query table first, every aggregate computed from it.

    RunOutput + Suite -> per_query (one row per query: labels, metrics, latency, abstention stats)
                      -> metrics.json dict (overall, by label, abstention, latency, scope leaks)

Answerable queries carry the relevance metrics; abstention queries (no relevant memory) are
reported apart: how many, and the top score the system still gave them (a system that "knows
nothing is there" gives a low one). A query whose list came back empty scores 0, never dropped.

Each row also names the query's `cluster` (`query_cluster`): the unit the statistics resample, since
questions about one conversation are not independent (experiments/evaluate/statistics.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pandas as pd

from experiments.evaluate import cost
from experiments.evaluate.metrics import over_own_queries
from experiments.evaluate.metrics.noise import noise_table
from experiments.evaluate.metrics.official import BenchmarkScorer, upstream_aggregates
from experiments.evaluate.metrics.official import per_query as relevance_per_query
from experiments.evaluate.statistics import (
    bootstrap_ci,
    bootstrap_cis,
    cluster_mean_ci,
    design_effect,
    design_effect_warning,
    unit_choice,
    unit_warning,
    warn_once,
)
from retrieval.pipeline import RunOutput
from retrieval.types import Memory, Query, scope_key


class Suite(Protocol):
    """What evaluation reads of a suite (experiments/suites/suite.py's Suite is one): evaluate/ sits below
    suites/, which hands it its judgements and, under `suite.protocol=official`, a benchmark's scorer."""

    memories: tuple[Memory, ...]
    queries: tuple[Query, ...]
    qrels: Mapping[str, Mapping[str, int]]
    k: int
    scorer: BenchmarkScorer | None

    def is_abstention(self, query_id: str) -> bool: ...


@dataclass(frozen=True)
class Evaluation:
    per_query: pd.DataFrame
    metrics: dict[str, Any]


def query_cluster(query: Query, unit: str = "scope") -> str:
    """The cluster a query's statistics belong to: a `cluster` the suite declares in the query's labels
    or scope; else by the suite's unit (suite.yaml `cluster`): the query itself (`query`), a label's
    value (`label.<name>`), or its scope (the conversation): `name=value` for a one-key scope, else the
    scope key."""
    declared = query.labels.get("cluster") or query.scope.get("cluster")
    if declared:
        return str(declared)
    if unit == "query":
        return f"query={query.id}"
    if unit.startswith("label.") and query.labels.get(unit[6:]) is not None:
        return f"{unit[6:]}={query.labels[unit[6:]]}"
    if len(query.scope) == 1:
        ((name, value),) = query.scope.items()
        return f"{name}={value}"
    return scope_key(query.scope)


def scope_leaks(suite: Suite, output: RunOutput) -> pd.Series:
    """Per query with a ranked list, how many returned memories belong to another scope (must be 0).

    Independent of the code it checks: compares the query's and each returned memory's scope as
    plain sets of (key, value) pairs, never through `retrieval.types.scope_key` (the partitioning
    encoding). A returned id that names no known memory counts as a leak too.
    """
    return pd.Series(_leaks(suite, output), dtype=int)


def _leaks(suite: Suite, output: RunOutput) -> dict[str, int]:
    codes, scope_of = _scope_numbers(suite.memories, output.corpus)
    query_scope = {q.id: _code(codes, q.scope) for q in suite.queries}
    leaks = {}
    for r in output.ranked:
        scopes = [scope_of.get(m) for m in r.memory_ids]
        leaks[r.query_id] = len(scopes) - scopes.count(query_scope[r.query_id])
    return leaks


def _code(codes: dict[frozenset, int], scope) -> int:
    """A scope's number: each distinct set of (key, value) pairs gets the next one."""
    return codes.setdefault(frozenset(dict(scope).items()), len(codes))


# The last (memories, corpus, numbers, each id's number): the jobs of a sweep share one suite and corpus.
_LAST_SCOPES: list[tuple] = []


def _scope_numbers(memories, corpus) -> tuple[dict[frozenset, int], dict[str, int]]:
    """Every known memory id's scope number: the suite's memories, then the ingested corpus's. Reused
    while both are the very objects it was made from (immutable: a suite's memories, a corpus)."""
    for known, known_corpus, codes, scope_of in _LAST_SCOPES:
        if known is memories and known_corpus is corpus:
            return codes, scope_of
    codes: dict[frozenset, int] = {}
    scope_of = {m.id: _code(codes, m.scope) for m in memories}
    scope_of.update({m.id: _code(codes, m.scope) for m in corpus.memories})
    _LAST_SCOPES[:] = [(memories, corpus, codes, scope_of)]
    return codes, scope_of


def per_query_table(
    suite: Suite, output: RunOutput, metrics: Sequence[str], *, empty: str = "apart"
) -> pd.DataFrame:
    """One row per suite query (index `query_id`): its labels, abstention flag, cluster, what came back
    and how fast, scope leaks, and each metric (NaN for abstention queries: they are not averaged in;
    with `empty="zero"`, trec_eval's convention, they score 0 and are).

    Built as one frame from columns aligned with the suite's queries: joined piece by piece, the frame
    was most of a sweep job's evaluation (tests/evaluate/test_evaluate_table.py compares it with those
    joins)."""
    queries = suite.queries
    ids = [q.id for q in queries]
    by_id = {r.query_id: r for r in output.ranked}
    ranked = [by_id.get(q) for q in ids]
    stages = dict.fromkeys(s for r in output.ranked for s in r.timings_ms)
    leaks = _leaks(suite, output)
    run = {r.query_id: list(r.memory_ids) for r in output.ranked}
    columns: dict[str, Any] = {
        **{
            f"label.{name}": [q.labels.get(name) for q in queries]
            for name in dict.fromkeys(n for q in queries for n in q.labels)
        },
        "abstention": [suite.is_abstention(q) for q in ids],
        "cluster": [query_cluster(q, suite.cluster) for q in queries],
        "n_returned": [len(r.memory_ids) if r else 0 for r in ranked],
        "top_score": [float(r.scores[0]) if r and len(r.scores) else np.nan for r in ranked],
        "latency_ms": [r.latency_ms if r else np.nan for r in ranked],
        **{f"ms.{st}": [r.timings_ms.get(st, 0.0) if r else np.nan for r in ranked] for st in stages},
        "scope_leaks": np.array([leaks.get(q, 0) for q in ids], dtype=int),
    }
    columns.update(metric_columns(suite.scorer, suite.qrels, run, metrics, ids, empty=empty))
    return pd.DataFrame(columns, index=pd.Index(ids, name="query_id"))


def metric_columns(
    scorer: Any, qrels: Any, run: Any, metrics: Sequence[str], ids: Sequence[str], *, empty: str = "apart"
) -> dict[str, np.ndarray]:
    """Each metric's per-query values in the order of `ids`, all queries scored as one batch (a value's
    last bits depend on the batch's widths: a merge of shards scores the whole run again,
    experiments/merge.py); a benchmark's own scorer where suite.protocol=official."""
    scores = relevance_per_query(scorer, qrels, run, metrics, empty=empty)
    aligned = scores.reindex(ids)  # abstention queries: NaN
    if empty == "zero":  # a suite query with no judgement at all has nothing relevant either: 0
        relevance = [m for m in aligned.columns if not over_own_queries(m)]
        aligned[relevance] = aligned[relevance].fillna(0.0)
    return {name: aligned[name].to_numpy(dtype=np.float64) for name in scores.columns}


@dataclass(frozen=True)
class _Columns:
    """The per-query columns an aggregate reads, as arrays: one pandas filter and mean per label value
    was most of a sweep job's evaluation."""

    abstention: np.ndarray
    top_score: np.ndarray
    n_returned: np.ndarray
    values: np.ndarray  # (metric, query)

    @classmethod
    def of(cls, frame: pd.DataFrame, metrics: Sequence[str]) -> _Columns:
        return cls(
            abstention=frame["abstention"].to_numpy(dtype=bool),
            top_score=frame["top_score"].to_numpy(dtype=np.float64),
            n_returned=frame["n_returned"].to_numpy(),
            values=np.array([frame[m].to_numpy(dtype=np.float64) for m in metrics]).reshape(
                len(metrics), len(frame)
            ),
        )


def _nanmean(block: np.ndarray) -> np.ndarray:
    """pandas' mean of each row, NaN skipped, the same arithmetic to the last bit: NaN set to 0, each row
    summed on its own (numpy sums a 1-d array pairwise, and a 2-d one along an axis another way)."""
    block = np.atleast_2d(block)
    missing = np.isnan(block)
    counts = block.shape[1] - missing.sum(axis=1)
    block = np.where(missing, 0.0, block)
    sums = np.array([row.sum() for row in block])
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _aggregate(
    columns: _Columns, metrics: Sequence[str], rows: np.ndarray, empty: str = "apart"
) -> dict[str, Any]:
    """Means over the answerable queries among `rows` (positions), and the abstention queries' figures.
    With `empty="zero"` the means are over every scored query, abstention queries counting 0. harm@k is
    over its own queries (those with must-not judgements, answerable or not): `denominators` says how
    many."""
    abstaining = columns.abstention[rows]
    answerable = rows[~abstaining]
    out: dict[str, Any] = {"n_queries": int(len(rows)), "n_answerable": int(len(answerable))}
    averaged = answerable if empty == "apart" else rows
    means = _nanmean(columns.values[:, averaged]) if len(averaged) else None
    out.update({m: float(means[i]) if means is not None else None for i, m in enumerate(metrics)})
    own = [i for i, m in enumerate(metrics) if over_own_queries(m)]
    if own:
        counts = (~np.isnan(columns.values[own][:, rows])).sum(axis=1)
        means = _nanmean(columns.values[own][:, rows]) if len(rows) else np.full(len(own), np.nan)
        for i, count, value in zip(own, counts, means, strict=True):
            out[metrics[i]] = float(value) if count else None
        out["denominators"] = {metrics[i]: int(c) for i, c in zip(own, counts, strict=True)}
    abstained = rows[abstaining]
    if len(abstained):
        top = columns.top_score[abstained]
        out["abstention_n"] = int(len(abstained))
        out["abstention_top_score_mean"] = float(_nanmean(top)[0]) if (~np.isnan(top)).any() else None
        out["abstention_returned_nothing"] = int((columns.n_returned[abstained] == 0).sum())
    return out


def summarize(
    frame: pd.DataFrame,
    metrics: Sequence[str],
    *,
    seed: int = 0,
    unit: str = "auto",
    empty: str = "apart",
) -> dict[str, Any]:
    """The metrics.json content: overall (with 95% CIs), per label value, latency, leaks.

    The CIs are over whole clusters (the per-query `cluster`) where `unit` resolves to clusters (the CR2
    t-interval, calibrated for few clusters: `statistics.cluster_mean_ci`), else percentile bootstraps over
    queries; the `statistics` section says which unit and why, how many clusters, each metric's design
    effect, and a warning where the clusters are few, one cluster forced the query level, or a design
    effect is below 1 (a cluster interval narrower than the query-level one)."""
    columns = _Columns.of(frame, metrics)
    overall = _aggregate(columns, metrics, np.arange(len(frame)), empty)
    # Latency only from work measured in this run: a stage answered from a cache has a NaN timing
    # (retrieval/pipeline.py), so its queries have none; with none measured, the figures are null.
    latency = frame["latency_ms"].dropna()
    measured = bool(len(latency))
    overall["latency_ms_p50"] = float(np.percentile(latency, 50)) if measured else None
    overall["latency_ms_p95"] = float(np.percentile(latency, 95)) if measured else None
    overall["latency_measured"] = measured
    if (
        "tokens_returned" in frame.columns
    ):  # what the queries returned, counted (experiments/evaluate/cost.py)
        overall.update(cost.overall_figures(frame))
    scored = ~columns.abstention if empty == "apart" else np.ones(len(frame), dtype=bool)
    answerable = columns.values[:, scored]
    ci: dict[str, list[float]] = {}
    statistics: dict[str, Any] = {
        "unit": "query", "unit_reason": "no query records its cluster", "n_clusters": None,
        "design_effect": {}, "warning": None,
    }  # fmt: skip
    complete = {m: row for m, row in zip(metrics, answerable, strict=True) if not np.isnan(row).any()}
    own = {  # harm@k: over the queries it is defined on (any with must-not judgements)
        m: row[~np.isnan(row)] for m, row in zip(metrics, columns.values, strict=True) if over_own_queries(m)
    }
    if answerable.shape[1] and complete:
        n = int(scored.sum())
        clusters = frame["cluster"].to_numpy()[scored] if "cluster" in frame.columns else None
        chosen, reason = unit_choice(unit, clusters, n)
        if chosen == "cluster":
            ci = {m: list(cluster_mean_ci(v, clusters)) for m, v in complete.items()}
        else:  # one set of resample draws shared by every metric
            ci = {m: list(interval) for m, interval in bootstrap_cis(complete, seed=seed).items()}
        if clusters is not None:
            effects = {m: design_effect(v, clusters) for m, v in complete.items()}
            unit_note = unit_warning(chosen, clusters, n)
            if chosen == "query" and unit_note:  # one cluster: the fall back to queries is never silent
                warn_once(unit_note)
            # a design effect below 1 is a caveat of cluster intervals only (one query a cluster: it is 1)
            effect_note = design_effect_warning(effects, len(set(clusters))) if chosen == "cluster" else None
            notes = [unit_note, effect_note]
            statistics = {
                "unit": chosen,
                "unit_reason": reason,
                "n_clusters": len(set(clusters)),
                "design_effect": {m: (d if np.isfinite(d) else None) for m, d in effects.items()},  # no NaN
                "warning": "; ".join(w for w in notes if w) or None,
            }
    every_cluster = frame["cluster"].to_numpy() if "cluster" in frame.columns else None
    for m, values in own.items():  # harm@k's interval over its own queries
        if len(values) > 1:
            has = ~np.isnan(frame[m].to_numpy(dtype=np.float64))
            groups = None if every_cluster is None else every_cluster[has]
            by_cluster = unit_choice(unit, groups, len(values))[0] == "cluster"
            interval = cluster_mean_ci(values, groups) if by_cluster else bootstrap_ci(values, seed=seed)
            ci[m] = list(interval)
    by_label: dict[str, dict[str, Any]] = {}
    for column in (c for c in frame.columns if c.startswith("label.")):
        # The groups of `frame.groupby(column, sort=True, dropna=True)`: sorted values, no missing one.
        codes, values = pd.factorize(frame[column], sort=True, use_na_sentinel=True)
        by_label[column.removeprefix("label.")] = {
            str(value): _aggregate(columns, metrics, np.flatnonzero(codes == code), empty)
            for code, value in enumerate(values)
        }
    return {
        "overall": overall,
        "overall_ci95": ci,
        "statistics": statistics,
        "empty_queries": empty,
        "by_label": by_label,
        "n_queries": int(len(frame)),
        "scope_leaks": int(frame["scope_leaks"].sum()),
        "queries_returning_nothing": frame.index[frame["n_returned"] == 0].tolist(),
    }


def evaluate(
    suite: Suite,
    output: RunOutput,
    metrics: Sequence[str],  # the run config's `metrics` (conf/config.yaml states the default list once)
    *,
    seed: int = 0,
    unit: str = "auto",
    empty: str = "apart",
    budget_tokens: int | None = None,
    budget_cut: int | None = None,
    counter: cost.TokenCounter | None = None,
) -> Evaluation:
    """`unit`: what the overall CIs resample (auto | cluster | query); `empty`: queries with no relevant
    memory reported apart (default) or scored 0 and averaged in (`zero`, trec_eval). What each query
    returned is counted at the suite's k, or, when the lists were cut to `budget_tokens`
    (cost.apply_budget, which cut `budget_cut` of them), over the whole list (evaluate/cost.py)."""
    frame = per_query_table(suite, output, metrics, empty=empty)
    counter = counter or cost.default_counter()
    k = suite.k if budget_tokens is None else None
    frame = frame.assign(**cost.returned_columns(output, list(frame.index), k, counter))
    # noise@k (experiments/evaluate/metrics/noise.py) at the suite's own cutoff (suite.yaml `k`), only for
    # suites whose
    # queries carry noise patterns.
    noise: list[str] = []
    if any(q.noise_patterns for q in suite.queries):
        run = {r.query_id: r.memory_ids for r in output.ranked}
        # A live system's ids the suite does not hold (foreign rows): judged on the text it returned.
        texts = {m.id: m.text for m in (*output.corpus.foreign_memories, *suite.memories)}
        table = noise_table(suite.queries, run, texts, k=suite.k)
        frame, noise = frame.join(table), list(table.columns)
    summary = summarize(frame, [*metrics, *noise], seed=seed, unit=unit, empty=empty)
    summary["cost"] = cost.Counted(counter.identity, k, budget_tokens, budget_cut).section()
    summary["build_ms"] = dict(output.build_ms)
    summary["prefix_cache_hit"] = output.prefix_cache_hit
    summary["cache"] = dict(output.cache)  # what came from a cache, and whether latency was measured
    official = upstream_aggregates(suite.scorer, frame, summary["overall"], metrics)
    if official:  # suite.protocol=official: upstream's own printed number beside memeval's mean
        summary["official"] = official
    return Evaluation(frame, summary)
