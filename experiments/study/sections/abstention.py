"""Abstention report section: what each row returns on the questions with no relevant memory.

`abstention` (options: `rows`, default every row; `reference`, default the baseline; `metric`,
default R@10): per row, the abstention questions it returned nothing for (what an abstention gate
should do), the answerable questions it emptied and the metric it lost doing so against the
reference row, the mean top score on abstention questions, and the scope leaks (must be 0).
"""

from __future__ import annotations

import pandas as pd

from experiments.compare.render import Block, Heading, Paragraph, Table, md
from experiments.study.sections import SectionContext, register_section


@register_section("abstention")
def abstention(ctx: SectionContext) -> list[Block]:
    runs = ctx.comparison.run_by_label
    names = [str(r) for r in ctx.options.get("rows") or runs]
    reference = str(ctx.options.get("reference") or ctx.comparison.baseline)
    metric = str(ctx.options.get("metric", "R@10"))
    missing = sorted({*names, reference} - set(runs))
    if missing:
        raise KeyError(f"abstention section: no row named {missing}; rows: {list(runs)}")
    ref_mean = float(runs[reference].answerable()[metric].mean())
    rows = {}
    for name in names:
        frame = runs[name].per_query
        abst = frame[frame["abstention"].astype(bool)]
        answerable = runs[name].answerable()
        emptied = int((abst["n_returned"] == 0).sum())
        mean = float(answerable[metric].mean())
        rows[name] = {
            "abstention questions returning nothing": f"{emptied}/{len(abst)} ({emptied / len(abst):.2f})"
            if len(abst)
            else "n/a",
            "mean top score (abstention)": f"{abst['top_score'].mean():.3f}" if len(abst) else "n/a",
            "answerable questions returning nothing": str(int((answerable["n_returned"] == 0).sum())),
            f"overall {metric}": f"{mean:.3f}",
            f"Δ {metric} vs {reference}": f"{mean - ref_mean:+.3f}",
            "scope leaks": str(int(frame["scope_leaks"].sum())) if "scope_leaks" in frame else "n/a",
        }
    return [
        Heading("Abstention questions (no relevant memory)"),
        Paragraph(
            "An abstention question is answered well by returning nothing; the cost of abstaining is the "
            f"answerable questions emptied and the {metric} lost against **{md(reference)}**. Mean top "
            "score: the first result's score on abstention questions (each retriever's own scale). Scope "
            "leaks (results from another conversation) must be 0."
        ),
        Table(pd.DataFrame.from_dict(rows, orient="index"), "run"),
    ]
