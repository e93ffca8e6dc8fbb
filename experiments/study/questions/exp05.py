"""EXP-05 report sections (see experiments.study.sections for the interface).

EXP-05 asks whether instruction tagging + boost raises one target ability's retrieval (BEAM
instruction_following R@10) without costing the other answerable abilities more than a budget of
their macro nDCG@10. Options shared by the sections: `target` (instruction_following), `label`
(ability), `gain_metric` (R@10), `other_metric` (nDCG@10), `gain_needed` (0.10), `max_drop` (0.01).

- `exp05_acceptance`: every row against the baseline: the target's gain and the other abilities'
  change, bootstrap CIs, paired randomization tests (Holm across the section's tests), margin, verdict.
- `exp05_headline`: per row the target's mean [95% CI], the other abilities' macro means, overall means.
- `exp05_answer`: the answer in words, generated from the numbers: the best swept row, the committed
  default, the ablations and the abstention gate, each named by an option (see `exp05_answer`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from experiments.compare.render import Block, Heading, Paragraph, Table, md
from experiments.evaluate.statistics import bootstrap_ci, holm, paired_randomization_test, win_tie_loss
from experiments.study.sections import SectionContext, register_section


def _macro(frame: pd.DataFrame, labels: pd.Series, metric: str) -> float:
    return float(frame[metric].groupby(labels).mean().mean())


@dataclass(frozen=True)
class Budget:
    """The acceptance test's settings, from a section's options."""

    target: str = "instruction_following"
    label: str = "ability"
    gain_metric: str = "R@10"
    other_metric: str = "nDCG@10"
    gain_needed: float = 0.10
    max_drop: float = 0.01

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> Budget:
        return cls(
            target=str(options.get("target", cls.target)),
            label=str(options.get("label", cls.label)),
            gain_metric=str(options.get("gain_metric", cls.gain_metric)),
            other_metric=str(options.get("other_metric", cls.other_metric)),
            gain_needed=float(options.get("gain_needed", cls.gain_needed)),
            max_drop=float(options.get("max_drop", cls.max_drop)),
        )


def _split(ctx: SectionContext, budget: Budget) -> tuple[pd.Series, pd.Series] | str:
    """(target mask, other-ability labels) over the baseline's answerable queries, or why not."""
    base = ctx.comparison.run_by_label[ctx.comparison.baseline].answerable()
    column = f"label.{budget.label}"
    if column not in base.columns:
        return f"The runs have no `{column}` column: not checked."
    labels = base[column].astype(str)
    is_target = labels == budget.target
    if not is_target.any():
        return f"No answerable `{budget.target}` query: not checked."
    return is_target, labels[~is_target]


def acceptance(ctx: SectionContext, budget: Budget) -> pd.DataFrame | str:
    """One row per non-baseline run: the two acceptance tests against the baseline, or why not.

    Holm corrects across all the table's tests (two per run).
    """
    split = _split(ctx, budget)
    if isinstance(split, str):
        return split
    is_target, others = split
    comp = ctx.comparison
    base = comp.run_by_label[comp.baseline].answerable()
    rows = []
    for name, run in comp.run_by_label.items():
        if name == comp.baseline:
            continue
        frame = run.answerable().reindex(base.index)
        a, b = frame.loc[is_target, budget.gain_metric].to_numpy(), base.loc[is_target, budget.gain_metric]
        oa = frame.loc[others.index, budget.other_metric].to_numpy()
        ob = base.loc[others.index, budget.other_metric].to_numpy()
        d_gain = float(a.mean() - b.mean())
        d_other = _macro(frame.loc[others.index], others, budget.other_metric) - _macro(
            base.loc[others.index], others, budget.other_metric
        )
        w, t, losses = win_tie_loss(a, b.to_numpy())
        ow, ot, ol = win_tie_loss(oa, ob)
        # Rounded: 0.75 - 0.65 - 0.10 is -3e-17 in floating point, and a gain of exactly the target passes.
        margin = round(min(d_gain - budget.gain_needed, d_other + budget.max_drop), 9) + 0.0
        rows.append(
            dict(
                run=name,
                target=float(a.mean()),
                base_target=float(b.mean()),
                d_gain=d_gain,
                gain_ci=bootstrap_ci(a - b.to_numpy(), seed=ctx.seed),
                p_gain=paired_randomization_test(a, b.to_numpy(), seed=ctx.seed),
                wtl=f"{w}/{t}/{losses}",
                d_other=d_other,
                other_delta=float(np.mean(oa - ob)),
                other_ci=bootstrap_ci(oa - ob, seed=ctx.seed),
                p_other=paired_randomization_test(oa, ob, seed=ctx.seed),
                other_wtl=f"{ow}/{ot}/{ol}",
                margin=margin,
            )
        )
    table = pd.DataFrame(rows)
    if not rows:
        return table
    adjusted = holm(table[["p_gain", "p_other"]].to_numpy().ravel())
    table["p_gain_holm"], table["p_other_holm"] = adjusted[0::2], adjusted[1::2]
    table.attrs.update(n_target=int(is_target.sum()), n_other=len(others), n_values=others.nunique())
    return table.set_index("run", drop=False)


