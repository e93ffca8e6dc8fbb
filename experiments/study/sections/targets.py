"""`targets` report section: does a row meet stated gains over a reference row, overall and per label?

Options: `row` (the run judged; default every row but the reference), `against` (default the baseline),
`checks`: a list of `{metric, min_gain}` or `{metric, max_drop}`, each optionally with `labels` (a list
of label values, or `each` for every value of the report's label column; default: overall). A `min_gain`
check passes when Δ = row − reference ≥ min_gain; a `max_drop` check when Δ ≥ −max_drop. Verdicts are on
the point estimate; each line also shows its bootstrap 95% CI and a paired randomization test (Holm
across the section's lines), so a pass within noise reads as one.

    sections:
      - name: targets
        row: beam_best
        against: dense
        checks:
          - {metric: nDCG@10, min_gain: 0.05}
          - {metric: R@10, labels: [event_ordering, summarization], min_gain: 0.05}
          - {metric: R@10, labels: each, max_drop: 0.02}
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from experiments.compare.render import Block, Heading, Paragraph, Table, md
from experiments.evaluate.statistics import bootstrap_ci, holm, paired_randomization_test, win_tie_loss
from experiments.study.sections import SectionContext, register_section


def _checks(ctx: SectionContext) -> list[dict]:
    checks = [dict(c) for c in ctx.options.get("checks") or []]
    for c in checks:
        if c.get("metric") not in ctx.comparison.values:
            raise KeyError(
                f"targets section: metric {c.get('metric')!r} not among {list(ctx.comparison.metrics)}"
            )
        if ("min_gain" in c) == ("max_drop" in c):
            raise KeyError(f"targets section: check {c} needs exactly one of min_gain, max_drop")
    if not checks:
        raise KeyError("targets section: no `checks`")
    return checks


def target_lines(ctx: SectionContext) -> pd.DataFrame:
    """One line per (row, check, label value): Δ, CI, p, Holm p, W/T/L, the threshold and the verdict."""
    comp = ctx.comparison
    against = str(ctx.options.get("against", comp.baseline))
    rows = [str(ctx.options["row"])] if ctx.options.get("row") else [r for r in comp.labels if r != against]
    for name in [against, *rows]:
        if name not in comp.run_by_label:
            raise KeyError(f"targets section: no run {name!r} (runs: {list(comp.run_by_label)})")
    ref = comp.run_by_label[against].answerable()
    labels = ref[comp.label_column].astype(str) if comp.label_column else None
    checks = _checks(ctx)
    lines = []
    for name in rows:
        frame = comp.run_by_label[name].answerable().reindex(ref.index)
        for check in checks:
            wanted = check.get("labels")
            if wanted is None:
                groups = [("all", np.ones(len(ref), dtype=bool))]
            else:
                if labels is None:
                    raise KeyError("targets section: a per-label check needs a label column")
                values = sorted(labels.unique()) if wanted == "each" else [str(v) for v in wanted]
                missing = [v for v in values if v not in set(labels)]
                if missing:
                    raise KeyError(f"targets section: no answerable query labelled {missing}")
                groups = [(v, (labels == v).to_numpy()) for v in values]
            metric = check["metric"]
            for value, mask in groups:
                a, b = frame.loc[mask, metric].to_numpy(), ref.loc[mask, metric].to_numpy()
                delta = float(a.mean() - b.mean())
                gain = "min_gain" in check
                threshold = float(check["min_gain"]) if gain else -float(check["max_drop"])
                ci = bootstrap_ci(a - b, seed=ctx.seed)
                w, t, lo = win_tie_loss(a, b)
                lines.append(
                    {
                        "row": name,
                        "metric": metric,
                        "label": value,
                        "n": int(mask.sum()),
                        "reference": float(b.mean()),
                        "value": float(a.mean()),
                        "delta": delta,
                        "ci_low": ci.low,
                        "ci_high": ci.high,
                        "p": paired_randomization_test(a, b, seed=ctx.seed),
                        "wtl": f"{w}/{t}/{lo}",
                        "target": f"Δ ≥ {threshold:+.3f}",
                        # rounded: a gain of exactly the target passes despite floating point
                        "met": round(delta - threshold, 9) >= 0,
                    }
                )
    table = pd.DataFrame(lines)
    table["p_holm"] = holm(table["p"].to_numpy())
    table.attrs["against"] = against
    return table


@register_section("targets")
def targets(ctx: SectionContext) -> list[Block]:
    table = target_lines(ctx)
    against = table.attrs["against"]
    shown = pd.DataFrame(
        {
            "row": table["row"],
            "metric": table["metric"],
            "label (n)": [f"{v} ({n})" for v, n in zip(table["label"], table["n"], strict=True)],
            against: table["reference"].map("{:.3f}".format),
            "row value": table["value"].map("{:.3f}".format),
            "Δ [95% CI]": [
                f"{d:+.3f} [{lo:+.3f}, {hi:+.3f}]"
                for d, lo, hi in zip(table["delta"], table["ci_low"], table["ci_high"], strict=True)
            ],
            "p Holm": table["p_holm"].map("{:.3g}".format),
            "W/T/L": table["wtl"],
            "target": table["target"],
            "met": ["yes" if m else "NO" for m in table["met"]],
        }
    )
    met = int(table["met"].sum())
    return [
        Heading(f"Targets against {against}"),
        Paragraph(
            f"{met} of {len(table)} targets met (on the point estimate Δ = row − **{md(against)}**, "
            "answerable queries). CI: bootstrap 95% over queries; p: paired randomization test, Holm across "
            f"the {len(table)} lines (seed {ctx.seed})."
        ),
        Table(shown.set_index("row"), "row"),
    ]
