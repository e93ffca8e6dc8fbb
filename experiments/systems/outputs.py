"""The live section of a run's outputs: what a live system cost, as metrics.json's `system` section.

`live_section(metrics, channel_reports, k)` is the one call the runner makes (experiments/run/app.py):
each live channel's `report()` (experiments/systems/retriever.py) becomes its section, per-query lists
reduced (the returned texts' words at the suite's k), its headline numbers are copied into `overall` as
`system.<name>` (so MLflow and reports have them) and its notes are printed. Scope leaks are not
counted here: the run's `scope_leaks` (experiments/evaluate/table.py) counts them for every variant.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

# The live-system figures that also go to MLflow (as `system.<name>` beside the overall metrics).
SYSTEM_METRICS = (
    "latency_ms_p50",
    "latency_ms_p95",
    "ingest_per_s",
    "until_searchable_s",
    "errors",
    "timeouts",
    "retries",
    "rate_limited",
    "unknown_ids",
    "returned_words_at_k_mean",
)


def live_section(metrics: dict[str, Any], channel_reports: Mapping[str, Mapping[str, Any]], k: int) -> None:
    """metrics.json's `system` section (one channel's, or one per live channel), its numbers also in
    `overall`, its notes printed; nothing when no channel is live."""
    sections = {ch: cost_section(r, k) for ch, r in channel_reports.items() if r.get("mode")}
    if not sections:
        return
    metrics["system"] = next(iter(sections.values())) if len(sections) == 1 else sections
    for channel, section in sections.items():
        prefix = "system." if len(sections) == 1 else f"system.{channel}."
        for name in SYSTEM_METRICS:
            if isinstance(section.get(name), (int, float)):
                metrics["overall"][prefix + name] = float(section[name])
        for note in section["notes"]:
            print(f"  {channel}: {note}")


def words(text: str | None) -> int:
    """Whitespace-separated words of a returned text: the size of the context an agent would pay for."""
    return len(text.split()) if text else 0


def cost_section(report: Mapping[str, Any], k: int) -> dict[str, Any]:
    """The `system` section of metrics.json from a channel's `report()`: per-query lists reduced, the
    returned texts' words at the suite's cutoff k (mean and p95 per query), and a plain-words summary."""
    texts = report.get("texts_per_query", {}).values()
    words_at_k = np.array([sum(words(t) for t in top[:k]) for top in texts], dtype=np.float64)
    out = {key: value for key, value in report.items() if key != "texts_per_query"}
    out["k"] = k
    out["returned_words_at_k_mean"] = float(words_at_k.mean()) if len(words_at_k) else None
    out["returned_words_at_k_p95"] = float(np.percentile(words_at_k, 95)) if len(words_at_k) else None
    notes = []
    if report.get("unknown_ids"):
        notes.append(f"{report['unknown_ids']} returned ids are not in the suite (counted as not relevant)")
    if report.get("duplicate_ids"):
        notes.append(f"{report['duplicate_ids']} returned ids repeat an earlier one (kept once)")
    if report.get("latency_source") == "recorded":
        notes.append("latency is the service's as recorded in the cassette (a replay asks no service)")
    elif report.get("latency_source") == "measured and recorded":
        notes.append("latency: measured for the queries asked now, as recorded for those the cassette held")
    if report.get("hits_without_text"):
        notes.append(f"{report['hits_without_text']} results came without text (0 words counted)")
    out["notes"] = notes
    return out