@register_section("exp05_acceptance")
def exp05_acceptance(ctx: SectionContext) -> list[Block]:
    budget = Budget.from_options(ctx.options)
    heading = Heading("EXP-05 acceptance")
    table = acceptance(ctx, budget)
    if isinstance(table, str):
        return [heading, Paragraph(table)]
    if table.empty:
        return [heading, Paragraph("Only the baseline ran: nothing to check.")]
    shown = pd.DataFrame(
        {
            f"{budget.target} {budget.gain_metric}": table["target"].map("{:.3f}".format),
            "Δ [95% CI]": [
                f"{r.d_gain:+.3f} [{r.gain_ci[0]:+.3f}, {r.gain_ci[1]:+.3f}]" for r in table.itertuples()
            ],
            "p Holm": table["p_gain_holm"].map("{:.2g}".format),
            "W/T/L": table["wtl"],
            f"other macro {budget.other_metric} Δ": table["d_other"].map("{:+.3f}".format),
            "per-query Δ 95% CI": [f"[{lo:+.3f}, {hi:+.3f}]" for lo, hi in table["other_ci"]],
            "p Holm ": table["p_other_holm"].map("{:.2g}".format),
            "margin": table["margin"].map("{:+.3f}".format),
            "acceptance": ["**met**" if m >= 0 else "not met" for m in table["margin"]],
        },
        index=table.index,
    )
    best = table.loc[table["margin"].idxmax()]
    verdict = (
        f"The widest margin is **{md(best['run'])}** ({best['margin']:+.3f}): it meets the acceptance test."
        if best["margin"] >= 0
        else f"No row meets it; the closest is {md(best['run'])} (margin {best['margin']:+.3f})."
    )
    n_tests = 2 * len(table)
    return [
        heading,
        Paragraph(
            f"Each row against the baseline **{md(ctx.comparison.baseline)}**: `{budget.target}` "
            f"{budget.gain_metric} must rise by at least {budget.gain_needed:.2f} "
            f"({table.attrs['n_target']} queries) while the macro {budget.other_metric} of the other "
            f"answerable {budget.label} values ({table.attrs['n_values']} of them, {table.attrs['n_other']} "
            f"queries) drops by at most {budget.max_drop:.2f}. "
            f"Margin: the smaller of the two slacks (negative = fails). p: paired randomization test, seed "
            f"{ctx.seed}, Holm across the {n_tests} tests of this table; the per-query test of the other "
            f"abilities pools their queries."
        ),
        Table(shown, "run", markup=True),  # cells: numbers and this section's own **met**
        Paragraph(verdict),
    ]


