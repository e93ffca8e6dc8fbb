"""`suite.protocol=official|memeval`: a benchmark's own scorer, reproduced exactly, or memeval's conventions.

A loader that reads a benchmark with a published scorer (LoCoMo, LongMemEval) attaches, under
`protocol=official`, a `BenchmarkScorer` to its suite. It decides two things memeval's qrels cannot say:
- which queries are scored (`scored`): upstream's question set, which may hold questions with nothing
  relevant in the qrels (LoCoMo: no evidence; LongMemEval: no `has_answer` turn in an `answer*` session);
- the value of the metrics upstream defines (`owns`), computed by upstream's rules from the run;
every other metric keeps memeval's definition over the qrels (a scored query with nothing relevant scores 0
on it, as in trec_eval). Under `protocol=memeval` no scorer is attached: the qrels decide everything.
docs/benchmarks.md tables both conventions side by side, with upstream's file and line for each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from experiments.evaluate.metrics import Metric, Qrels, Run, parse_metric
from experiments.evaluate.metrics import per_query as relevance_per_query

if TYPE_CHECKING:
    import pandas as pd

PROTOCOLS = ("official", "memeval")
# Metric families only a benchmark's scorer can compute (they need more than qrels: a turn's session).
SCORER_ONLY = ("session_recall_any", "session_recall_all", "session_ndcg_any")


class BenchmarkScorer(Protocol):
    """Upstream's evaluation code for one benchmark, over memeval's run (ranked memory ids per query)."""

    name: str  # which upstream code this reproduces (stated in the suite's tags)
    scored: frozenset[str]  # the query ids upstream averages over

    def owns(self, metric: Metric) -> bool: ...

    def score(self, query_id: str, ranked: Sequence[str], metric: Metric) -> float: ...


def upstream_aggregates(
    scorer: BenchmarkScorer | None, table: pd.DataFrame, overall: Mapping[str, float], metrics: Sequence[str]
) -> dict[str, dict[str, float]]:
    """For each metric the scorer owns, memeval's mean beside the number upstream's own stats script prints
    (a scorer with an `aggregate`: LoCoMo's "Overall recall accuracy"), each labelled: metrics.json's
    `official` section. {} without such a scorer."""
    aggregate = getattr(scorer, "aggregate", None)
    if scorer is None or aggregate is None:
        return {}
    out = {}
    for name in metrics:
        if scorer.owns(parse_metric(name)) and name in table.columns:
            values = {q: float(table.at[q, name]) for q in table.index if q in scorer.scored}
            out[name] = {"memeval mean": overall.get(name), scorer.aggregate_name: aggregate(values)}
    return out


def check_metrics(scorer: BenchmarkScorer | None, metrics: Sequence[str]) -> None:
    """ValueError naming each metric that only a benchmark's scorer computes and this suite's does not."""
    wrong = [m for m in metrics if parse_metric(m).family in SCORER_ONLY]
    wrong = [m for m in wrong if scorer is None or not scorer.owns(parse_metric(m))]
    if wrong:
        raise ValueError(
            f"metrics {wrong} are LongMemEval's session view of a turn-level run (upstream's "
            "evaluate_retrieval_turn2session): only suite=longmemeval with suite.protocol=official has them"
        )


def per_query(
    scorer: BenchmarkScorer | None, qrels: Qrels, run: Run, metrics: Sequence[str], *, empty: str = "apart"
) -> pd.DataFrame:
    """memeval's per-query table (experiments/evaluate/metrics/__init__.py), or, with a scorer, a row per
    query upstream scores and upstream's value in each metric it owns."""
    check_metrics(scorer, metrics)
    table = relevance_per_query(qrels, run, metrics, empty=empty)
    if scorer is None:
        return table
    rows = [q for q in qrels if q in scorer.scored] + sorted(scorer.scored - set(qrels))
    table = table.reindex(rows).fillna(0.0)  # scored, nothing relevant in the qrels: 0, as trec_eval
    for name in metrics:
        metric = parse_metric(name)
        if scorer.owns(metric):
            table[name] = [scorer.score(q, run.get(q) or (), metric) for q in rows]
    return table
