"""What a run prints: the suite and pipeline it runs, then its results table and a line of its cost."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments.evaluate.cost import console_line
from experiments.suites.suite import Suite
from retrieval.pipeline import Pipeline, RunOutput

if TYPE_CHECKING:  # pandas and scipy: imported when a run evaluates (tests/project/test_entry_points.py)
    from experiments.evaluate.table import Evaluation

# The console table's count column, e.g. 24/25: the means are over the answerable queries (docs/metrics.md);
# with `empty_queries=zero` over every judged query, and the column says so.
ANSWERABLE_COLUMN = "answerable/all"
SCORED_COLUMN = "scored/all"


def print_start(suite: Suite, variant: str, pipeline: Pipeline) -> None:
    """The suite (its size, content hash and loader notes) and the variant's stages, before any work."""
    print(
        f"suite {suite.name}: {len(suite.memories):,} memories, {len(suite.queries):,} queries "
        f"({suite.content_hash[:12]}); variant {variant}: " + " -> ".join(s.name for s in pipeline.stages)
    )
    for note in suite.notes:
        print(f"  note: {note}")


def print_results(
    evaluation: Evaluation, output: RunOutput, metrics: list[str], label: str | None, run_dir: Path
) -> None:
    """The results table, the latency (never a figure replayed from a cache), scope leaks, the folder."""
    print(results_table(evaluation, metrics, label))
    latency = latency_text(evaluation.metrics)
    print(
        f"{latency}; scope leaks {evaluation.metrics['scope_leaks']}; "
        f"prefix cache {'hit' if output.prefix_cache_hit else 'miss'}"
    )
    for metric, numbers in evaluation.metrics.get("official", {}).items():  # suite.protocol=official
        print(f"{metric}: " + "; ".join(f"{name} {value:.4f}" for name, value in numbers.items()))
    returned = console_line(evaluation.metrics)  # tokens returned (experiments/evaluate/cost.py)
    if returned:
        print(returned)
    print(f"results in {run_dir}")


def latency_text(metrics: dict) -> str:
    """The console's latency: measured, reused from a cache (not timed here), or none to measure (a shard
    whose scopes hold no query: nothing came from a cache)."""
    overall = metrics["overall"]
    if overall.get("latency_ms_p50") is not None:
        return f"latency ms p50 {overall['latency_ms_p50']:.1f} p95 {overall['latency_ms_p95']:.1f}"
    if not metrics.get("n_queries"):
        return "no query to time (this run holds none)"
    return "latency not measured (reused from cache)"


def results_table(evaluation: Evaluation, metrics: list[str], label: str | None) -> str:
    """Overall and per-label means, one row each, as console text: labels left, answerable/all query
    counts, numbers right-aligned with 3 decimals, NaN for a mean with no query to average. pandas printed
    the same text (tests/run/test_results_table.py) at a real share of a sweep job's cost (each prints one);
    where it would have dropped a column's common trailing zeros or switched to exponents for values
    under 0.001, this keeps 3 decimals."""
    summary = evaluation.metrics
    rows = {"overall": summary["overall"]}
    if label and label in summary["by_label"]:
        rows.update(summary["by_label"][label])
    present = {key for row in rows.values() for key in row}
    count = SCORED_COLUMN if summary.get("empty_queries") == "zero" else ANSWERABLE_COLUMN
    columns = [count, *[m for m in metrics if m in present]]

    def cell(row: dict[str, Any], column: str) -> str:
        if column == ANSWERABLE_COLUMN:  # the means are over the answerable queries: say how many of all
            return f"{row.get('n_answerable', row.get('n_queries'))}/{row.get('n_queries')}"
        if column == SCORED_COLUMN:  # empty queries scored 0: the means are over every query
            return f"{row.get('n_queries')}/{row.get('n_queries')}"
        value = row.get(column)
        if value is None or (isinstance(value, float) and value != value):
            return "NaN"
        return f"{value:.3f}" if isinstance(value, float) else str(value)

    body = [[str(name), *(cell(row, c) for c in columns)] for name, row in rows.items()]
    widths = [max(len(text) for text in column) for column in zip(["", *columns], *body, strict=True)]
    lines = [[""] + columns, *body]
    table = "\n".join(
        "  ".join(
            [line[0].ljust(widths[0]), *(t.rjust(w) for t, w in zip(line[1:], widths[1:], strict=True))]
        )
        for line in lines
    )
    # harm@k is over its own queries (those with must-not judgements): say how many, overall.
    own = summary["overall"].get("denominators", {})
    notes = [f"{m} over {n} queries (those with must-not judgements)" for m, n in own.items() if m in columns]
    return "\n".join([table, *notes])
