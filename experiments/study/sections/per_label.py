"""Per-label report section for metrics other than the primary one (the comparison report shows the primary).

`per_label` (options: `metrics`, default every plan metric but the primary): for each metric, a table
of runs × label values (means; † / ‡ significantly better / worse than the baseline in that label
value, paired randomization test, Holm across the table's cells) with the overall mean [95% CI].
"""

from __future__ import annotations

import pandas as pd

from experiments.compare.analysis import by_label
from experiments.compare.render import Block, Heading, Paragraph, Table, md
from experiments.study.sections import SectionContext, register_section
from experiments.track.finished_runs import higher_is_better


@register_section("per_label")
def per_label(ctx: SectionContext) -> list[Block]:
    comp = ctx.comparison
    metrics = [str(m) for m in ctx.options.get("metrics") or [m for m in comp.metrics if m != ctx.primary]]
    unknown = [m for m in metrics if m not in comp.values]
    if unknown:
        raise KeyError(f"per_label section: {unknown} not among the plan's metrics {list(comp.metrics)}")
    label = (comp.label_column or "all").removeprefix("label.")
    blocks: list[Block] = []
    unit = ctx.significance.attrs.get("unit", "auto")  # the report's: by cluster or by query
    resampled = "whole conversations" if unit == "cluster" else "queries"
    ci_text = (
        "by conversation: the CR2 t-interval, calibrated for few clusters"
        if unit == "cluster"
        else f"bootstrap, queries resampled, seed {ctx.seed}"
    )
    for metric in metrics:
        cells = by_label(comp, metric, alpha=ctx.alpha, seed=ctx.seed, unit=unit)
        n_tested = int((cells["run"] != comp.baseline).sum())
        sig = ctx.significance[ctx.significance["metric"] == metric].set_index("run")
        table = pd.DataFrame(index=list(comp.labels))
        table["all [95% CI]"] = [
            f"{sig.loc[r, 'mean']:.3f} [{sig.loc[r, 'ci_low']:.3f}, {sig.loc[r, 'ci_high']:.3f}]"
            for r in comp.labels
        ]
        for value, part in cells.groupby("label", sort=True):
            part = part.set_index("run")
            marks = [
                ""
                if not part.loc[r, "significant"]
                else "†"
                if (part.loc[r, "delta"] > 0) == higher_is_better(metric)
                else "‡"
                for r in comp.labels
            ]
            table[f"{value} (n={int(part['n'].iloc[0])})"] = [
                f"{part.loc[r, 'mean']:.3f}{m}" for r, m in zip(comp.labels, marks, strict=True)
            ]
        blocks += [
            Heading(f"{metric} per {label}"),
            Paragraph(
                f"Mean {metric} over the answerable queries, overall with a 95% CI ({ci_text}) and per "
                f"{label}. † / ‡: significantly "
                f"better / worse than **{md(comp.baseline)}** in that {label} (paired randomization "
                f"test, {resampled} sign-flipped, Holm across the {n_tested} cells, α = {ctx.alpha})."
            ),
            Table(table, "run"),
        ]
    return blocks
