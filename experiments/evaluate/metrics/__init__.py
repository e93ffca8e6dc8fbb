"""Per-query relevance metrics: metric names, the kernels behind them, and the per-query table.

A metric is one file here, its kernel and its `METRICS` declaration (family.py); `families()` finds them.

Data flow: a suite's qrels and a retrieval run go in, a per-query DataFrame comes out; the
runner aggregates it (overall, per label) and logs it. Every metric is a numpy kernel in its own
module over the same arrays, built once per run:

    gains       (..., depth)  grade of each ranked document, best first; unjudged or grade <= 0 -> 0
    n_relevant  (...)         number of documents with grade > 0 in the qrels (>= 1)
    ideal       (...,  m)     the qrels' positive grades sorted best first, zero-padded
    k           int | None    cutoff; None means the whole ranked list

A kernel returns one value per ranked list: a scalar for 1-D input, a vector for a zero-padded
2-D batch (padding is a grade 0, which no metric counts). per_query scores all queries as one batch.

Conventions are trec_eval's (a test checks them against ir_measures / pytrec_eval): relevant
means grade > 0; P@k divides by k; nDCG's ideal comes from the qrels. Unlike BEIR, a judged query
missing from the run scores 0 instead of leaving the average. Queries whose judgements have no
relevant document (abstention questions) have nothing to retrieve; by default they are left out of
the table and reported apart by the caller (see `abstentions`); `per_query(..., empty="zero")`
scores them 0 on every measure instead, as trec_eval does. Names take ir_measures-style parameters
for the other conventions users switch between (`P(rel=2)@5`, `nDCG(gain=exp)@10`:
experiments/evaluate/metrics/conventions.py). A grade below 0 marks a must-not memory: not relevant to any
measure, counted by harm@k, which is over its own queries: every query with a must-not judgement, whatever
its relevant set (a query with only must-not memories gets a row, NaN on the other measures), and NaN on
a query without one (`must_not`).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np

from experiments.evaluate.metrics.conventions import (
    KNOWN_PARAMETERS,
    at_threshold,
    exponential,
    parse_parameters,
)
from experiments.evaluate.metrics.family import Kernel, MetricFamily
from experiments.evaluate.metrics.trec_order import cells, scored_grades

if TYPE_CHECKING:  # pandas only when a table is built: metric names are parsed by light modules too
    import pandas as pd

Qrels = Mapping[str, Mapping[str, int]]
Run = Mapping[str, Sequence[str]]


@functools.cache
def families() -> Mapping[str, MetricFamily]:
    """Every metric by its name: the `METRICS` each module of this package declares (one metric per file,
    experiments/evaluate/metrics/family.py), found by a scan of the package; a name declared twice is an
    error. Scanned when a name is first parsed, not at import: the modules import this package."""
    found: dict[str, MetricFamily] = {}
    for info in pkgutil.iter_modules(__path__, f"{__name__}."):
        for name, family in getattr(importlib.import_module(info.name), "METRICS", {}).items():
            if name in found:
                raise TypeError(f"two metric modules declare {name!r} ({info.name} and another)")
            found[name] = family
    return MappingProxyType(found)


def known_names() -> str:
    """The metric names a run accepts, for an error that lists them (derived from `families`)."""
    names = [f"{n}@k" if f.needs_cutoff else f"{n}, {n}@k" for n, f in families().items()]
    return (
        f"{', '.join(names)} (k a positive integer), each optionally with parameters in parentheses "
        f"before @: {KNOWN_PARAMETERS}, e.g. P(rel=2)@5"
    )


_NAME = re.compile(r"(?P<family>\w+?)(?:\((?P<params>[^()]*)\))?(?:@(?P<k>[1-9][0-9]*))?")


@dataclass(frozen=True)
class Metric:
    """A parsed metric name: `Metric("nDCG@10", "nDCG", 10)`, `Metric("P(rel=2)@5", "P", 5, rel=2)`."""

    name: str
    family: str
    k: int | None
    rel: int = 1  # grades >= rel are relevant (trec_eval -l); nDCG keeps the raw grades whatever it is
    gain: str = "linear"  # nDCG's gain per grade: linear (the grade) or exp (2^g - 1)

    def __call__(
        self, gains: np.ndarray, n_relevant: np.ndarray, ideal: np.ndarray, grades: np.ndarray | None = None
    ) -> np.ndarray:
        """One value per ranked list. `grades` are the raw qrels grades of the ranked documents
        (negatives kept), for the kernels that need them (harm@k); `gains` has them clipped at 0."""
        family = families()[self.family]
        if family.raw_grades:
            return family.kernel(gains if grades is None else grades, n_relevant, ideal, self.k)
        if self.family == "nDCG":
            if self.gain == "exp":
                gains, ideal = exponential(gains), exponential(ideal)
        else:
            gains, n_relevant, ideal = at_threshold(gains, ideal, self.rel)
        with np.errstate(invalid="ignore", divide="ignore"):
            values = family.kernel(gains, n_relevant, ideal, self.k)
        # Nothing relevant (at this threshold): 0 on every measure, as trec_eval counts it.
        return np.where(np.asarray(n_relevant) > 0, values, 0.0)


def parse_metric(name: str) -> Metric:
    """Parse a metric name ("P@5", "RR", "R_all@10", "P(rel=2)@5"); anything else raises ValueError."""
    match = _NAME.fullmatch(name) if isinstance(name, str) else None
    family = families().get(match["family"]) if match else None
    if family is None or (family.needs_cutoff and match["k"] is None):
        raise ValueError(f"unknown metric name {name!r}; known: {known_names()}")
    try:
        params = parse_parameters(match["params"], match["family"]) if match["params"] is not None else {}
    except ValueError as err:
        raise ValueError(f"metric name {name!r}: {err}") from None
    if params and family.raw_grades:
        raise ValueError(f"metric name {name!r}: {match['family']} takes no parameters")
    k = None if match["k"] is None else int(match["k"])
    return Metric(name, match["family"], k, **params)  # type: ignore[arg-type]


def metric_name_for_mlflow(name: str) -> str:
    """`R@10` -> `R_at_10`, `P(rel=2)@5` -> `P_rel_2_at_5`.

    MLflow metric keys may only hold alphanumerics, `_ - . : /` and spaces, and `log_metric`
    rejects `@`, parentheses and `=`. Our names never contain `_at_`, `_rel_` or `_gain_`, so the
    mapping cannot make two metrics collide.
    """
    text = parse_metric(name).name.replace("@", "_at_").replace(")", "")
    return re.sub(r"[(=,]", "_", text)


def answerable(qrels: Qrels) -> list[str]:
    """Queries with at least one relevant (grade > 0) judgement, in qrels order: the table's rows."""
    return [q for q, judged in qrels.items() if any(g > 0 for g in judged.values())]