@register_section("exp05_headline")
def exp05_headline(ctx: SectionContext) -> list[Block]:
    """Per row: the target ability's gain metric [95% CI] and Δ, the other abilities' macro means, overall."""
    budget = Budget.from_options(ctx.options)
    heading = Heading(f"Headline: {budget.target} and the other {budget.label} values")
    split = _split(ctx, budget)
    if isinstance(split, str):
        return [heading, Paragraph(split)]
    is_target, others = split
    comp = ctx.comparison
    base = comp.run_by_label[comp.baseline].answerable()
    gain, other = budget.gain_metric, budget.other_metric
    base_other = {m: _macro(base.loc[others.index], others, m) for m in (gain, other)}
    cells: dict[str, list[str]] = {}
    for run in comp.runs:
        frame = run.answerable().reindex(base.index)
        target = frame.loc[is_target, gain].to_numpy()
        low, high = bootstrap_ci(target, seed=ctx.seed)
        macro = {m: _macro(frame.loc[others.index], others, m) for m in (gain, other)}
        row = {
            f"{budget.target} {gain} [95% CI]": f"{target.mean():.3f} [{low:.3f}, {high:.3f}]",
            "Δ vs baseline": f"{target.mean() - base.loc[is_target, gain].mean():+.3f}",
            f"other macro {other}": f"{macro[other]:.3f}",
            "Δ other": f"{macro[other] - base_other[other]:+.3f}",
            f"other macro {gain}": f"{macro[gain]:.3f}",
            f"overall {gain}": f"{frame[gain].mean():.3f}",
            f"overall {other}": f"{frame[other].mean():.3f}",
        }
        for key, value in row.items():
            cells.setdefault(key, []).append(value)
    return [
        heading,
        Paragraph(
            f"`{budget.target}` ({int(is_target.sum())} queries): mean {gain} with a bootstrap 95% CI "
            f"(seed {ctx.seed}); other: the unweighted mean over the other {others.nunique()} answerable "
            f"{budget.label} values ({len(others)} queries) of their mean; overall: all answerable queries. "
            f"Δ: against the baseline **{md(comp.baseline)}**."
        ),
        Table(pd.DataFrame(cells, index=list(comp.labels)), "run"),
    ]


def _signed(value: float) -> str:
    return f"{value:+.3f}"


def _share(value: Any) -> str:
    return "n/a" if value is None or pd.isna(value) else f"{value:.3f}"


def _tagging(run: Any) -> Mapping[str, Any]:
    return run.summary.get("tagging") or {}


