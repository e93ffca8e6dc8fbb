"""What the trained cross-encoder reranker does against the first-stage ranking it reranks.

Sits after `memeval-train-reranker`: for each suite (BEAM 100K, spark25) it runs the
`cross_encoder` variant's first stage once (hybrid: BM25 + dense, RRF; candidates from the prefix
cache), then the rerank stage in each mode (replace, rrf, weighted) over the same candidates, and
compares each with the first stage cut to the same K (a fair baseline: the stage returns K).
Per-query metrics -> paired randomization tests (Holm across modes), per-ability/category tables,
a small weight sweep (scores are cached in memory, so modes and weights cost no model calls), and
the rerank latency for N = 16 measured on the first pass, when every pair is scored by the model.

    python -m experiments.cross_encoder_report                  # writes reports/cross_encoder/README.md
    python -m experiments.cross_encoder_report --model DIR --suites beam100k
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from experiments.configs import CONF_DIR
from experiments.evaluate import evaluate
from experiments.run import load_suite_from_config
from experiments.statistics import compare
from retrieval.encoder import MINILM, resolve_model_path
from retrieval.pipeline import CandidateCache, Pipeline
from retrieval.reranker import TRAINED_DEFAULT, load_cross_encoder

REPO = Path(__file__).resolve().parent.parent
SUITES = {"spark25": ["suite=spark25"], "beam100k": ["suite=beam", "suite.path=../shared/beam/100K"]}
METRICS = ["P@5", "R@5", "nDCG@5", "R@8", "nDCG@8", "RR", "hit@8"]
PRIMARY = "nDCG@8"
MODES = ["replace", "rrf", "weighted"]
WEIGHTS = [0.25, 0.5, 0.75]
BUDGET_MS = 200.0


def compose_variant(suite: str, model: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(
            config_name="config",
            overrides=[
                *SUITES[suite],
                "variant=cross_encoder",
                "tracking=none",
                "progress=false",
                f"stage.cross_encoder.scorer.model={model}",
                "stage.cross_encoder.scorer.cache_dir=null",  # the first pass must score: it is the latency
            ],
        )


def untrained_head(folder: Path, seed: int = 0) -> Path:
    """The control: the bundled MiniLM with the fresh, untrained one-logit head training starts from."""
    if not (folder / "config.json").is_file():
        import torch
        from sentence_transformers import CrossEncoder

        torch.manual_seed(seed)
        CrossEncoder(resolve_model_path(MINILM), num_labels=1).save(str(folder))
    return folder


def measure_suite(suite_name: str, model: str, control: str | None = None) -> dict[str, Any]:
    cfg = compose_variant(suite_name, model)
    suite = load_suite_from_config(cfg)
    first = Pipeline.from_config(["bm25", "dense", "fusion"], cfg.stage)
    stage = instantiate(cfg.stage.cross_encoder, _convert_="all")
    cache = CandidateCache(Path(cfg.cache_dir) / "candidates")
    label = str(cfg.suite.report_label)

    def run(rank_stage=None):
        stages = (*first.stages, *([rank_stage] if rank_stage else []))
        pipeline = Pipeline(stages, depth=stage.top_k)  # the first stage cut to K: same length as the rerank
        output = pipeline.run(
            suite.memories, suite.queries, suite_hash=suite.content_hash, cache=cache, progress=False
        )
        return evaluate(suite, output, METRICS).per_query

    frames = {"first stage": run()}
    load_cross_encoder(stage.scorer.path, stage.scorer.max_length, stage.scorer.device)  # not timed
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    for i, mode in enumerate(MODES):
        frames[mode] = run(dataclasses.replace(stage, mode=mode))
        if i == 0:
            cold = frames[mode]["ms.cross_encoder"].to_numpy()
            cold_s = time.perf_counter() - started
    if control:
        scorer = dataclasses.replace(stage.scorer, model=control)
        for mode in MODES:
            frames[f"control {mode}"] = run(dataclasses.replace(stage, mode=mode, scorer=scorer))
    sweep = {}
    for mode in ("rrf", "weighted"):
        for w in WEIGHTS:
            frame = run(dataclasses.replace(stage, mode=mode, weight=w))
            sweep[f"{mode} w={w}"] = {m: float(frame.loc[~frame["abstention"], m].mean()) for m in METRICS}
    answerable = ~frames["first stage"]["abstention"]
    tests = {
        metric: compare({k: f.loc[answerable, metric] for k, f in frames.items()}, "first stage", seed=0)
        for metric in (PRIMARY, "R@8", "P@5")
    }
    labels = frames["first stage"].loc[answerable, f"label.{label}"]
    by_label = pd.DataFrame(
        {name: f.loc[answerable, PRIMARY].groupby(labels).mean() for name, f in frames.items()}
    )
    by_label.insert(0, "n", labels.value_counts().sort_index())
    return {
        "suite": suite.name,
        "suite_hash": suite.content_hash[:12],
        "label": label,
        "n_answerable": int(answerable.sum()),
        "overall": pd.DataFrame({n: f.loc[answerable, METRICS].mean() for n, f in frames.items()}).T,
        "tests": tests,
        "by_label": by_label,
        "sweep": pd.DataFrame(sweep).T,
        "latency": {
            "p50": float(np.percentile(cold, 50)),
            "p95": float(np.percentile(cold, 95)),
            "max": float(cold.max()),
            "queries": len(cold),
            "load_avg_1m": load_before,
            "first_pass_s": cold_s,
        },
        "config": {k: v for k, v in dataclasses.asdict(stage).items() if k != "scorer"}
        | {"max_length": stage.scorer.max_length, "model": model},
    }


def measure_latency(suite_name: str, model: str, n_queries: int, threads: int | None) -> dict[str, float]:
    """Cold scoring time of the first-stage top 16 for the first `n_queries` queries (model loaded first)."""
    cfg = compose_variant(suite_name, model)
    suite = load_suite_from_config(cfg)
    stage = instantiate(cfg.stage.cross_encoder, _convert_="all")
    first = Pipeline.from_config(["bm25", "dense", "fusion"], cfg.stage, depth=stage.top_n)
    queries = suite.queries[:n_queries]
    output = first.run(
        suite.memories,
        suite.queries,
        suite_hash=suite.content_hash,
        cache=CandidateCache(Path(cfg.cache_dir) / "candidates"),
        progress=False,
    )
    text = {m.id: m.text for m in suite.memories}
    scorer = dataclasses.replace(stage.scorer, cache_dir=None, threads=threads)
    load_cross_encoder(scorer.path, scorer.max_length, scorer.device)
    scorer.score("warm up", ["warm up"])
    by_id = {r.query_id: r for r in output.ranked}
    ms = []
    for q in queries:
        started = time.perf_counter()
        scorer.score(q.text, [text[m] for m in by_id[q.id].memory_ids])
        ms.append((time.perf_counter() - started) * 1000)
    return {
        "p50": float(np.percentile(ms, 50)),
        "p95": float(np.percentile(ms, 95)),
        "queries": len(ms),
        "load_avg_1m": os.getloadavg()[0],
    }


def _md(frame: pd.DataFrame, digits: int = 3) -> str:
    """A Markdown table (pandas' to_markdown needs `tabulate`, which the project does not install)."""

    def cell(v: Any) -> str:
        if isinstance(v, (float, np.floating)):
            return "" if np.isnan(v) else f"{v:.{digits}f}"
        return str(v)

    head = ["", *map(str, frame.columns)]
    rows = [
        [str(i), *map(cell, row)] for i, row in zip(frame.index, frame.itertuples(index=False), strict=True)
    ]
    return "\n".join(
        [
            "| " + " | ".join(head) + " |",
            "|" + "---|" * len(head),
            *("| " + " | ".join(r) + " |" for r in rows),
        ]
    )


def training_command(training: dict[str, Any] | None) -> str:
    """The command that trained the model: the defaults plus the overrides its logged config shows."""
    command = "python -m experiments.training.reranker"
    if not training:
        return command
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        defaults = compose(config_name="train_reranker")
    used = training["config"]
    changed = [
        f"{k}={used[k]}"
        for k, v in defaults.items()
        if k in used and not isinstance(used[k], dict) and used[k] != v and k not in ("tracking", "encoder")
    ]
    return " ".join([command, *changed])


def render(results: list[dict[str, Any]], training: dict[str, Any] | None, command: str) -> str:
    lines = [
        "# Cross-encoder rerank (variant `cross_encoder`): trained reranker vs the first stage it reranks",
        "",
        f"Generated by `{command}` (experiments/cross_encoder_report.py). Do not edit by hand.",
        "",
        "The first stage is the hybrid variant (BM25 + MiniLM dense, RRF k=60). The stage rescores its",
        "top 16 with the cross-encoder and returns the top 8; the baseline row is the same first stage",
        "cut to 8, so every row ranks exactly 8 memories. Metrics are means over answerable queries;",
        "Δ is the paired mean difference against the first stage with a 95% bootstrap CI, p is a paired",
        "randomization test with Holm correction across the reranked rows, W/T/L counts queries.",
        "Modes: `replace` = cross-encoder order alone; `rrf` = 0.5/(60+CE rank) + 0.5/(60+first rank);",
        "`weighted` = 0.5·minmax(CE) + 0.5·minmax(first-stage score), both within the top 16.",
        "Rows `control <mode>` (--control SUITE) rerank with the untrained starting point: the bundled",
        "MiniLM with its fresh random head. A reranker that is only noise can still move a small suite's",
        "numbers (by text length, say); the trained rows are worth what they add over the control.",
        "",
    ]
    summary = {
        r["suite"]: {
            row: f"{d:+.3f} (p_holm {p:.3f})" if row != "first stage" else f"{m:.3f}"
            for row, m, d, p in zip(
                r["tests"][PRIMARY].index,
                r["tests"][PRIMARY]["mean"],
                r["tests"][PRIMARY]["delta"],
                r["tests"][PRIMARY]["p_holm"],
                strict=True,
            )
        }
        | {"rerank p95 ms": f"{r['latency']['p95']:.0f}"}
        for r in results
    }
    lines += [
        f"## Summary: {PRIMARY} of the first stage, and each rerank's paired change",
        "",
        _md(pd.DataFrame(summary)),
        "",
    ]
    if training:
        t, c = training, training["config"]
        metric = c["val_metric"]
        val = {k: t[f"val_{metric}_{k}"] for k in ("first_stage", "untrained", "best")}
        seen = min(t["steps"] * c["batch_size"], t["pairs"] * c["epochs"])
        # Older training.json files lack stop_reason; the best step being the last rules out patience.
        reason = t.get("stop_reason") or (
            ("time budget" if t["best_step"] == t["steps"] else "time budget or patience")
            if t["stopped_early"]
            else "completed"
        )
        lines += [
            "## The model",
            "",
            f"Trained by `{training_command(t)}` from the bundled all-MiniLM-L6-v2",
            "(a bi-encoder; sentence-transformers gives it a fresh one-logit head) on "
            f"`{t['train_suite']}` ({t['train_queries']} training queries, split by conversation):",
            f"{t['pairs']} pairs prepared ({t['positive_pairs']} positive; hard negatives from "
            f"{' -> '.join(c['first_stage']['order'])} top {c['negative_depth']}), max_length "
            f"{c['max_length']}, batch {c['batch_size']}, lr {c['lr']}, seed {c['seed']};",
            f"{t['steps']} steps = {seen} pairs seen, ended by: {reason} ({c['max_train_minutes']} min; "
            f"validation every {c['eval_every']} steps, patience {c['patience']}), best at step "
            f"{t['best_step']}, {t['train_s'] / 60:.1f} min on the shared, heavily loaded 2-core CPU.",
            f"Validation ({t['validation_queries']} held-out queries, first-stage top {c['negative_depth']} "
            f"reordered): {metric} first stage {val['first_stage']:.3f}, untrained head "
            f"{val['untrained']:.3f}, trained {val['best']:.3f} (curve: "
            + ", ".join(f"step {h['step']} {h['val']:.3f}" for h in t["history"])
            + ").",
            "",
        ]
    for r in results:
        lat = r["latency"]
        lines += [f"## {r['suite']} ({r['n_answerable']} answerable queries, suite {r['suite_hash']})", ""]
        lines += [_md(r["overall"]), ""]
        for metric, table in r["tests"].items():
            t = table.copy()
            t["W/T/L"] = [
                f"{w}/{ti}/{lo}" for w, ti, lo in zip(t["wins"], t["ties"], t["losses"], strict=True)
            ]
            t["Δ [95% CI]"] = [
                f"{d:+.3f} [{lo:+.3f}, {hi:+.3f}]"
                for d, lo, hi in zip(t["delta"], t["delta_ci_low"], t["delta_ci_high"], strict=True)
            ]
            lines += [f"**{metric}**", "", _md(t[["mean", "Δ [95% CI]", "p_value", "p_holm", "W/T/L"]]), ""]
        lines += [f"### {PRIMARY} per {r['label']}", "", _md(r["by_label"]), ""]
        lines += ["### Weight sweep (share of the cross-encoder), overall", "", _md(r["sweep"]), ""]
        verdict = "within" if lat["p95"] <= BUDGET_MS else "over"
        lines += [
            "### Rerank latency (16 pairs, every pair scored by the model)",
            "",
            f"p50 {lat['p50']:.0f} ms, p95 {lat['p95']:.0f} ms, max {lat['max']:.0f} ms over "
            f"{lat['queries']} queries: p95 {verdict} the {BUDGET_MS:.0f} ms budget. "
            "Measured on the shared 2-core machine "
            f"(1-minute load average {lat['load_avg_1m']:.1f} at the start), so these are upper bounds.",
            "",
        ]
        for threads, m in r.get("latency_by_threads", {}).items():
            lines += [
                f"Re-measured apart (`--latency`, torch threads {threads}): p50 {m['p50']:.0f} ms, p95 "
                f"{m['p95']:.0f} ms over the first {m['queries']} queries "
                f"(load average {m['load_avg_1m']:.1f}).",
                "",
            ]
    lines += [
        "## Commands",
        "",
        "```",
        training_command(training) + "   # BEAM 500K -> models/cross-encoder-beam500k",
        command,
        command + " --latency N   # re-measure latency only, into the same results",
        "python -m experiments.run variant=cross_encoder suite=beam      # one run, mode weighted (default)",
        "python -m experiments.run variant=cross_encoder suite=spark25 stage.cross_encoder.mode=replace",
        "```",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=TRAINED_DEFAULT)
    parser.add_argument("--suites", nargs="+", default=list(SUITES), choices=list(SUITES))
    parser.add_argument("--out", default="reports/cross_encoder")
    parser.add_argument(
        "--control",
        nargs="*",
        default=[],
        choices=list(SUITES),
        help="suites on which to also rerank with the untrained-head MiniLM (what training adds)",
    )
    parser.add_argument(
        "--render-only", action="store_true", help="rewrite README.md from OUT/results.json (no runs)"
    )
    parser.add_argument(
        "--latency",
        type=int,
        default=0,
        metavar="N",
        help="re-measure latency only: N queries per suite, default and 1 torch thread, into results.json",
    )
    args = parser.parse_args(argv)
    training_file = Path(args.model) / "training.json"
    training = json.loads(training_file.read_text()) if training_file.is_file() else None
    command = (
        "python -m experiments.cross_encoder_report"
        + (f" --model {args.model}" if args.model != TRAINED_DEFAULT else "")
        + (f" --suites {' '.join(args.suites)}" if args.suites != list(SUITES) else "")
        + (f" --control {' '.join(args.control)}" if args.control else "")
    )
    if args.render_only or args.latency:  # same flags as the run that wrote results.json
        results = [from_payload(r) for r in json.loads((Path(args.out) / "results.json").read_text())]
        for r, suite in zip(results, args.suites, strict=True):
            if args.latency:
                r["latency_by_threads"] = {
                    str(t or "default"): measure_latency(suite, args.model, args.latency, t)
                    for t in (None, 1)
                }
        write(Path(args.out), results, training, command)
        return
    control = str(untrained_head(Path("models/cross-encoder-untrained-head"))) if args.control else None
    results = []
    for suite in args.suites:  # the report is rewritten after each suite, so a slow one loses nothing
        results.append(measure_suite(suite, args.model, control if suite in args.control else None))
        write(Path(args.out), results, training, command)
        print(f"wrote {Path(args.out) / 'README.md'} ({suite})")


def write(out: Path, results: list[dict[str, Any]], training: dict[str, Any] | None, command: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "README.md").write_text(render(results, training, command))
    payload = [
        {
            **{k: v for k, v in r.items() if not isinstance(v, (pd.DataFrame, dict))},
            "latency": r["latency"],
            "latency_by_threads": r.get("latency_by_threads", {}),
            "config": r["config"],
            "overall": r["overall"].to_dict(orient="index"),
            "by_label": r["by_label"].to_dict(orient="index"),
            "sweep": r["sweep"].to_dict(orient="index"),
            "tests": {m: t.to_dict(orient="index") for m, t in r["tests"].items()},
        }
        for r in results
    ]
    (out / "results.json").write_text(json.dumps(payload, indent=2, default=str))


def from_payload(r: dict[str, Any]) -> dict[str, Any]:
    """A suite's results back from results.json, for --render-only."""
    frame = functools.partial(pd.DataFrame.from_dict, orient="index")
    return {
        **r,
        "overall": frame(r["overall"]),
        "by_label": frame(r["by_label"]),
        "sweep": frame(r["sweep"]),
        "tests": {m: frame(t) for m, t in r["tests"].items()},
    }


if __name__ == "__main__":
    main()
