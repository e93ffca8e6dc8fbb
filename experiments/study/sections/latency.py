"""`latency` report section: each row's per-query retrieval time, re-timed live against a budget.

Options: `rows` (default every row), `repeats` (5), `budget_ms` (optional: the p95 a row must meet),
`encode: true` adds the uncached query-encoding time a live system pays on top (batch of 1, one thread).
Timing: `experiments.study.live.interleaved_passes` (warm caches and models, no candidate cache).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from experiments.compare.render import Block, Heading, Paragraph, Table, code
from experiments.study.live import (
    interleaved_passes,
    latency_summary,
    latency_table,
    query_encoding_ms,
    row_settings,
)
from experiments.study.sections import SectionContext, register_section
from experiments.suites.load import load_suite


@register_section("latency")
def latency(ctx: SectionContext) -> list[Block]:
    heading = Heading("Query latency")
    if ctx.study is None:
        return [heading, Paragraph("Needs a study (rows to re-run).")]
    repeats = int(ctx.options.get("repeats", 5))
    names = [str(r) for r in ctx.options.get("rows") or [r.name for r in ctx.study.plan.rows]]
    configs = {name: row_settings(ctx.study, name) for name in names}
    suite = load_suite(next(iter(configs.values())).suite)
    passes = interleaved_passes(configs, suite, repeats)
    summaries = {name: latency_summary(runs) for name, runs in passes.items()}
    table = pd.DataFrame(latency_table(summaries)).T
    blocks: list[Block] = [
        heading,
        Paragraph(
            f"{len(suite.queries)} queries of {code(suite.name)}, {repeats} interleaved live passes per row "
            "after a warm-up (models loaded, embeddings from the disk cache, no candidate cache); per-query "
            "time = the sum of the stage timings, each query's fastest repeat. CPU: this process's user + "
            "system time of a pass over its queries; load average at each pass's start (a shared machine)."
        ),
    ]
    budget = ctx.options.get("budget_ms")
    if budget is not None:
        table["p95 ≤ budget"] = [
            "yes" if summaries[n]["p95_ms"] <= float(budget) else "no" for n in table.index
        ]
    blocks.append(Table(table, "row"))
    if budget is not None:
        blocks.append(Paragraph(f"Budget: p95 ≤ {float(budget):g} ms a query (warm caches)."))
    if ctx.options.get("encode"):
        texts = [q.text for q in suite.queries[:50]]
        encode = np.median(query_encoding_ms(configs[names[0]], texts, 1))
        blocks.append(
            Paragraph(
                f"A live system also embeds each query: {encode:.1f} ms (median of {len(texts)}, batch of 1, "
                "one torch thread), not included above."
            )
        )
    return blocks
