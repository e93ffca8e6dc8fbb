"""Report sections of the stage reports (tag inference, time decay, memory tiers): plans stage_*.yaml.

`stage_rows`: every row against the baseline as the stage reports read it: the plan's metrics, Δ of the
primary metric with a paired randomization test (Holm across the rows, on the primary metric only),
W/T/L, latency p50/p95 and each named stage's median time, ingest time; a one-line reading per row;
the per-label P@5 table (the generic report shows the primary's); with `evidence_age: true`, the age
of the relevant memories at query time.
`tier_cost`: searching high-order tiers vs observations only, re-timed live (see experiments.study.live).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from experiments.compare.render import Block, Heading, Paragraph, Table, code
from experiments.evaluate.statistics import compare, holm
from experiments.study.live import (
    interleaved_passes,
    latency_summary,
    latency_table,
    query_encoding_ms,
    row_settings,
)
from experiments.study.sections import SectionContext, register_section
from experiments.suites.load import load_suite
from retrieval.aging import epoch_days


def _fmt(value: float | None, digits: int = 3) -> str:
    return "–" if value is None or (isinstance(value, float) and np.isnan(value)) else f"{value:.{digits}f}"


def _row_order(ctx: SectionContext) -> list[str]:
    """The plan's row order, baseline first (the comparison may sort rows by a swept parameter)."""
    labels = list(ctx.comparison.labels)
    if ctx.study is not None:
        labels = [r.name for r in ctx.study.plan.rows if r.name in labels]
    return [ctx.comparison.baseline, *(x for x in labels if x != ctx.comparison.baseline)]


def paired_primary(ctx: SectionContext, metric: str) -> tuple[pd.DataFrame, np.ndarray]:
    """compare() of every row with the baseline on one metric, and Holm across the non-baseline rows."""
    runs = ctx.comparison.run_by_label
    order = _row_order(ctx)
    base = runs[order[0]].answerable().index
    values = {name: runs[name].per_query.loc[base, metric].astype(float) for name in order}
    table = runs[order[0]].per_query
    clusters = table.loc[base, "cluster"] if "cluster" in table.columns else None
    # The report's unit: whole conversations where the suite has several queries per conversation.
    unit = ctx.significance.attrs.get("unit", "auto")
    stats = compare(values, order[0], seed=ctx.seed, clusters=clusters, unit=unit)
    return stats, holm(stats["p_value"].to_numpy()[1:]) if len(order) > 1 else np.array([])


@register_section("stage_rows")
def stage_rows(ctx: SectionContext) -> list[Block]:
    comp, primary = ctx.comparison, ctx.primary
    runs, order = comp.run_by_label, _row_order(ctx)
    metrics = [m for m in comp.metrics if m != primary]
    metrics = [primary, *metrics]
    stats, p_holm = paired_primary(ctx, primary)
    wanted = [str(s) for s in ctx.options.get("stages", [])]
    stages = [s for s in wanted if any(f"ms.{s}" in runs[n].per_query for n in order)]
    table = {}
    for i, name in enumerate(order):
        run, row = runs[name], stats.loc[name]
        overall = run.summary.get("overall", {})
        cells = {m: _fmt(overall.get(m)) for m in metrics}
        if i == 0:
            cells |= {f"Δ {primary}": "baseline", "p (Holm)": "", "W/T/L": ""}
        else:
            cells |= {
                f"Δ {primary}": f"{row['delta']:+.3f}",
                "p (Holm)": _fmt(float(p_holm[i - 1])),
                "W/T/L": f"{int(row['wins'])}/{int(row['ties'])}/{int(row['losses'])}",
            }
        cells |= {
            "latency p50 ms": _fmt(overall.get("latency_ms_p50"), 1),
            "p95 ms": _fmt(overall.get("latency_ms_p95"), 1),
        }
        for s in stages:
            col = f"ms.{s}"
            cells[f"{s} ms p50"] = (
                _fmt(float(run.per_query[col].median()), 2) if col in run.per_query else "–"
            )
        cells["ingest ms (once)"] = _fmt(run.summary.get("build_ms", {}).get("ingest"), 0)
        table[name] = cells
    reading = []
    for i, name in enumerate(order[1:]):
        delta, p = float(stats.loc[name, "delta"]), float(p_holm[i])
        verdict = (
            "no detectable change"
            if p >= ctx.alpha
            else ("significantly better" if delta > 0 else "significantly worse")
        )
        reading.append(f"{name}: {verdict} ({primary} {delta:+.3f} vs {order[0]}, Holm p = {p:.3f}).")
    label = (comp.label_column or "label.").removeprefix("label.")
    blocks: list[Block] = [
        Heading("Rows against the baseline (stage report)"),
        Table(pd.DataFrame(table).T, "row"),
        Paragraph(
            f"Means over the answerable queries (metrics.json). Δ {primary}, p and W/T/L: paired per query "
            f"against {code(order[0])} (randomization test, seed {ctx.seed}), Holm across the rows on "
            f"{primary} alone (the tables above correct across every row × metric). Latency: per query, "
            "as each row's run measured it; – where the run took its retrieval prefix from the candidate "
            "cache (a cached time is never reported); ingest runs once per suite and process."
        ),
        Paragraph("Reading (generated): " + " ".join(reading)),
    ]
    if label:
        blocks += [Paragraph(f"P@5 per {label}:"), Table(_label_table(ctx, order, label, "P@5"), label)]
    if ctx.options.get("evidence_age") and ctx.study is not None:
        blocks.append(Paragraph(evidence_age(ctx)))
    return blocks