def abstentions(qrels: Qrels) -> list[str]:
    """Queries with no relevant judgement: the right answer is that memory holds nothing."""
    return [q for q, judged in qrels.items() if not any(g > 0 for g in judged.values())]


def over_own_queries(name: str) -> bool:
    """Whether a metric is averaged over its own queries (harm@k: those with must-not judgements, NaN on
    the others) rather than the answerable ones; False for names that are no relevance metric (noise@k)."""
    try:
        return families()[parse_metric(name).family].raw_grades
    except ValueError:
        return False


def must_not(qrels: Qrels) -> list[str]:
    """Queries with a must-not judgement (a grade below 0): the ones harm@k is over, in qrels order."""
    return [q for q, judged in qrels.items() if any(g < 0 for g in judged.values())]


def missing_from_run(qrels: Qrels, run: Run) -> list[str]:
    """Answerable queries the run has no ranked list for (they score 0; report them)."""
    return [q for q in answerable(qrels) if not run.get(q)]


def _padded(rows: list[list[float]], width: int) -> np.ndarray:
    """Stack ragged rows into a zero-padded matrix without a Python loop over cells."""
    lengths = np.fromiter((len(r) for r in rows), dtype=np.intp, count=len(rows))
    matrix = np.zeros((len(rows), max(width, 1)))
    matrix[cells(lengths)] = np.fromiter(chain.from_iterable(rows), dtype=float)
    return matrix


def _ideal(judged: list[Mapping[str, int]]) -> np.ndarray:
    """Each query's positive grades, best first, zero-padded to the most any query has (at least 1 wide)."""
    counts = np.fromiter(map(len, judged), dtype=np.intp, count=len(judged))
    grades = np.fromiter(
        chain.from_iterable(j.values() for j in judged), dtype=float, count=int(counts.sum())
    )
    matrix = np.zeros((len(judged), max(int(counts.max(initial=0)), 1)))
    matrix[cells(counts)] = np.maximum(grades, 0)
    matrix = -np.sort(-matrix, axis=1)  # best first; the negation turns each -0.0 back into 0.0
    return matrix[:, : max(int((matrix > 0).sum(axis=1).max(initial=0)), 1)]


EMPTY_QUERIES = ("apart", "zero")


