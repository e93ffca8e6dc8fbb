"""Per-query relevance metrics: metric names, the kernels behind them, and the per-query table.

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
relevant document (abstention questions) have nothing to retrieve; they are left out of the
table and reported apart by the caller (see `abstentions`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np

from experiments.metrics.average_precision import average_precision
from experiments.metrics.hit import hit
from experiments.metrics.ndcg import ndcg
from experiments.metrics.ndcg_any import ndcg_any
from experiments.metrics.precision import precision
from experiments.metrics.recall import recall
from experiments.metrics.recall_all import recall_all
from experiments.metrics.recall_all_lme import recall_all as lme_recall_all
from experiments.metrics.recall_any import recall_any
from experiments.metrics.reciprocal_rank import reciprocal_rank

if TYPE_CHECKING:  # pandas only when a table is built: metric names are parsed by light modules too
    import pandas as pd

Kernel = Callable[[np.ndarray, np.ndarray, np.ndarray, int | None], np.ndarray]
Qrels = Mapping[str, Mapping[str, int]]
Run = Mapping[str, Sequence[str]]


@dataclass(frozen=True)
class MetricFamily:
    kernel: Kernel
    needs_cutoff: bool


FAMILIES: Mapping[str, MetricFamily] = MappingProxyType(
    {
        "P": MetricFamily(precision, needs_cutoff=True),
        "R": MetricFamily(recall, needs_cutoff=True),
        "nDCG": MetricFamily(ndcg, needs_cutoff=False),
        "RR": MetricFamily(reciprocal_rank, needs_cutoff=False),
        "AP": MetricFamily(average_precision, needs_cutoff=False),
        "hit": MetricFamily(hit, needs_cutoff=True),
        "R_all": MetricFamily(recall_all, needs_cutoff=True),
        # LongMemEval's official retrieval metrics, under their own names (docs/benchmarks.md).
        "recall_any": MetricFamily(recall_any, needs_cutoff=True),
        "recall_all": MetricFamily(lme_recall_all, needs_cutoff=True),
        "ndcg_any": MetricFamily(ndcg_any, needs_cutoff=True),
    }
)
KNOWN_NAMES = (
    "P@k, R@k, nDCG, nDCG@k, RR, RR@k, AP, AP@k, hit@k, R_all@k, recall_any@k, recall_all@k, ndcg_any@k "
    "(k a positive integer)"
)
_NAME = re.compile(r"(?P<family>\w+?)(?:@(?P<k>[1-9][0-9]*))?")


@dataclass(frozen=True)
class Metric:
    """A parsed metric name: `Metric("nDCG@10", "nDCG", 10)`."""

    name: str
    family: str
    k: int | None

    def __call__(self, gains: np.ndarray, n_relevant: np.ndarray, ideal: np.ndarray) -> np.ndarray:
        return FAMILIES[self.family].kernel(gains, n_relevant, ideal, self.k)


def parse_metric(name: str) -> Metric:
    """Parse a canonical metric name ("P@5", "RR", "R_all@10"); anything else raises ValueError."""
    match = _NAME.fullmatch(name) if isinstance(name, str) else None
    family = FAMILIES.get(match["family"]) if match else None
    if family is None or (family.needs_cutoff and match["k"] is None):
        raise ValueError(f"unknown metric name {name!r}; known: {KNOWN_NAMES}")
    return Metric(name, match["family"], None if match["k"] is None else int(match["k"]))


def metric_name_for_mlflow(name: str) -> str:
    """`R@10` -> `R_at_10`.

    MLflow metric keys may only hold alphanumerics, `_ - . : /` and spaces, and `log_metric`
    rejects `@`. Our names never contain `_at_`, so the mapping cannot make two metrics collide.
    """
    return parse_metric(name).name.replace("@", "_at_")


def answerable(qrels: Qrels) -> list[str]:
    """Queries with at least one relevant (grade > 0) judgement, in qrels order: the table's rows."""
    return [q for q, judged in qrels.items() if any(g > 0 for g in judged.values())]


def abstentions(qrels: Qrels) -> list[str]:
    """Queries with no relevant judgement: the right answer is that memory holds nothing."""
    return [q for q, judged in qrels.items() if not any(g > 0 for g in judged.values())]


def missing_from_run(qrels: Qrels, run: Run) -> list[str]:
    """Answerable queries the run has no ranked list for (they score 0; report them)."""
    return [q for q in answerable(qrels) if not run.get(q)]


def _padded(rows: list[list[float]], width: int) -> np.ndarray:
    """Stack ragged rows into a zero-padded matrix without a Python loop over cells."""
    lengths = np.fromiter((len(r) for r in rows), dtype=np.intp, count=len(rows))
    matrix = np.zeros((len(rows), max(width, 1)))
    row_of_cell = np.repeat(np.arange(len(rows)), lengths)
    column_of_cell = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    matrix[row_of_cell, column_of_cell] = np.fromiter(chain.from_iterable(rows), dtype=float)
    return matrix


def per_query(qrels: Qrels, run: Run, metrics: Sequence[str]) -> pd.DataFrame:
    """One row per answerable query (index `query_id`), one float column per metric, in order.

    `run` maps a query id to its ranked document ids, best first, already cut to the run depth.
    A query absent from the run, or with an empty list, scores 0. Inputs are not modified.
    All queries are scored as one zero-padded matrix (queries x longest ranked list).
    """
    import pandas as pd

    parsed = [parse_metric(m) for m in metrics]
    if len(set(metrics)) != len(metrics):
        raise ValueError(f"metric names repeat: {list(metrics)}")
    queries = answerable(qrels)
    gain_rows, ideal_rows = [], []
    for query in queries:
        judged, ranked = qrels[query], run.get(query) or ()
        if isinstance(ranked, str) or len(set(ranked)) != len(ranked):
            raise ValueError(f"run for query {query!r} must be a list of distinct document ids")
        gain_rows.append([judged.get(doc, 0) for doc in ranked])
        ideal_rows.append(sorted((g for g in judged.values() if g > 0), reverse=True))
    # A negative grade (judged harmful) gains nothing, as in trec_eval; clip once for the whole run.
    gains = np.maximum(_padded(gain_rows, max(map(len, gain_rows), default=0)), 0)
    ideal = _padded(ideal_rows, max(map(len, ideal_rows), default=0))
    n_relevant = (ideal > 0).sum(axis=1)
    columns = {m.name: np.asarray(m(gains, n_relevant, ideal), dtype=float) for m in parsed}
    return pd.DataFrame(columns, index=pd.Index(queries, name="query_id"), columns=list(metrics))


def mean(frame: pd.DataFrame) -> dict[str, float]:
    """Mean of each metric column over every row (missing queries included as 0); NaN if no rows."""
    return {str(name): float(frame[name].mean()) for name in frame.columns}


__all__ = [
    "FAMILIES",
    "Kernel",
    "Metric",
    "abstentions",
    "answerable",
    "mean",
    "metric_name_for_mlflow",
    "missing_from_run",
    "parse_metric",
    "per_query",
]
