"""The report's "Quality against cost" section: the primary metric against p50 latency and against tokens
returned, the Pareto set marked, and a LAFS frontier score per variant with its conversation interval and
its paired difference from the baseline (experiments/evaluate/frontier.py).

A variant's runs that differ only by a swept k or token budget are one variant with several points (its
own frontier); otherwise each run is one point. Runs whose latency was not measured (stages answered from
a cache) are left out of the latency frontier and named; runs made before tokens were counted, out of the
tokens frontier.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from experiments.compare.analysis import Comparison
from experiments.compare.plots import _png, plt  # the report's one matplotlib setup (Agg)
from experiments.compare.render import Block, Heading, Image, Paragraph, Table, code, md
from experiments.evaluate import frontier

AXES = {
    "latency_ms": ("p50 latency (ms)", frontier.LATENCY_MS),
    "tokens_returned": ("p50 tokens returned", frontier.TOKENS),
}


def _groups(comp: Comparison) -> dict[str, list[str]]:
    """Variant -> its run labels: runs of one variant varying only a k or budget are one variant's points."""
    swept = comp.sweep_param or ""
    by_budget = swept.startswith("budget.") or swept in {"depth", "suite.k"}
    groups: dict[str, list[str]] = {}
    for label, run in zip(comp.labels, comp.runs, strict=True):
        groups.setdefault(run.variant if by_budget else label, []).append(label)
    return groups


def _variants(comp: Comparison, column: str, labels: Sequence[str]) -> list[frontier.Variant] | None:
    quality = comp.values[comp.primary]
    out = []
    for label in labels:
        frame = comp.run_by_label[label].per_query
        if column not in frame.columns:
            return None
        cost = frame[column].reindex(quality.index).to_numpy(dtype=float)
        if np.isnan(cost).all() or (cost[~np.isnan(cost)] <= 0).all():
            return None
        out.append(frontier.Variant(label, quality[label].to_numpy(dtype=float), np.maximum(cost, 1e-9)))
    return out


def frontier_blocks(comp: Comparison, budgets: Mapping[str, frontier.Budgets] | None = None) -> list[Block]:
    budgets = {**{k: b for k, (_, b) in AXES.items()}, **(budgets or {})}
    clusters = (
        comp.clusters.reindex(comp.values[comp.primary].index).to_numpy()
        if comp.clusters is not None
        else None
    )
    by_query = clusters is None
    if by_query:
        clusters = np.arange(len(comp.values[comp.primary]))
    groups = _groups(comp)
    base_group = next(g for g, labels in groups.items() if comp.baseline in labels)
    blocks: list[Block] = [Heading(f"Quality against cost: {md(comp.primary)}")]
    for column, (axis, _) in AXES.items():
        bud = budgets[column]
        variants = {g: _variants(comp, column, labels) for g, labels in groups.items()}
        left_out = [g for g, v in variants.items() if v is None]
        variants = {g: v for g, v in variants.items() if v is not None}
        if not variants:
            blocks.append(Paragraph(f"No run measured {code(column)}: no {axis} frontier."))
            continue
        points = [
            frontier._point(v, np.ones(len(clusters), dtype=bool)) for vs in variants.values() for v in vs
        ]
        on_front = {p.name for p in frontier.pareto(points)}
        rows: dict[str, dict[str, Any]] = {}
        base = variants.get(base_group)
        for group, vs in variants.items():
            score = frontier.score_interval(vs, clusters, bud)
            row = {
                "points": len(vs),
                f"{comp.primary} (mean)": ", ".join(
                    f"{p.quality:.3f}" for p in points if p.name in {v.name for v in vs}
                ),
                axis: ", ".join(f"{p.cost:.4g}" for p in points if p.name in {v.name for v in vs}),
                "Pareto": ", ".join(v.name for v in vs if v.name in on_front) or "–",
                "frontier score": f"{score.estimate:.4f}",
                "95% CI": _ci(score),
            }
            if base is not None:
                row["Δ vs baseline (95% CI)"] = (
                    "(baseline)"
                    if group == base_group
                    else _ci(frontier.paired_difference(vs, base, clusters, bud), delta=True)
                )
            rows[group] = row
        blocks += [
            Heading(f"{md(comp.primary)} against {axis}", 3),
            Image(
                f"frontier_{column}.png",
                _plot(points, on_front, axis, comp.primary),
                f"{comp.primary} vs {axis}",
            ),
            Table(pd.DataFrame.from_dict(rows, orient="index"), "variant"),
            Paragraph(
                f"Frontier score: the area under the step frontier of {md(comp.primary)} over log "
                f"{md(bud.unit)} budgets {bud.low:g}-{bud.high:g} {md(bud.unit)} (LongMemEval-V2's LAFS "
                f"construction, floor {bud.floor:g}), each point the mean over the answerable queries at "
                "the p50 cost; the reference is no other variant (a variant's own frontier), Δ: the "
                "difference from the baseline's. 95% CI: "
                + (
                    "delete-one-query jackknife (the runs record no conversations)"
                    if by_query
                    else f"delete-one-conversation jackknife over the {len(set(clusters))} conversations, "
                    "t on G - 1 df, quality and cost from the same queries"
                )
                + "; with fewer than 10 conversations read it as a rough range (docs/metrics.md's "
                "few-cluster rules; coverage simulated in reports/benchmarks/frontier_coverage.md). "
                "Pareto: the points no other point beats at equal or lower cost."
                + (
                    " The latencies were measured in one sitting: the interval covers which conversations "
                    "were asked, not the timing noise between sittings (on a shared machine sub-millisecond "
                    "differences can reorder from one sitting to the next: run the study again to see)."
                    if column == "latency_ms"
                    else ""
                )
                + (f" Left out (not measured): {', '.join(code(g) for g in left_out)}." if left_out else "")
            ),
        ]
    return blocks


def _ci(interval: frontier.Interval, delta: bool = False) -> str:
    if not math.isfinite(interval.low):
        return "unbounded (one conversation)"
    sign = "+" if delta else ""
    head = f"{interval.estimate:{sign}.4f} " if delta else ""
    return f"{head}[{interval.low:{sign}.4f}, {interval.high:{sign}.4f}]"


def _plot(points: Sequence[frontier.Point], on_front: set[str], axis: str, metric: str):
    fig, ax = plt.subplots(figsize=(6, 4))
    front = sorted((p for p in points if p.name in on_front), key=lambda p: p.cost)
    ax.scatter([p.cost for p in points], [p.quality for p in points], color="0.6", label="run")
    ax.step([p.cost for p in front], [p.quality for p in front], where="post", color="C0", label="Pareto set")
    ax.scatter([p.cost for p in front], [p.quality for p in front], color="C0")
    for p in points:
        ax.annotate(p.name, (p.cost, p.quality), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel(f"{axis} (log)")
    ax.set_ylabel(metric)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _png(fig)
