"""`relevant_counts` report section: how many memories each question needs, per label, and the best
recall a top-k can reach (a question with 13 relevant memories reaches R@10 ≤ 10/13 even when perfect).

Options: `k` (a list of cut-offs, default [10]). Read from the study's suite (the baseline row's): its
judgements, over the answerable questions. Beside each row's R@k it separates "the metric cannot go
higher" from "the retrieval does not find them".
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from experiments.compare.render import Block, Heading, Paragraph, Table
from experiments.study.live import row_settings
from experiments.study.sections import SectionContext, register_section
from experiments.suites.load import load_suite


@register_section("relevant_counts")
def relevant_counts(ctx: SectionContext) -> list[Block]:
    heading = Heading("Relevant memories per question")
    if ctx.study is None:
        return [heading, Paragraph("Needs a study (the suite's judgements).")]
    comp = ctx.comparison
    suite = load_suite(row_settings(ctx.study, comp.baseline).suite)
    cutoffs = [int(k) for k in ctx.options.get("k", [10])]
    base = comp.run_by_label[comp.baseline].answerable()
    n = np.array([sum(g > 0 for g in suite.qrels.get(q, {}).values()) for q in base.index], dtype=float)
    labels = base[comp.label_column].astype(str) if comp.label_column else pd.Series("all", base.index)
    frame = pd.DataFrame({"label": labels.to_numpy(), "n": n})
    for k in cutoffs:
        frame[f"R@{k} ceiling"] = np.minimum(n, k) / n
    grouped = frame.groupby("label", sort=True)
    table = pd.DataFrame(
        {
            "questions": grouped.size(),
            "relevant: mean": grouped["n"].mean().map("{:.1f}".format),
            "median": grouped["n"].median().map("{:g}".format),
            "max": grouped["n"].max().map("{:g}".format),
            **{f"best R@{k}": grouped[f"R@{k} ceiling"].mean().map("{:.3f}".format) for k in cutoffs},
        }
    )
    return [
        heading,
        Paragraph(
            "Judged-relevant memories per answerable question, per label, and the mean R@k a perfect ranking "
            "reaches (min(k, relevant) / relevant): the headroom above each row's R@k."
        ),
        Table(table, comp.label_column.removeprefix("label.") if comp.label_column else "label"),
    ]