@register_section("exp05_answer")
def exp05_answer(ctx: SectionContext) -> list[Block]:
    """The answer in words. Options (each optional; a sentence whose rows are not named is left out):
    `swept` (the swept boost key, default stage.instruction_boost.weight: rows labelled
    `...[instruction_boost.weight=...]` are the sweep), `no_penalty`, `anywhere`, `wide`,
    `wide_anywhere`, `current_state` (ablation rows, run at the variant's default weight: the swept row
    with that weight is "the committed default"), `gates` (rows of the abstention gate), `tuned_on`
    (the suite path the default weight was chosen on: a caveat says whether this is it), plus the
    acceptance options."""
    budget = Budget.from_options(ctx.options)
    opts = ctx.options
    heading = Heading("The answer")
    table = acceptance(ctx, budget)
    if isinstance(table, str) or table.empty:
        return [heading, Paragraph(table if isinstance(table, str) else "Only the baseline ran.")]
    runs = ctx.comparison.run_by_label
    key = str(opts.get("swept", "stage.instruction_boost.weight"))
    short = ".".join(key.split(".")[-2:])
    swept = table[[bool(re.search(rf"[\[ ]{re.escape(short)}=", r)) for r in table["run"]]]
    weight = {r: float(runs[r].params.get(key, "nan")) for r in swept["run"]}
    swept = swept.assign(weight=[weight[r] for r in swept["run"]]).sort_values("weight", kind="stable")
    target, label = budget.target, budget.label
    out: list[str] = []
    best = None
    if swept.empty:
        out.append(f"No row sweeps `{key}`: no best weight to name.")
    elif swept["margin"].max() < 0:
        out.append("No swept weight raises the target by the gain needed within the other abilities' budget.")
    else:
        best = swept.loc[swept["margin"].idxmax()]
        within_g = "" if best["p_gain_holm"] < ctx.alpha else ": within noise after correction"
        within_o = "" if best["p_other_holm"] < ctx.alpha else ", within noise"
        out.append(
            f"**{md(best['run'])}** is the best swept configuration (the widest margin on both acceptance "
            f"tests, {best['margin']:+.3f}): {target} {budget.gain_metric} goes from "
            f"{best['base_target']:.3f} (baseline) to {best['target']:.3f} ({_signed(best['d_gain'])}, "
            f"paired 95% CI [{best['gain_ci'][0]:+.3f}, {best['gain_ci'][1]:+.3f}], W/T/L {best['wtl']}, p = "
            f"{best['p_gain']:.4f}, Holm p = {best['p_gain_holm']:.4f}{within_g}), while the macro "
            f"{budget.other_metric} of the other answerable {label} values moves {_signed(best['d_other'])} "
            f"(per-query paired delta {best['other_delta']:+.3f}, 95% CI [{best['other_ci'][0]:+.3f}, "
            f"{best['other_ci'][1]:+.3f}], Holm p = {best['p_other_holm']:.3f}{within_o})."
        )
        within = swept[swept["d_other"] >= -budget.max_drop].sort_values("d_gain", kind="stable")
        if len(within) and within.iloc[-1]["run"] != best["run"]:
            top = within.iloc[-1]
            out.append(
                f"The largest {target} gain within the budget is {md(top['run'])} ({_signed(top['d_gain'])}, "
                f"other {label} values {_signed(top['d_other'])}): it clears the budget by only "
                f"{top['d_other'] + budget.max_drop:.3f}, so it was not chosen."
            )
    # The ablations run at the variant's default weight: the swept row with that weight is the default.
    ablation = next((str(opts[k]) for k in ("no_penalty", "current_state") if opts.get(k) in runs), None)
    default = None
    if ablation is not None and not swept.empty:
        at = float(runs[ablation].params.get(key, "nan"))
        match = swept[np.isclose(swept["weight"], at)]
        default = match.iloc[0] if len(match) else None
    if default is not None:
        noise = "" if default["p_gain_holm"] < ctx.alpha else ", within noise"
        out.append(
            f"The committed default, {md(default['run'])}, on these questions: {target} "
            f"{budget.gain_metric} {default['target']:.3f} ({_signed(default['d_gain'])}, 95% CI "
            f"[{default['gain_ci'][0]:+.3f}, {default['gain_ci'][1]:+.3f}], Holm p = "
            f"{default['p_gain_holm']:.3f}{noise}); other {label} values' macro {budget.other_metric} "
            f"{_signed(default['d_other'])} (95% CI [{default['other_ci'][0]:+.3f}, "
            f"{default['other_ci'][1]:+.3f}]). Acceptance at the default: "
            f"**{'met' if default['margin'] >= 0 else 'not met'}** (margin {default['margin']:+.3f}), "
            f"with gain >= {budget.gain_needed:.2f} and other-value drop <= {budget.max_drop:.2f}; "
            + (
                "it is the best swept configuration."
                if best is not None and best["run"] == default["run"]
                else "it is not this suite's best swept configuration."
            )
        )
    if not swept.empty:
        w0 = swept.iloc[0]
        out.append(
            f"Across weights {', '.join(f'{w:g}' for w in swept['weight'])}, {target} {budget.gain_metric} "
            f"runs {', '.join(f'{v:.3f}' for v in swept['target'])} and the other {label} values' macro "
            f"{budget.other_metric} delta runs {', '.join(_signed(v) for v in swept['d_other'])}; at weight "
            f"{w0['weight']:g} (no boost) the other values move {_signed(w0['d_other'])}."
        )
    if default is not None and opts.get("no_penalty") in table.index:
        nc = table.loc[str(opts["no_penalty"])]
        out.append(
            f"Without the conciseness penalty ({md(nc['run'])}) the boost at the default weight moves the "
            f"other {label} values {_signed(nc['d_other'])} and {target} {budget.gain_metric} "
            f"{_signed(nc['d_gain'])}: "
            + (
                "the penalty's gain on the other abilities is what pays for the evidence the boost displaces."
                if nc["d_other"] < default["d_other"]
                else "the boost does not need the penalty to stay within the budget."
            )
        )
    if default is not None and all(opts.get(k) in table.index for k in ("anywhere", "wide", "wide_anywhere")):
        d_tag = _tagging(runs[default["run"]])
        anywhere, wide, wide_any = (table.loc[str(opts[k])] for k in ("anywhere", "wide", "wide_anywhere"))
        a_tag, w_tag, wa_tag = (_tagging(runs[r["run"]]) for r in (anywhere, wide, wide_any))
        out.append(
            f"Tagging: the default tags {d_tag.get('tagged', 0)} memories (judged precision "
            f"{_share(d_tag.get('precision'))}, {_share(d_tag.get('instruction_evidence_tagged_share'))} of "
            f"the {target} evidence); markers anywhere ({md(anywhere['run'])}) tag {a_tag.get('tagged', 0)} "
            f"(precision {_share(a_tag.get('precision'))}, evidence "
            f"{_share(a_tag.get('instruction_evidence_tagged_share'))}) and, boosted, move the other {label} "
            f"values {_signed(anywhere['d_other'])}. The wider list ({md(wide['run'])}) tags "
            f"{w_tag.get('tagged', 0)} and gives {target} {budget.gain_metric} {wide['target']:.3f}; "
            f"anywhere, {wa_tag.get('tagged', 0)} and {wide_any['target']:.3f}."
        )
    if default is not None and opts.get("current_state") in table.index:
        cs = table.loc[str(opts["current_state"])]
        change = cs["d_other"] - default["d_other"]
        # current-state ranking is meant for one ability (knowledge updates): its own change too
        ability = str(opts.get("current_state_ability", "knowledge_update"))

        def ability_mean(name: str) -> float:
            frame = runs[name].answerable()
            return float(frame.loc[frame[f"label.{label}"] == ability, budget.gain_metric].mean())

        out.append(
            f"Current-state ranking added at the default weight ({md(cs['run'])}) moves the other {label} "
            f"values' macro {budget.other_metric} {_signed(change)} and {ability} {budget.gain_metric} "
            f"{_signed(ability_mean(cs['run']) - ability_mean(default['run']))} vs the default "
            + ("(a gain here)." if change > 0.005 else "(no gain here).")
        )
    gates = [str(g) for g in opts.get("gates") or () if str(g) in runs]
    if gates and default is not None:
        reference = runs[default["run"]].answerable()[budget.gain_metric].mean()
        parts, useful = [], []
        for name in gates:
            frame = runs[name].per_query
            abst = frame[frame["abstention"].astype(bool)]
            answerable = runs[name].answerable()
            emptied, n_empty = (
                int((abst["n_returned"] == 0).sum()),
                int((answerable["n_returned"] == 0).sum()),
            )
            parts.append(
                f"{md(name)}: {emptied}/{len(abst)} abstentions, {n_empty} answerable emptied, "
                f"{budget.gain_metric} {_signed(answerable[budget.gain_metric].mean() - reference)}"
            )
            # Worth having: abstains on at least half the abstention questions, empties <= 5% of the rest.
            if len(abst) and emptied >= 0.5 * len(abst) and n_empty <= 0.05 * len(answerable):
                useful.append(md(name))
        out.append(
            "Abstention gate: "
            + "; ".join(parts)
            + (
                ". No threshold abstains on half the abstention questions while emptying <= 5% of the "
                "answerable ones: the gate stays out of the default."
                if not useful
                else f". Thresholds worth a look: {', '.join(useful)}."
            )
        )
    if opts.get("tuned_on"):
        n_target = table.attrs["n_target"]
        suite_path = runs[ctx.comparison.baseline].params.get("suite.path")
        out.append(
            f"Caveat: {n_target} {target} questions. "
            + (
                "The weight was chosen on these questions, so the chosen configuration's numbers are "
                "optimistic; the other tiers' reports, where nothing was tuned, are the check."
                if str(suite_path) == str(opts["tuned_on"])
                else "Nothing was tuned on these questions (the default was fixed on "
                f"{md(opts['tuned_on'])})."
            )
        )
    return [heading, *(Paragraph(f"- {line}") for line in out)]
