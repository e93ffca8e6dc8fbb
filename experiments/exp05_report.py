"""EXP-05 results: does the instruction boost raise BEAM instruction_following retrieval, at which
weight, and what does it cost the other abilities?  Writes reports/exp05/<tier>.md.

    python -m experiments.exp05_report --tier 100K          # BEAM 100K (../shared/beam/100K)
    python -m experiments.exp05_report --tier 500K

Runs, in one process so every run after the first of a retrieval prefix reuses its candidates
(experiments.exp05_runs; a weight sweep re-runs only the rank stages): `hybrid`; `exp05` at boost
weights 0, 0.05, 0.1, 0.15, 0.25, 0.5; `exp05_wide`; ablations (markers anywhere, no conciseness
penalty, with current-state ranking); `exp05_gate` at several thresholds. The report has the
headline table, per-ability R@10 and nDCG@10, tagging coverage and precision, the paired
randomization test of every run against `hybrid` with Holm correction across the whole report, the
abstention gate's trade-off, and the answer in words, all generated from the numbers.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from experiments.exp05_runs import compose_config, run_config
from experiments.statistics import bootstrap_ci, holm, paired_randomization_test, win_tie_loss

WEIGHTS = (0.0, 0.05, 0.1, 0.15, 0.25, 0.5)  # the issue's sweep
EXTRA_WEIGHTS = (0.35, 0.75, 1.0)  # beyond it, to show the shape of the curve around the choice
GATE_THRESHOLDS = (0.3, 0.4, 0.5, 0.6)
TARGET = "instruction_following"
GAIN_NEEDED, MAX_DROP = 0.10, 0.01
ABILITY = "label.ability"


@dataclass(frozen=True)
class Run:
    name: str
    variant: str
    overrides: tuple[str, ...] = ()
    kind: str = "main"  # main | ablation | gate


def plan() -> list[Run]:
    runs = [Run("hybrid", "hybrid")]
    weights = sorted({*WEIGHTS, *EXTRA_WEIGHTS})
    runs += [Run(f"exp05 w={w:g}", "exp05", (f"stage.instruction_boost.weight={w}",)) for w in weights]
    runs.append(Run("exp05_wide", "exp05_wide"))
    runs.append(
        Run("exp05 markers anywhere", "exp05", ("stage.instruction_tagging.anchor=word",), "ablation")
    )
    runs.append(
        Run(
            "exp05_wide markers anywhere",
            "exp05_wide",
            ("stage.instruction_tagging.anchor=word",),
            "ablation",
        )
    )
    runs.append(
        Run("exp05 no conciseness", "exp05", ("stage.conciseness_penalty.enabled=false",), "ablation")
    )
    runs.append(Run("exp05 + current_state", "exp05", ("stage.current_state.enabled=true",), "ablation"))
    runs += [
        Run(f"exp05_gate t={t:g}", "exp05_gate", (f"stage.abstention_gate.threshold={t}",), "gate")
        for t in GATE_THRESHOLDS
    ]
    return runs


def other_macro(frame: pd.DataFrame, metric: str) -> float:
    answerable = frame[~frame["abstention"] & (frame[ABILITY] != TARGET)]
    return float(answerable.groupby(ABILITY)[metric].mean().mean())


def summarise(run: Run, frame: pd.DataFrame, metrics: dict[str, Any], base: pd.DataFrame) -> dict[str, Any]:
    target = frame[frame[ABILITY] == TARGET]
    answerable = frame[~frame["abstention"]]
    abstaining = frame[frame["abstention"]]
    tagging = metrics["tagging"]
    return {
        "run": run.name,
        "kind": run.kind,
        "if_R@10": float(target["R@10"].mean()),
        "ku_R@10": float(frame.loc[frame[ABILITY] == "knowledge_update", "R@10"].mean()),
        "if_R@10_ci": bootstrap_ci(target["R@10"].to_numpy(), seed=0),
        "other_nDCG@10": other_macro(frame, "nDCG@10"),
        "d_if": float(target["R@10"].mean() - base.loc[target.index, "R@10"].mean()),
        "d_other": other_macro(frame, "nDCG@10") - other_macro(base, "nDCG@10"),
        "R@10": float(answerable["R@10"].mean()),
        "nDCG@10": float(answerable["nDCG@10"].mean()),
        "abstained": int((abstaining["n_returned"] == 0).sum()),
        "n_abstention": int(len(abstaining)),
        "n_answerable": int(len(answerable)),
        "answerable_empty": int((answerable["n_returned"] == 0).sum()),
        "tagged": tagging["tagged"],
        "ev_tagged": tagging["instruction_evidence_tagged_share"],
        "precision": tagging["precision"],
        "precision_ci": tagging["precision_ci95"],
        "precision_judged": tagging["precision_judged"],
    }


def paired_tests(frames: dict[str, pd.DataFrame], runs: list[Run]) -> pd.DataFrame:
    """Every non-hybrid run vs hybrid on the target ability's R@10 and the other abilities' nDCG@10."""
    base = frames["hybrid"]
    rows = []
    for run in runs[1:]:
        frame = frames[run.name]
        for label, mask, metric in (
            (f"{TARGET} R@10", base[ABILITY] == TARGET, "R@10"),
            ("other abilities nDCG@10", ~base["abstention"] & (base[ABILITY] != TARGET), "nDCG@10"),
        ):
            a, b = frame.loc[mask, metric].to_numpy(), base.loc[mask, metric].to_numpy()
            low, high = bootstrap_ci(a - b, seed=0)
            wins, ties, losses = win_tie_loss(a, b)
            rows.append(
                {
                    "run": run.name,
                    "metric": label,
                    "n": int(mask.sum()),
                    "delta": float(np.mean(a - b)),
                    "ci_low": low,
                    "ci_high": high,
                    "p": paired_randomization_test(a, b, seed=0),
                    "W/T/L": f"{wins}/{ties}/{losses}",
                }
            )
    table = pd.DataFrame(rows)
    table["p_holm"] = holm(table["p"].to_numpy())
    return table


def margin(row: pd.Series) -> float:
    """How far a run clears the acceptance test: the smaller of its two margins (negative = fails)."""
    # Rounded: 0.75 - 0.65 - 0.10 is -3e-17 in floating point, and a gain of exactly 0.10 passes.
    return round(min(row["d_if"] - GAIN_NEEDED, row["d_other"] + MAX_DROP), 9) + 0.0  # no -0.0


def best_weight(summary: pd.DataFrame) -> tuple[pd.Series | None, str]:
    """The swept exp05 weight that clears the acceptance test by the widest margin.

    Not the largest target gain within the budget: on 20 target questions the weight that maximises
    the gain sits at the edge of the other abilities' budget, and a new sample of questions moves both.
    Maximising the worst of the two margins picks the configuration most likely to still pass there.
    """
    sweep = summary[summary["run"].str.startswith("exp05 w=")]
    margins = sweep.apply(margin, axis=1)
    if margins.max() < 0:
        return None, "no swept weight raises the target by the gain needed within the other abilities' budget"
    best = sweep.loc[margins.idxmax()]
    return best, f"widest acceptance margin ({margins.max():+.3f}): {best['run']}"


def fmt(x: Any, digits: int = 3) -> str:
    if x is None or (not isinstance(x, (tuple, list)) and pd.isna(x)):
        return "n/a"
    if isinstance(x, (tuple, list)):
        return f"[{x[0]:.{digits}f}, {x[1]:.{digits}f}]"
    return f"{x:+.{digits}f}" if isinstance(x, float) and digits < 0 else f"{x:.{digits}f}"


def signed(x: float) -> str:
    return f"{x:+.3f}"


def markdown_table(frame: pd.DataFrame) -> str:
    cols = list(frame.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def answer(summary: pd.DataFrame, tests: pd.DataFrame, default_run: str) -> list[str]:
    best, why = best_weight(summary)
    hybrid = summary.iloc[0]
    out = []
    if best is None:
        out.append(f"No swept weight meets the budget ({why}).")
        return out
    t = tests[(tests["run"] == best["run"]) & (tests["metric"].str.startswith(TARGET))].iloc[0]
    o = tests[(tests["run"] == best["run"]) & (tests["metric"].str.startswith("other"))].iloc[0]
    meets = best["d_if"] >= GAIN_NEEDED and best["d_other"] >= -MAX_DROP
    out.append(
        f"**{best['run']}** is the best swept configuration (the widest margin on both acceptance tests, "
        f"{margin(best):+.3f}): {TARGET} R@10 goes from "
        f"{hybrid['if_R@10']:.3f} (hybrid) to {best['if_R@10']:.3f} ({signed(best['d_if'])}, paired 95% CI "
        f"[{t['ci_low']:+.3f}, {t['ci_high']:+.3f}], W/T/L {t['W/T/L']}, p = {t['p']:.4f}, Holm p = "
        f"{t['p_holm']:.4f}{'' if t['p_holm'] < 0.05 else ': within noise after correction'}), while the "
        f"macro nDCG@10 of the other answerable abilities moves {signed(best['d_other'])} "
        f"(per-query paired delta {o['delta']:+.3f}, 95% CI [{o['ci_low']:+.3f}, {o['ci_high']:+.3f}], "
        f"Holm p = {o['p_holm']:.3f}{'' if o['p_holm'] < 0.05 else ', within noise'})."
    )
    out.append(
        f"Acceptance (gain >= {GAIN_NEEDED:.2f}, other-ability drop <= {MAX_DROP:.2f}): "
        + ("**met**." if meets else "**not met**.")
        + f" The committed `exp05` defaults are `{default_run}`"
        + (
            " (the same configuration)."
            if default_run == best["run"]
            else f"; this tier's best is {best['run']}."
        )
    )
    sweep = summary[summary["run"].str.startswith("exp05 w=")]
    row = summary.set_index("run")
    d = row.loc[default_run]
    dt = tests[(tests["run"] == default_run) & (tests["metric"].str.startswith(TARGET))].iloc[0]
    do = tests[(tests["run"] == default_run) & (tests["metric"].str.startswith("other"))].iloc[0]
    out.append(
        f"The committed default, {default_run}, on these questions: {TARGET} R@10 {d['if_R@10']:.3f} "
        f"({signed(d['d_if'])}, 95% CI [{dt['ci_low']:+.3f}, {dt['ci_high']:+.3f}], "
        f"Holm p = {dt['p_holm']:.3f}"
        f"{'' if dt['p_holm'] < 0.05 else ', within noise'}); other abilities' macro nDCG@10 "
        f"{signed(d['d_other'])} (95% CI [{do['ci_low']:+.3f}, {do['ci_high']:+.3f}]). Acceptance at the "
        f"default: **{'met' if margin(d) >= 0 else 'not met'}** (margin {margin(d):+.3f})."
    )
    # Ablations run at exp05's committed default weight: compare them with that run.
    w0, nc, default = sweep.iloc[0], row.loc["exp05 no conciseness"], row.loc[default_run]
    out.append(
        f"Weight 0 (tagging + conciseness penalty, no boost): {TARGET} R@10 {w0['if_R@10']:.3f}, other "
        f"abilities' macro nDCG@10 {signed(w0['d_other'])} vs hybrid. Without the conciseness penalty the "
        f"boost at exp05's default weight moves the other abilities "
        f"{signed(nc['d_other'])} and {TARGET} R@10 {signed(nc['d_if'])}: "
        + (
            "the penalty's gain on the other abilities is what pays for the evidence the boost displaces."
            if nc["d_other"] < default["d_other"]
            else "the boost does not need the penalty to stay within the budget."
        )
    )
    out.append(
        f"Across weights {', '.join(r.split('=')[1] for r in sweep['run'])}, {TARGET} R@10 runs "
        + ", ".join(f"{v:.3f}" for v in sweep["if_R@10"])
        + " and the other abilities' macro nDCG@10 delta runs "
        + ", ".join(signed(v) for v in sweep["d_other"])
        + "."
    )
    within = sweep[sweep["d_other"] >= -MAX_DROP].sort_values("d_if", kind="stable")
    if len(within) and within.iloc[-1]["run"] != best["run"]:
        top = within.iloc[-1]
        out.append(
            f"The largest {TARGET} gain within the budget is {top['run']} ({signed(top['d_if'])}, other "
            f"abilities {signed(top['d_other'])}): it clears the budget by only "
            f"{top['d_other'] + MAX_DROP:.3f}, so it was not chosen."
        )
    anywhere, wide = row.loc["exp05 markers anywhere"], row.loc["exp05_wide"]
    out.append(
        f"Tagging: markers at sentence starts tag {int(best['tagged'])} memories (judged precision "
        f"{fmt(best['precision'])}, {fmt(best['ev_tagged'])} of the {TARGET} evidence); markers anywhere "
        f"tag {int(anywhere['tagged'])} (precision {fmt(anywhere['precision'])}, evidence "
        f"{fmt(anywhere['ev_tagged'])}) and, boosted, move the other abilities "
        f"{signed(anywhere['d_other'])} vs hybrid. "
        f"The wider list at sentence starts tags {int(wide['tagged'])} and gives {TARGET} R@10 "
        f"{wide['if_R@10']:.3f}; anywhere, {int(row.loc['exp05_wide markers anywhere', 'tagged'])} and "
        f"{row.loc['exp05_wide markers anywhere', 'if_R@10']:.3f}."
    )
    cs = row.loc["exp05 + current_state"]
    out.append(
        f"Current-state ranking added to exp05 (default weight) moves the other abilities' macro nDCG@10 "
        f"{signed(cs['d_other'] - default['d_other'])} and knowledge_update R@10 "
        f"{signed(cs['ku_R@10'] - default['ku_R@10'])} vs exp05 "
        + ("(a gain here)." if cs["d_other"] > default["d_other"] + 0.005 else "(no gain here).")
    )
    gates = summary[summary["kind"] == "gate"]
    if len(gates) and gates["n_abstention"].iloc[0]:
        parts = [
            f"{r.split('=')[1]}: {a}/{n} abstentions, {e} answerable emptied, "
            f"R@10 {signed(v - default['R@10'])}"
            for r, a, n, e, v in zip(
                gates["run"],
                gates["abstained"],
                gates["n_abstention"],
                gates["answerable_empty"],
                gates["R@10"],
                strict=True,
            )
        ]
        # Worth having: abstains on at least half the abstention questions, empties <= 5% of answerable ones.
        useful = gates[
            (gates["abstained"] >= 0.5 * gates["n_abstention"])
            & (gates["answerable_empty"] <= 0.05 * gates["n_answerable"])
        ]
        out.append(
            "Abstention gate (threshold on the best dense cosine): "
            + "; ".join(parts)
            + (
                ". No threshold abstains on half the abstention questions while emptying <= 5% of the "
                "answerable ones: the gate stays out of exp05."
                if useful.empty
                else f". Thresholds worth a look: {', '.join(useful['run'])}."
            )
        )
    return out


def write_report(
    tier: str,
    summary: pd.DataFrame,
    frames: dict[str, pd.DataFrame],
    tests: pd.DataFrame,
    meta: dict[str, Any],
    out: Path,
) -> None:
    main = summary[summary["kind"] != "gate"]
    headline = pd.DataFrame(
        {
            "run": main["run"],
            f"{TARGET} R@10 [95% CI]": [
                f"{v:.3f} {fmt(ci)}" for v, ci in zip(main["if_R@10"], main["if_R@10_ci"], strict=True)
            ],
            "Δ vs hybrid": main["d_if"].map(signed),
            "other abilities macro nDCG@10": main["other_nDCG@10"].map(lambda v: f"{v:.3f}"),
            "Δ other": main["d_other"].map(signed),
            "overall R@10": main["R@10"].map(lambda v: f"{v:.3f}"),
            "overall nDCG@10": main["nDCG@10"].map(lambda v: f"{v:.3f}"),
        }
    )
    abilities = sorted(set(frames["hybrid"].loc[~frames["hybrid"]["abstention"], ABILITY]))
    names = [r for r in main["run"]]

    def per_ability(metric: str) -> pd.DataFrame:
        rows = []
        for ability in abilities:
            rows.append(
                {
                    "ability": ability,
                    **{
                        n: f"{frames[n].loc[frames[n][ABILITY] == ability, metric].mean():.3f}" for n in names
                    },
                }
            )
        rows.append(
            {
                "ability": "**macro, other abilities**",
                **{n: f"{other_macro(frames[n], metric):.3f}" for n in names},
            }
        )
        return pd.DataFrame(rows)

    tagging = pd.DataFrame(
        {
            "run": main["run"],
            "memories tagged": main["tagged"],
            "share of IF evidence tagged": main["ev_tagged"].map(lambda v: fmt(v)),
            "precision [95% CI]": [
                "n/a (no judged memory is tagged)" if pd.isna(p) else f"{p:.3f} {fmt(ci)}"
                for p, ci in zip(main["precision"], main["precision_ci"], strict=True)
            ],
            "judged in sample": main["precision_judged"],
        }
    )
    tests_md = tests.assign(
        delta=tests["delta"].map(signed),
        **{
            "95% CI": [
                f"[{a:+.3f}, {b:+.3f}]" for a, b in zip(tests["ci_low"], tests["ci_high"], strict=True)
            ]
        },
        p=tests["p"].map(lambda v: f"{v:.4f}"),
        p_holm=tests["p_holm"].map(lambda v: f"{v:.4f}"),
    )[["run", "metric", "n", "delta", "95% CI", "p", "p_holm", "W/T/L"]]
    gate = summary[summary["kind"].isin(["gate"]) | (summary["run"] == meta["default_run"])]
    gate_md = pd.DataFrame(
        {
            "run": gate["run"],
            "abstention questions returning nothing": [
                f"{a}/{n} ({a / n:.2f})" if n else "n/a"
                for a, n in zip(gate["abstained"], gate["n_abstention"], strict=True)
            ],
            "answerable questions returning nothing": gate["answerable_empty"],
            "overall R@10": gate["R@10"].map(lambda v: f"{v:.3f}"),
            "Δ R@10 vs no gate": (
                gate["R@10"] - summary.loc[summary["run"] == meta["default_run"], "R@10"].iloc[0]
            ).map(signed),
        }
    )
    text = [
        f"# EXP-05 on BEAM {tier}: instruction tagging + boost, and the ability stages",
        "",
        f"Generated by `{meta['command']}` on {meta['date']} "
        f"(suite {meta['suite_hash'][:12]}: {meta['memories']:,} memories, {meta['queries']} questions, "
        f"{meta['n_target']} {TARGET}; {meta['wall_s']:.0f} s). Do not edit by hand.",
        "",
        "Boost weight scale: added to the per-query min-max normalised incoming score (a weight is a "
        "fraction of that question's score range). `exp05` = hybrid (BM25 + MiniLM dense, RRF) -> "
        "instruction_tagging (issue's 12 markers, user messages, at sentence/clause starts) -> "
        "instruction_boost -> conciseness_penalty (0.05 of the range, saturating at 2 x 150 words); "
        "current_state is in the variant but off (see the ablation).",
        "",
        "## The answer",
        "",
        *[f"- {line}" for line in meta["answer"]],
        f"- Caveat: {meta['n_target']} {TARGET} questions. "
        + (
            "The weight was chosen on these questions, so the chosen configuration's numbers are optimistic; "
            "the other tiers' reports, where nothing was tuned, are the check."
            if meta["tuning_tier"]
            else "Nothing was tuned on these questions (the default was fixed on BEAM 100K before this ran)."
        ),
        "",
        "## Headline",
        "",
        markdown_table(headline),
        "",
        "## Per-ability R@10",
        "",
        markdown_table(per_ability("R@10")),
        "",
        "## Per-ability nDCG@10",
        "",
        markdown_table(per_ability("nDCG@10")),
        "",
        "## Tagging coverage and precision",
        "",
        "Precision: role-stratified estimate from the judged random sample in "
        "`datasets/exp05_tagging_judgements/` (see its README), Wilson 95% interval.",
        "",
        markdown_table(tagging),
        "",
        "## Paired tests vs hybrid",
        "",
        "Sign-flip randomization test on per-question differences (seed 0), bootstrap 95% CI of the mean "
        f"difference; Holm correction across all {len(tests)} comparisons in this report. The other "
        "abilities' test pools their answerable questions (per-question mean, ~20 per ability).",
        "",
        markdown_table(tests_md),
        "",
        "## Abstention gate",
        "",
        "`exp05_gate`: the exp05 ranking, emptied when the best candidate's dense cosine is under the "
        "threshold. Abstention accuracy = abstention questions returning nothing; its cost = answerable "
        "questions returning nothing and the R@10 lost.",
        "",
        markdown_table(gate_md),
        "",
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(text))


def main() -> None:
    parser = argparse.ArgumentParser(description="EXP-05 results on one BEAM tier")
    parser.add_argument("--tier", default="100K")
    parser.add_argument("--beam-dir", default="../shared/beam")
    parser.add_argument("--out-dir", default="reports/exp05")
    parser.add_argument("--conversations", help="a range like 1-5: only these conversations of the tier")
    args = parser.parse_args()
    tier_dir, name = f"{args.beam_dir}/{args.tier}", args.tier
    suite_path = tier_dir
    if args.conversations:
        first, last = map(int, args.conversations.split("-"))
        suite_path = "[" + ",".join(f"{tier_dir}/{c}" for c in range(first, last + 1)) + "]"
        name = f"{args.tier}_conversations_{first}-{last}"
    started = time.perf_counter()
    runs = plan()
    suite, frames, metrics = None, {}, {}
    for run in runs:
        t = time.perf_counter()
        cfg = compose_config(run.variant, run.overrides, suite_path=suite_path)
        suite, output, evaluation = run_config(cfg, suite)
        frames[run.name], metrics[run.name] = evaluation.per_query, evaluation.metrics
        print(
            f"{run.name}: {time.perf_counter() - t:.1f} s "
            f"(prefix cache {'hit' if output.prefix_cache_hit else 'miss'})",
            flush=True,
        )
    default_cfg = compose_config("exp05")
    default_run = f"exp05 w={float(default_cfg.stage.instruction_boost.weight):g}"
    summary = pd.DataFrame([summarise(r, frames[r.name], metrics[r.name], frames["hybrid"]) for r in runs])
    tests = paired_tests(frames, runs)
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "suite_hash": suite.content_hash,
        "memories": len(suite.memories),
        "queries": len(suite.queries),
        "n_target": int((frames["hybrid"][ABILITY] == TARGET).sum()),
        "wall_s": time.perf_counter() - started,
        "default_run": default_run,
        "tuning_tier": args.tier == "100K" and not args.conversations,
        "answer": answer(summary, tests, default_run),
    }
    out = Path(args.out_dir) / f"{name}.md"
    meta["command"] = (
        "python -m experiments.exp05_report --tier "
        + args.tier
        + (f" --conversations {args.conversations}" if args.conversations else "")
    )
    write_report(name, summary, frames, tests, meta, out)
    print("\n".join(meta["answer"]))
    print(f"report written to {out}")


if __name__ == "__main__":
    main()
