"""Report sections of the cross-encoder study (conf/study/cross_encoder.yaml).

`rerank_model`: what the reranker is: its training record (models/<name>/training.json, written by
`memeval-train-reranker`): suite, pairs, steps, why training stopped, validation curve.
`rerank_latency`: the rerank stage's time per query re-measured live (experiments.study.live.rerun:
warm-up pass, then a pass with the score cache off, so every pair is scored by the model), with the
pass's CPU time and the load average, against a budget.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from experiments.compare.render import Block, Heading, Paragraph, code
from experiments.study.live import rerun, row_settings
from experiments.study.sections import SectionContext, register_section


@register_section("rerank_model")
def rerank_model(ctx: SectionContext) -> list[Block]:
    if ctx.study is None:
        return []
    row = str(ctx.options.get("row", ctx.study.plan.rows[-1].name))
    stage = row_settings(ctx.study, row).config["stage"][str(ctx.options.get("stage", "cross_encoder"))]
    scorer = stage["scorer"]
    model, max_length = scorer["model"], scorer.get("max_length")
    path = Path(str(model)) / "training.json"
    if not path.is_file():
        return [Heading("The model"), Paragraph(f"{code(model)}: no training.json beside it.")]
    t = json.loads(path.read_text())
    c, metric = t["config"], t["config"]["val_metric"]
    seen = min(t["steps"] * c["batch_size"], t["pairs"] * c["epochs"])
    curve = ", ".join(f"step {h['step']} {h['val']:.3f}" for h in t["history"])
    return [
        Heading("The model"),
        Paragraph(
            f"{code(model)} (max_length {max_length}), trained by `memeval-train-reranker` "
            f"on {code(t['train_suite'])} ({t['train_queries']} training queries, split by conversation): "
            f"{t['pairs']} pairs ({t['positive_pairs']} positive), {c.get('num_layers', 'all')} layers, "
            f"batch {c['batch_size']}, lr {c['lr']}, seed {c['seed']}; "
            f"{t['steps']} steps = {seen} pairs seen, "
            f"ended by: {t.get('stop_reason', '?')} ({c['max_train_minutes']} min budget), best at step "
            f"{t['best_step']}, {t['train_s'] / 60:.1f} min on the shared 2-core CPU. Validation "
            f"({t['validation_queries']} held-out queries) {metric}: first stage "
            f"{t[f'val_{metric}_first_stage']:.3f}, untrained head {t[f'val_{metric}_untrained']:.3f}, "
            f"trained {t[f'val_{metric}_best']:.3f} (curve: {curve})."
        ),
    ]


@register_section("rerank_latency")
def rerank_latency(ctx: SectionContext) -> list[Block]:
    if ctx.study is None:
        return []
    row, stage = str(ctx.options.get("row", "weighted")), str(ctx.options.get("stage", "cross_encoder"))
    budget = float(ctx.options.get("budget_ms", 200))
    _, timed = rerun(ctx.study, row)
    ms = np.array([r.timings_ms.get(stage, np.nan) for r in timed.output.ranked], dtype=float)
    s = timed.summary()
    p50, p95 = float(np.nanpercentile(ms, 50)), float(np.nanpercentile(ms, 95))
    return [
        Heading(f"Rerank latency ({stage}, every pair scored by the model)"),
        Paragraph(
            f"Row {code(row)} re-run live: {stage} p50 {p50:.0f} ms, p95 {p95:.0f} ms, max "
            f"{np.nanmax(ms):.0f} ms over {len(ms)} queries: p95 {'within' if p95 <= budget else 'over'} "
            f"the {budget:.0f} ms budget. Whole pipeline p50 {s['p50_ms']:.0f} ms, "
            f"p95 {s['p95_ms']:.0f} ms; CPU {s['cpu_ms_per_query']:.0f} ms per query (user + system, all "
            f"threads) in {s['wall_s']:.0f} s wall; 1-minute load average {s['load_1m']:.1f} at the start "
            "(2 shared cores: upper bounds)."
        ),
    ]
