"""Built-in study report sections (see experiments.study.sections for the interface).

`exp05_acceptance`: EXP-05's acceptance check for every row against the study's baseline: the
target ability's R@10 must rise by at least `gain_needed` while the macro nDCG@10 of the other
answerable abilities drops by at most `max_drop` (defaults from experiments/exp05_report.py).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from experiments.report.render import Block, Heading, Paragraph, Table
from experiments.statistics import bootstrap_ci, holm, paired_randomization_test, win_tie_loss
from experiments.study.sections import SectionContext, register_section


def _macro(frame: pd.DataFrame, labels: pd.Series, metric: str) -> float:
    return float(frame[metric].groupby(labels).mean().mean())


@register_section("exp05_acceptance")
def exp05_acceptance(ctx: SectionContext) -> list[Block]:
    target = str(ctx.options.get("target", "instruction_following"))
    label = str(ctx.options.get("label", "ability"))
    gain_metric = str(ctx.options.get("gain_metric", "R@10"))
    other_metric = str(ctx.options.get("other_metric", "nDCG@10"))
    gain_needed = float(ctx.options.get("gain_needed", 0.10))
    max_drop = float(ctx.options.get("max_drop", 0.01))
    comp = ctx.comparison
    base_run = comp.run_by_label[comp.baseline]
    column = f"label.{label}"
    base = base_run.answerable()
    if column not in base.columns:
        return [Heading("EXP-05 acceptance"), Paragraph(f"The runs have no `{column}` column: not checked.")]
    labels = base[column].astype(str)
    is_target = labels == target
    if not is_target.any():
        return [Heading("EXP-05 acceptance"), Paragraph(f"No answerable `{target}` query: not checked.")]
    others = labels[~is_target]

    rows, pvalues = [], []
    for name, run in comp.run_by_label.items():
        if name == comp.baseline:
            continue
        frame = run.answerable().reindex(base.index)
        a, b = frame.loc[is_target, gain_metric].to_numpy(), base.loc[is_target, gain_metric].to_numpy()
        oa, ob = (
            frame.loc[others.index, other_metric].to_numpy(),
            base.loc[others.index, other_metric].to_numpy(),
        )
        d_gain = float(a.mean() - b.mean())
        d_other = _macro(frame.loc[others.index], others, other_metric) - _macro(
            base.loc[others.index], others, other_metric
        )
        gain_ci, other_ci = bootstrap_ci(a - b, seed=ctx.seed), bootstrap_ci(oa - ob, seed=ctx.seed)
        pvalues += [
            paired_randomization_test(a, b, seed=ctx.seed),
            paired_randomization_test(oa, ob, seed=ctx.seed),
        ]
        w, t, losses = win_tie_loss(a, b)
        # Rounded: 0.75 - 0.65 - 0.10 is -3e-17 in floating point, and a gain of exactly the target passes.
        margin = round(min(d_gain - gain_needed, d_other + max_drop), 9) + 0.0
        rows.append(
            dict(
                run=name,
                target=a.mean(),
                d_gain=d_gain,
                gain_ci=gain_ci,
                wtl=f"{w}/{t}/{losses}",
                d_other=d_other,
                other_ci=other_ci,
                margin=margin,
            )
        )
    if not rows:
        return [Heading("EXP-05 acceptance"), Paragraph("Only the baseline ran: nothing to check.")]
    adjusted = holm(np.asarray(pvalues))
    table = pd.DataFrame(
        {
            f"{target} {gain_metric}": [f"{r['target']:.3f}" for r in rows],
            "Δ [95% CI]": [
                f"{r['d_gain']:+.3f} [{r['gain_ci'][0]:+.3f}, {r['gain_ci'][1]:+.3f}]" for r in rows
            ],
            "p Holm": [f"{p:.2g}" for p in adjusted[0::2]],
            "W/T/L": [r["wtl"] for r in rows],
            f"other macro {other_metric} Δ": [f"{r['d_other']:+.3f}" for r in rows],
            "per-query Δ 95% CI": [f"[{r['other_ci'][0]:+.3f}, {r['other_ci'][1]:+.3f}]" for r in rows],
            "p Holm ": [f"{p:.2g}" for p in adjusted[1::2]],
            "margin": [f"{r['margin']:+.3f}" for r in rows],
            "acceptance": ["**met**" if r["margin"] >= 0 else "not met" for r in rows],
        },
        index=[r["run"] for r in rows],
    )
    best = max(rows, key=lambda r: r["margin"])
    verdict = (
        f"The widest margin is **{best['run']}** ({best['margin']:+.3f}): it meets the acceptance test."
        if best["margin"] >= 0
        else f"No row meets it; the closest is {best['run']} (margin {best['margin']:+.3f})."
    )
    n_target, n_other = int(is_target.sum()), int(len(others))
    return [
        Heading("EXP-05 acceptance"),
        Paragraph(
            f"Each row against the baseline **{comp.baseline}**: `{target}` {gain_metric} must rise by "
            f"at least {gain_needed:.2f} ({n_target} queries) while the macro {other_metric} of the other "
            f"answerable {label} values ({others.nunique()} of them, {n_other} queries) drops by at most "
            f"{max_drop:.2f}. "
            f"Margin: the smaller of the two slacks (negative = fails). p: paired randomization test, seed "
            f"{ctx.seed}, Holm across the {len(pvalues)} tests of this table."
        ),
        Table(table, "run"),
        Paragraph(verdict),
    ]