def _label_table(ctx: SectionContext, order: list[str], label: str, metric: str) -> pd.DataFrame:
    runs = ctx.comparison.run_by_label
    values = {n: runs[n].summary.get("by_label", {}).get(label, {}) for n in order}
    base = values[order[0]]
    rows = {}
    for group in sorted({g for v in values.values() for g in v}):
        n = base.get(group, {}).get("n_answerable", 0)
        if n:  # abstention-only groups have no relevance metric
            rows[group] = {"n": str(n), **{r: _fmt(values[r].get(group, {}).get(metric)) for r in order}}
    return pd.DataFrame(rows).T


def evidence_age(ctx: SectionContext) -> str:
    """Median age in days (query now - created_at) of relevant memories and of all in-scope memories."""
    suite = load_suite(row_settings(ctx.study, ctx.comparison.baseline).suite)
    created = {m.id: epoch_days(m.created_at) for m in suite.memories}
    by_scope: dict[str, list[float]] = {}
    for m in suite.memories:
        by_scope.setdefault(m.scope_key, []).append(created[m.id])
    relevant, everything = [], []
    for q in suite.queries:
        now = epoch_days(q.now)
        relevant += [now - created[mid] for mid, grade in suite.qrels.get(q.id, {}).items() if grade > 0]
        everything += [now - c for c in by_scope.get(q.scope_key, [])]
    relevant_a, everything_a = np.array(relevant, dtype=float), np.array(everything, dtype=float)
    if not np.isfinite(relevant_a).any():
        return "Evidence age: the suite has no dates on queries or memories (no decay applies)."
    return (
        f"Evidence age at query time (generated): median {np.nanmedian(relevant_a):.0f} days for relevant "
        f"memories, {np.nanmedian(everything_a):.0f} days for all memories in the query's scope."
    )


@register_section("tier_cost")
def tier_cost(ctx: SectionContext) -> list[Block]:
    """Per-query retrieval time, high-order tiers on vs off, re-timed live over interleaved repeats."""
    if ctx.study is None:
        return [Heading("Cost of searching high-order tiers"), Paragraph("Needs a study (rows to re-run).")]
    repeats = int(ctx.options.get("repeats", 7))
    names = [str(r) for r in ctx.options.get("rows", ["hybrid", "tiering-observations_only", "tiering"])]
    configs = {name: row_settings(ctx.study, name) for name in names}
    suite = load_suite(next(iter(configs.values())).suite)
    passes = interleaved_passes(configs, suite, repeats)
    summaries = {name: latency_summary(runs) for name, runs in passes.items()}
    table = latency_table(summaries)
    means = {n: (t["mean_ms"], t["p50_ms"], t["median_repeat_mean_ms"]) for n, t in summaries.items()}
    obs, full = means[names[1]], means[names[2]]
    encode = float(np.median(query_encoding_ms(configs[names[0]], [q.text for q in suite.queries[:50]], 1)))
    n_obs = sum(m.tier == "observation" for m in suite.memories)
    scopes = len({m.scope_key for m in suite.memories})
    return [
        Heading("Cost of searching high-order tiers"),
        Paragraph(
            f"Workload: {code(suite.name)}, {scopes} scopes x {n_obs // scopes:,} observations, "
            f"{len(suite.memories) - n_obs} high-order memories in all, {len(suite.queries)} queries; "
            f"per-query time = channel search + fusion + rank stages over {repeats} interleaved live "
            "passes (no candidate cache; query embeddings from the disk cache). CPU: this process's user + "
            "system time of a pass over its queries; load average at each pass's start (a shared machine)."
        ),
        Table(pd.DataFrame(table).T, "pipeline"),
        Paragraph(
            f"Searching the high-order tiers costs **{100 * (full[0] / obs[0] - 1):+.1f}%** mean time per "
            f"query ({100 * (full[1] / obs[1] - 1):+.1f}% at the median query; "
            f"{100 * (full[2] / obs[2] - 1):+.1f}% on the median repeats) against observations only "
            f"(target: under +10%). A live system also embeds each query: MiniLM takes {encode:.1f} ms "
            "(median, batch of 1, one torch thread); counting it, the high-order tiers add "
            f"**{100 * (full[0] - obs[0]) / (obs[0] + encode):+.2f}%** to the mean query time."
        ),
    ]