def per_query(qrels: Qrels, run: Run, metrics: Sequence[str], *, empty: str = "apart") -> pd.DataFrame:
    """One row per answerable query (index `query_id`), one float column per metric, in order; with a
    harm@k metric, also a row per query with only must-not judgements (NaN on the other metrics), and
    harm@k is NaN on a query without a must-not judgement: each measure over its own queries.

    `run` maps a query id to its ranked document ids, best first, already cut to the run depth.
    A query absent from the run, or with an empty list, scores 0. Inputs are not modified.
    All queries are scored as one zero-padded matrix (queries x longest ranked list).
    `empty="zero"` keeps every judged query, those with no relevant document scoring 0 (trec_eval);
    the default `apart` leaves them out (the caller reports them as abstention queries).
    """
    rows = _Rows(qrels, metrics, empty)
    gain_rows = []
    for query in rows.queries:
        judged, ranked = qrels[query], run.get(query) or ()
        if isinstance(ranked, str) or len(set(ranked)) != len(ranked):
            raise ValueError(f"run for query {query!r} must be a list of distinct document ids")
        gain_rows.append([judged.get(doc, 0) for doc in ranked])
    return rows.table(qrels, _padded(gain_rows, max(map(len, gain_rows), default=0)))


def per_query_from_scores(
    qrels: Qrels, scores: Mapping[str, Mapping[str, float]], metrics: Sequence[str], *, empty: str = "apart"
) -> pd.DataFrame:
    """`per_query` of a run given as scores, `{query id: {document id: score}}` (what a TREC run file and
    pytrec_eval hold), ranked as trec_eval ranks it: score descending compared as a C float (float32),
    ties by document id descending (experiments/evaluate/metrics/trec_order.py); every scored document
    counts (no depth cut). The same table as `per_query` of that ranking, to the last bit, built without a
    Python loop over documents."""
    rows = _Rows(qrels, metrics, empty)
    return rows.table(qrels, scored_grades(qrels, scores, rows.queries))


class _Rows:
    """The table's rows and metrics, checked before any work: answerable (or, with empty="zero", every
    judged) query, then those with only must-not judgements when a harm@k metric asks for them."""

    def __init__(self, qrels: Qrels, metrics: Sequence[str], empty: str) -> None:
        self.metrics = list(metrics)
        self.parsed = [parse_metric(m) for m in metrics]
        if len(set(metrics)) != len(metrics):
            raise ValueError(f"metric names repeat: {list(metrics)}")
        if empty not in EMPTY_QUERIES:
            raise ValueError(f"empty queries must be one of {', '.join(EMPTY_QUERIES)}, got {empty!r}")
        queries = answerable(qrels) if empty == "apart" else list(qrels)
        raw = any(families()[m.family].raw_grades for m in self.parsed)
        self.harmful = set(must_not(qrels)) if raw else set()
        rows = set(queries)  # once: a set per query made this quadratic in the queries
        extra = [q for q in qrels if q in self.harmful and q not in rows]
        self.relevant_rows = np.array([True] * len(queries) + [False] * len(extra), dtype=bool)
        self.queries = queries + extra

    def table(self, qrels: Qrels, grades: np.ndarray) -> pd.DataFrame:
        """The metrics of `grades` (queries x ranks, zero-padded: the qrels grade of each ranked document)."""
        import pandas as pd  # ~0.6 s: only a table needs it (memeval-run --help parses metric names)

        # A negative grade (a must-not memory) gains nothing, as in trec_eval; clip once for the whole run.
        # Only harm@k reads the raw grades.
        gains = np.maximum(grades, 0)
        ideal = _ideal([qrels[q] for q in self.queries])
        n_relevant = (ideal > 0).sum(axis=1)
        columns = {m.name: np.asarray(m(gains, n_relevant, ideal, grades), dtype=float) for m in self.parsed}
        if self.harmful:  # each measure over its own queries: harm@k over those with must-not judgements
            judged_harm = np.array([q in self.harmful for q in self.queries], dtype=bool)
            for m in self.parsed:
                own = judged_harm if families()[m.family].raw_grades else self.relevant_rows
                columns[m.name] = np.where(own, columns[m.name], np.nan)
        index = pd.Index(self.queries, name="query_id")
        return pd.DataFrame(columns, index=index, columns=self.metrics)


def mean(frame: pd.DataFrame) -> dict[str, float]:
    """Mean of each metric column over every row (missing queries included as 0); NaN if no rows."""
    return {str(name): float(frame[name].mean()) for name in frame.columns}


__all__ = [
    "EMPTY_QUERIES",
    "Kernel",
    "Metric",
    "MetricFamily",
    "abstentions",
    "answerable",
    "families",
    "known_names",
    "mean",
    "metric_name_for_mlflow",
    "missing_from_run",
    "must_not",
    "over_own_queries",
    "parse_metric",
    "per_query",
    "per_query_from_scores",
]
