"""`live_system` report section: what each live memory system cost, beside its quality.

Reads the `system` section of each run's metrics.json (experiments/systems/outputs.py): per-query wall
latency at the service (network and retries included), ingest throughput, time until searchable, errors,
timeouts, retries, 429s, returned ids not in the suite, and the words of the returned texts at the suite's
k; and the run's own `scope_leaks` (counted once, for every run). A run with no live channel shows "-".
"""

from __future__ import annotations

import pandas as pd

from experiments.compare.render import Block, Heading, Paragraph, Table
from experiments.study.sections import SectionContext, register_section

COLUMNS = {
    "mode": "mode",
    "latency_ms_p50": "p50 ms",
    "latency_ms_p95": "p95 ms",
    "ingest_per_s": "ingest /s",
    "until_searchable_s": "searchable s",
    "errors": "errors",
    "timeouts": "timeouts",
    "retries": "retries",
    "rate_limited": "429s",
    "unknown_ids": "unknown ids",
    "scope_leaks": "leaks",  # the run's own count (metrics.json's top level), not the system section's
    "returned_words_at_k_mean": "words@k",
}


def _cell(value: object) -> object:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"
    return value


def cost_table(comparison) -> pd.DataFrame:
    rows = {}
    for label, run in comparison.run_by_label.items():
        system = run.summary.get("system") or {}
        if system:
            system = {**system, "scope_leaks": run.summary.get("scope_leaks")}
        rows[label] = {title: _cell(system.get(key)) for key, title in COLUMNS.items()}
    return pd.DataFrame.from_dict(rows, orient="index")


@register_section("live_system")
def live_system(ctx: SectionContext) -> list[Block]:
    table = cost_table(ctx.comparison)
    notes = sorted(
        {note for run in ctx.comparison.runs for note in (run.summary.get("system") or {}).get("notes", [])}
    )
    blocks: list[Block] = [
        Heading("Live system cost"),
        Table(table, "run"),
        Paragraph(
            "Per-query wall latency at the service (network, queueing and retries included; a replayed run "
            "times its cassette, not the service), ingest throughput and time until searchable, failures "
            "and retries, returned ids that are not in the suite (not relevant), and the mean words of the "
            "returned texts in the top k: the context an agent would pay for."
        ),
    ]
    if notes:
        blocks.append(Paragraph("Notes: " + "; ".join(notes) + "."))
    return blocks
