"""Inference backends measured side by side: speed (wall and CPU time) and quality, on BEAM 100K.

    python -m experiments.benchmarks.backend_tradeoffs          # all backends, defaults below
    python -m experiments.benchmarks.backend_tradeoffs --backends torch,onnx-int8 --cold-sample 64 \
        --no-quality

For each backend in `retrieval/backends.py` (torch, onnx, onnx-int8, openvino, openvino-bf16,
openvino-int8), each in its pinned precision, in one process, in turn:
- bi-encoder cold throughput: a fixed sample of BEAM 100K messages (seeded), encoded with no cache at the
  config's batch size and at each of `--cold-batches`; texts/s by wall clock and by the process's CPU
  time;
- query encode: each of `--queries` BEAM questions encoded alone (no cache), p50/p95 wall and CPU ms;
- dense quality: the `dense` variant on all of BEAM 100K (every message encoded by that backend, once:
  cached under `.memeval_cache/backend_embeddings`; torch reads the shared fp32 cache), nDCG@10 and R@10
  over the answerable questions;
- cross-encoder: rerank of 16 (query, memory) pairs per query at the stage's max_length, no score cache:
  p50/p95 wall and CPU ms; quality: with a trained reranker (`--reranker`, default the stage's model),
  nDCG@10 of the `cross_encoder` variant (weighted mode) per backend; without one, the bundled MiniLM
  loads as a CrossEncoder with a fresh (untrained, seeded) head, the same cost, and quality is stated as
  agreement with torch's scores (max |diff|, Spearman, top-8 overlap), never as nDCG.
Load is high on this shared box, so backends are compared as ratios within one run, and CPU time is
reported beside wall time. Writes OUT/backends.md and OUT/backends.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import sys
import time
from dataclasses import replace
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
from hydra.utils import instantiate
from threadpoolctl import ThreadpoolController

from experiments.benchmarks.pipeline import (
    add_wait_quiet,
    load_note,
    machine,
    percentiles,
    wait_for_quiet,
    wait_note,
)
from experiments.configure.build import pipeline_from_config
from experiments.configure.compose import compose_config
from experiments.configure.settings import load_suite_from_config
from experiments.evaluate.metrics import per_query
from retrieval.encoder import MINILM, load_sentence_transformer, resolve_model_path
from retrieval.reuse import ProcessMemo

BACKENDS = ("torch", "onnx-int8", "onnx", "openvino", "openvino-bf16", "openvino-int8")
SUITE_OVERRIDES: list[str] = []  # --suite-path
TARGETS = {"cold_speedup": 3.0, "ndcg_delta": 0.005, "query_p95_ms": 30.0, "rerank_p95_cpu_ms": 200.0}


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime  # all threads of this process (ORT and OpenVINO pools too)


def timed(fn):
    wall, cpu = time.perf_counter(), cpu_s()
    out = fn()
    return out, time.perf_counter() - wall, cpu_s() - cpu


def compose(overrides: list[str]):
    return compose_config(["suite=beam", "tracking=none", "progress=false", *SUITE_OVERRIDES, *overrides])


def bi_encoder(backend: str, cache_dir: str | None):
    cfg = compose([f"encoder.backend={backend}"])
    enc = instantiate(cfg.encoder, _convert_="all")

    return replace(enc, cache_dir=cache_dir, show_progress=False)


def measure_bi_encoder(
    backend: str, texts: list[str], queries: list[str], batches: list[int]
) -> dict[str, Any]:
    enc = bi_encoder(backend, None)
    calibration = enc._calibration_texts()  # openvino-int8: generated texts; made before the clock starts
    (model, load_s, load_cpu) = timed(
        lambda: load_sentence_transformer(
            enc.path, enc.device, backend, enc.export_dir or ".memeval_cache/models", calibration
        )
    )
    model.encode(texts[:4], batch_size=enc.batch_size)  # warm-up
    by_batch = {}
    for size in dict.fromkeys([enc.batch_size, *batches]):  # the config's batch size first
        _, w, c = timed(lambda size=size: model.encode(texts, batch_size=size, normalize_embeddings=True))
        by_batch[str(size)] = {"wall_s": w, "cpu_s": c}
    wall, cpu = by_batch[str(enc.batch_size)]["wall_s"], by_batch[str(enc.batch_size)]["cpu_s"]
    for q in queries[:3]:
        model.encode([q])
    walls, cpus = [], []
    for q in queries:
        _, w, c = timed(lambda q=q: model.encode([q], normalize_embeddings=True))
        walls.append(1000 * w)
        cpus.append(1000 * c)
    return {
        "load_s": load_s,
        "load_cpu_s": load_cpu,
        "cold_texts": len(texts),
        "batch_size": enc.batch_size,
        "cold_by_batch": by_batch,
        "cold_wall_s": wall,
        "cold_cpu_s": cpu,
        "cold_texts_per_s": len(texts) / wall,
        "cold_texts_per_cpu_s": len(texts) / cpu,
        "query_wall_ms": percentiles(walls),
        "query_cpu_ms": percentiles(cpus),
    }


def dense_quality(backend: str, work: Path) -> dict[str, Any]:

    overrides = ["variant=dense", f"encoder.backend={backend}"]
    if backend != "torch":  # keep backend vectors out of the shared fp32 cache folder
        overrides.append(f"encoder.cache_dir={work / 'backend_embeddings'}")
    cfg = compose(overrides)
    return evaluate(cfg, pipeline_from_config(list(cfg.variant.stages), cfg.stage, depth=cfg.depth))


def evaluate(cfg, pipeline) -> dict[str, Any]:

    suite = load_suite_from_config(cfg, memoise=True)
    output, wall, cpu = timed(
        lambda: pipeline.run(suite.memories, suite.queries, suite_hash=suite.content_hash, progress=False)
    )
    run = {r.query_id: list(r.memory_ids) for r in output.ranked}
    table = per_query(suite.qrels, run, ["nDCG@10", "R@10"])
    return {
        "queries": len(table),
        "memories": len(suite.memories),
        "nDCG@10": float(table["nDCG@10"].mean()),
        "R@10": float(table["R@10"].mean()),
        "run_wall_s": wall,
        "run_cpu_s": cpu,
        "per_query_ndcg": table["nDCG@10"].round(6).to_dict(),
    }


def rerank_heads(n_queries: int) -> list[tuple[str, list[str]]]:
    """(question, its 16 BM25 candidates' texts) for the first `n_queries` BEAM 100K questions."""

    cfg = compose(["variant=bm25"])
    suite = load_suite_from_config(cfg, memoise=True)
    queries = list(suite.queries)[:n_queries]
    output = pipeline_from_config(list(cfg.variant.stages), cfg.stage, depth=16).run(
        suite.memories, queries, progress=False
    )
    text = {m.id: m.text for m in suite.memories}
    question = {q.id: q.text for q in queries}
    return [(question[r.query_id], [text[m] for m in r.memory_ids[:16]]) for r in output.ranked]


def measure_cross_encoder(backend: str, model: str, heads, trained: bool) -> dict[str, Any]:
    cfg = compose(["variant=cross_encoder", f"stage.cross_encoder.scorer.model={model}"])
    scorer = replace(
        instantiate(cfg.stage.cross_encoder.scorer, _convert_="all"), backend=backend, cache_dir=None
    )
    if not trained:
        import torch  # ~5 s to import: only the torch backend's cross-encoder needs it

        # The fresh head is seeded, so every backend exports the same weights; its exports go to a
        # folder of their own, never where a real run would look for the bundled MiniLM's exports.
        scorer = replace(
            scorer, export_dir=str(Path(scorer.export_dir or ".memeval_cache") / "untrained-head")
        )
        torch.manual_seed(0)  # the fresh head is seeded: every backend exports the same weights
    _, load_s, _ = timed(lambda: scorer.score(heads[0][0], heads[0][1][:2]))
    walls, cpus, scores = [], [], []
    for q, texts in heads:
        s, w, c = timed(lambda q=q, texts=texts: replace(scorer).score(q, texts))
        walls.append(1000 * w)
        cpus.append(1000 * c)
        scores.append(s.tolist())
    return {
        "max_length": scorer.max_length,
        "pairs_per_rerank": len(heads[0][1]),
        "load_s": load_s,
        "rerank_wall_ms": percentiles(walls[1:]),
        "rerank_cpu_ms": percentiles(cpus[1:]),
        "scores": scores,
    }


def dense_threads(sizes=(2_432, 38_058, 100_000), repeats: int = 200) -> list[dict[str, Any]]:
    """A query's matrix-vector product (384-d, float32) with the default BLAS threads and with one."""
    controller, rng, rows = ThreadpoolController(), np.random.default_rng(0), []
    for n in sizes:
        matrix = rng.standard_normal((n, 384), dtype=np.float32)
        query = rng.standard_normal(384, dtype=np.float32)
        for threads in (None, 1):
            walls, cpus = [], []
            for i in range(repeats + 5):
                with controller.limit(limits=threads, user_api="blas"):
                    _, w, c = timed(lambda m=matrix, q=query: m @ q)
                if i >= 5:
                    walls.append(1000 * w)
                    cpus.append(1000 * c)
            rows.append(
                {
                    "memories": n,
                    "blas_threads": threads or "default",
                    "wall_ms": percentiles(walls),
                    "cpu_ms": percentiles(cpus),
                }
            )
    return rows


def spark_latency(backend: str, suite_path: str | None = None) -> dict[str, Any]:
    """`spark_phase3` on spark25 with this bi-encoder backend, one query at a time, nothing cached.

    Neither query vectors nor rerank scores are cached (live query encoding and live rerank), while the
    corpus and indexes are built once by a warm-up query (a copy of the first question with another id
    and text) and shared through the process memo, as in a served system. Per query: wall and CPU ms of
    the whole `Pipeline.run` call."""
    overrides = ["suite=spark25", "variant=spark_phase3", "tracking=none", "progress=false"]
    overrides += [f"encoder.backend={backend}", "encoder.cache_dir=null"]
    overrides += ["stage.cross_encoder.scorer.cache_dir=null"]
    cfg = compose_config(overrides + ([f"suite.path={suite_path}"] if suite_path else []))
    suite = load_suite_from_config(cfg, memoise=False)
    pipeline = pipeline_from_config(list(cfg.variant.stages), cfg.stage, depth=cfg.depth)
    memo, queries = ProcessMemo(), list(suite.queries)
    warm = replace(queries[0], id=f"{queries[0].id}-warmup", text=f"warm-up: {queries[0].text}")
    _, build_s, build_cpu = timed(
        lambda: pipeline.run(suite.memories, [warm], suite_hash=suite.content_hash, progress=False, memo=memo)
    )
    walls, cpus, run = [], [], {}
    for q in queries:
        out, w, c = timed(
            lambda q=q: pipeline.run(
                suite.memories, [q], suite_hash=suite.content_hash, progress=False, memo=memo
            )
        )
        walls.append(1000 * w)
        cpus.append(1000 * c)
        run[q.id] = list(out.ranked[0].memory_ids)
    table = per_query(suite.qrels, run, ["nDCG@10"])
    return {
        "queries": len(queries),
        "build_s": build_s,
        "build_cpu_s": build_cpu,
        "query_wall_ms": percentiles(walls),
        "query_cpu_ms": percentiles(cpus),
        "nDCG@10": float(table["nDCG@10"].mean()),
        "reranker_backend": cfg.stage.cross_encoder.scorer.get("backend", "torch"),
    }


def agreement(reference: list[list[float]], other: list[list[float]]) -> dict[str, float]:
    from scipy.stats import spearmanr  # ~2.5 s to import: only the rank agreement needs it

    diffs, rhos, overlaps = [], [], []
    for a, b in zip(reference, other, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        diffs.append(float(np.abs(a - b).max()))
        rhos.append(float(spearmanr(a, b).statistic) if len(a) > 1 else 1.0)
        overlaps.append(len(set(np.argsort(-a)[:8]) & set(np.argsort(-b)[:8])) / min(8, len(a)))
    return {
        "max_abs_diff": max(diffs),
        "spearman_mean": float(np.mean(rhos)),
        "top8_overlap": float(np.mean(overlaps)),
    }


def reranker_quality(backend: str, model: str) -> dict[str, Any]:

    cfg = compose(
        [
            "variant=cross_encoder",
            f"stage.cross_encoder.scorer.model={model}",
            f"stage.cross_encoder.scorer.backend={backend}",
        ]
    )
    return evaluate(cfg, pipeline_from_config(list(cfg.variant.stages), cfg.stage, depth=cfg.depth))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--cold-sample", type=int, default=128, help="BEAM messages for cold throughput")
    parser.add_argument(
        "--cold-batches",
        type=lambda v: [int(x) for x in v.split(",") if x],
        default=[16, 64],
        help="batch sizes timed for cold throughput, besides the config's",
    )
    parser.add_argument("--queries", type=int, default=60, help="single-query encodes timed per backend")
    parser.add_argument("--rerank-queries", type=int, default=40, help="reranks of 16 timed per backend")
    parser.add_argument("--reranker", default="./models/cross-encoder-beam500k")
    parser.add_argument("--no-quality", action="store_true", help="skip the full BEAM 100K dense runs")
    parser.add_argument("--work", default=".memeval_cache")
    parser.add_argument("--out", default="reports/benchmarks")
    parser.add_argument("--note", default="")
    parser.add_argument(
        "--suite-path", default=None, help="a BEAM folder (default: the suite config's, BEAM 100K)"
    )
    parser.add_argument(
        "--parts",
        default="threads,bi,dense,ce",
        help="threads (BLAS in dense search), bi (speed), dense (quality), ce (speed; quality if trained), "
        "spark (spark_phase3 per-query latency on spark25 with each bi-encoder backend)",
    )
    parser.add_argument("--merge", action="store_true", help="update OUT/backends.json instead of replacing")
    parser.add_argument(
        "--merge-from",
        action="append",
        default=[],
        help="another run's backends.json to fold in (repeatable)",
    )
    add_wait_quiet(parser)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    parts = set(args.parts.split(","))
    SUITE_OVERRIDES[:] = [f"suite.path={args.suite_path}"] if args.suite_path else []
    wait = wait_for_quiet(args.wait_quiet)
    info = machine()
    info["wait"] = wait

    info["versions"].update({p: version(p) for p in ("onnxruntime", "openvino", "onnx", "transformers")})
    info["command"] = "python -m experiments.benchmarks.backend_tradeoffs " + shlex.join(
        argv if argv is not None else sys.argv[1:]
    )

    suite = load_suite_from_config(compose([]), memoise=True)
    rng = np.random.default_rng(0)
    memories = list(suite.memories)
    sample = [memories[i].text for i in rng.choice(len(memories), args.cold_sample, replace=False)]
    questions = [q.text for q in suite.queries][: args.queries]
    trained = Path(args.reranker).is_dir()
    ce_model = args.reranker if trained else resolve_model_path(MINILM)
    heads = rerank_heads(args.rerank_queries)
    results: dict[str, Any] = {"machine": info, "args": vars(args), "backends": {}}
    previous = Path(args.out) / "backends.json"
    if args.merge and previous.is_file():  # e.g. the cross-encoder part again, once a reranker is trained
        results = json.loads(previous.read_text())
        results["runs"] = results.get("runs", [results["machine"]]) + [info]
        results["args"]["reranker"] = args.reranker
    results["trained_reranker"] = results.get("trained_reranker", False) if "ce" not in parts else trained
    for other in args.merge_from:  # parts measured by another run (another process, same machine)
        extra = json.loads(Path(other).read_text())
        if extra.get("trained_reranker") and not results.get("trained_reranker"):
            # Rows scored by a trained reranker replace the untrained-head rows: one table, one model.
            for row in results["backends"].values():
                if "cross_encoder" in row:
                    row["cross_encoder_untrained_head"] = row.pop("cross_encoder")
        results["runs"] = results.get("runs", [results["machine"]]) + extra.get("runs", [extra["machine"]])
        for backend, parts_measured in extra["backends"].items():
            results["backends"].setdefault(backend, {}).update(parts_measured)
        if any("cross_encoder" in row for row in extra["backends"].values()):  # it measured a reranker
            results["trained_reranker"] = extra.get("trained_reranker", trained)
            training = results.get("reranker_training", "")
            results["reranker_training"] = extra.get("reranker_training", training)
            results["args"]["reranker"] = extra["args"].get("reranker", args.reranker)
    if "threads" in parts:
        results["dense_threads"] = dense_threads()
    if trained and "ce" in parts and (Path(args.reranker) / "training.json").is_file():
        t = json.loads((Path(args.reranker) / "training.json").read_text())
        results["reranker_training"] = (
            f"{t.get('num_layers', '?')} layers, {t['steps']} steps on {t['pairs']} pairs, stopped by "
            f"{t['stop_reason']} after {t['train_s']:.0f} s; validation nDCG@8 "
            f"{t.get('val_nDCG@8_best', 0):.3f} vs first stage {t.get('val_nDCG@8_first_stage', 0):.3f}"
        )
    for backend in backends:
        row: dict[str, Any] = results["backends"].setdefault(backend, {})
        if "bi" in parts:
            print(f"[{backend}] bi-encoder", flush=True)
            row["bi_encoder"] = measure_bi_encoder(backend, sample, questions, args.cold_batches)
        if "ce" in parts:
            print(f"[{backend}] cross-encoder", flush=True)
            row["cross_encoder"] = measure_cross_encoder(backend, ce_model, heads, trained)
        if "dense" in parts and not args.no_quality:
            print(f"[{backend}] dense quality on {args.suite_path or 'BEAM 100K'}", flush=True)
            row["dense_quality"] = dense_quality(backend, Path(args.work))
        if "ce" in parts and trained and not args.no_quality:
            print(f"[{backend}] cross_encoder variant quality on BEAM 100K", flush=True)
            row["rerank_quality"] = reranker_quality(backend, ce_model)
        if "spark" in parts:
            print(f"[{backend}] spark_phase3 on spark25", flush=True)
            row["spark_phase3"] = spark_latency(backend)
        row["loadavg_after"] = list(os.getloadavg())
        write(results, Path(args.out), info)  # after each backend: an interrupted run keeps what it measured
    write(results, Path(args.out), info)
    return 0


def write(results: dict[str, Any], out: Path, current: dict[str, Any]) -> None:
    """Both files, with `current` (this run's machine entry) stamped with the load average now."""
    ref = results["backends"].get("torch")
    for row in results["backends"].values():
        if ref is not None and "cross_encoder" in ref and "cross_encoder" in row:
            row["cross_encoder"]["agreement_with_torch"] = agreement(
                ref["cross_encoder"]["scores"], row["cross_encoder"]["scores"]
            )
    current["loadavg_end"] = list(os.getloadavg())
    out.mkdir(parents=True, exist_ok=True)
    (out / "backends.json").write_text(json.dumps(results, indent=1, default=str))
    (out / "backends.md").write_text(render(results))
    print(f"wrote {out / 'backends.md'} and {out / 'backends.json'}", flush=True)


def _f(x: float, digits: int = 1) -> str:
    return f"{x:,.{digits}f}"


def _batch(rows: dict[str, Any]) -> str:
    sizes = sorted({str(r["bi_encoder"].get("batch_size", 64)) for r in rows.values() if "bi_encoder" in r})
    return "/".join(sizes) or "–"


def _delta(row: dict[str, Any], ref: dict[str, Any] | None, part: str) -> float | None:
    """nDCG@10 of a quality part (dense_quality, rerank_quality) minus torch's, when both were measured."""
    if not row.get(part) or not ref or not ref.get(part):
        return None
    return row[part]["nDCG@10"] - ref[part]["nDCG@10"]


def _memories(rows: dict[str, Any]) -> str:
    counts = {r["dense_quality"].get("memories", 2_432) for r in rows.values() if r.get("dense_quality")}
    return "/".join(f"{n:,}" for n in sorted(counts)) or "–"


def batch_table(rows: dict[str, Any]) -> list[str]:
    """Cold texts/s by CPU time at each batch size timed, and the speed-up over torch at the same size
    and over torch at its best size (small batches pad less and stay in cache)."""
    timed_rows = {
        b: r["bi_encoder"]["cold_by_batch"]
        for b, r in rows.items()
        if "cold_by_batch" in r.get("bi_encoder", {})
    }
    ref = timed_rows.get("torch")
    if not timed_rows or ref is None:
        return []
    n = next(r["bi_encoder"]["cold_texts"] for r in rows.values() if "bi_encoder" in r)
    sizes = sorted({int(k) for t in timed_rows.values() for k in t})
    best_ref = max(n / ref[str(k)]["cpu_s"] for k in sizes if str(k) in ref)
    lines = [
        "",
        "Cold throughput by batch size (texts/s by CPU time; in brackets, the speed-up over torch at the "
        "same batch size). Last column: this backend's best against torch's best.",
        "",
        "| backend | " + " | ".join(f"batch {k}" for k in sizes) + " | best vs torch's best |",
        "|---|" + "---|" * (len(sizes) + 1),
    ]
    for b, t in timed_rows.items():
        cells = []
        for k in sizes:
            if str(k) not in t:
                cells.append("–")
                continue
            tps = n / t[str(k)]["cpu_s"]
            ratio = tps / (n / ref[str(k)]["cpu_s"]) if str(k) in ref else float("nan")
            cells.append(f"{_f(tps)} ({_f(ratio, 2)}×)")
        best = max(n / v["cpu_s"] for v in t.values())
        lines.append(f"| {b} | " + " | ".join(cells) + f" | {_f(best / best_ref, 2)}× |")
    return lines


def cross_encoder_section(results: dict[str, Any]) -> list[str]:
    """The rerank table, when this run (or one merged in) measured a cross-encoder."""
    rows = results["backends"]
    ref = rows.get("torch")
    if not any("cross_encoder" in row for row in rows.values()):
        return []
    trained = results["trained_reranker"]
    lines = [
        "",
        "## Cross-encoder (rerank of 16 pairs at the stage's max_length)",
        "",
        (
            f"Model: the trained reranker `{results['args']['reranker']}` "
            f"({results.get('reranker_training', '')}). Quality: nDCG@10 of the `cross_encoder` variant "
            "(hybrid, then weighted rerank of 16 to 8) on all BEAM 100K questions, with that backend's "
            "scores."
            if trained
            else "No trained reranker on this machine: the bundled MiniLM-L6 weights load as a CrossEncoder "
            "with a fresh seeded head (same architecture and length, so the same cost). Its scores mean "
            "nothing for relevance, so quality is stated as agreement with torch's scores on the same pairs, "
            "not as nDCG."
        ),
        "",
        "| backend | p50 ms | p95 ms | p50 CPU ms | p95 CPU ms | max abs diff vs torch | Spearman vs torch | "
        "top-8 overlap | nDCG@10 (weighted) | Δ vs torch |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for b, row in rows.items():
        if "cross_encoder" not in row:
            continue
        ce, ag, rq = (
            row["cross_encoder"],
            row["cross_encoder"].get("agreement_with_torch", {}),
            row.get("rerank_quality"),
        )
        delta = _delta(row, ref, "rerank_quality")
        lines.append(
            f"| {b} | {_f(ce['rerank_wall_ms']['p50'])} | {_f(ce['rerank_wall_ms']['p95'])} | "
            f"{_f(ce['rerank_cpu_ms']['p50'])} | {_f(ce['rerank_cpu_ms']['p95'])} | "
            f"{ag.get('max_abs_diff', float('nan')):.4f} | {ag.get('spearman_mean', float('nan')):.4f} | "
            f"{ag.get('top8_overlap', float('nan')):.3f} | "
            + (f"{rq['nDCG@10']:.4f} | {delta:+.4f} |" if rq and delta is not None else "– | – |")
        )
    return lines


def render(results: dict[str, Any]) -> str:
    info, rows = results["machine"], results["backends"]
    ref = rows.get("torch")
    runs = results.get("runs", [info])
    lines = [
        "# Inference backends: speed and quality on this CPU",
        "",
        "Generated by experiments/benchmarks/backend_tradeoffs.py; raw numbers in `backends.json`. "
        "Do not edit by hand.",
        "",
        "## Machine and runs",
        "",
        f"- CPU: {info['cpu']} (ISA class {info.get('isa', 'not recorded')}), {info['nproc']} cores "
        f"available; RAM {info['ram_gb']} GB; {info['platform']}",
        "- " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()),
    ]
    for run in runs:
        lines.append(
            f"- `{run['command']}` on {run['date_utc']}: load average (1/5/15 min) at start "
            f"{', '.join(_f(x, 2) for x in run['loadavg_start'])}, at end "
            f"{', '.join(_f(x, 2) for x in run.get('loadavg_end', [float('nan')] * 3))}"
        )
        if note := wait_note(run.get("wait")):
            lines.append("  " + note)
    peak = {
        "nproc": info["nproc"],
        "loadavg_start": [max(r["loadavg_start"][0] for r in runs)],
        "loadavg_end": [max(r.get("loadavg_end", [0.0])[0] for r in runs)],
    }
    lines += [load_note(peak) + " Backends are compared as ratios measured within the same run."]
    if results["args"].get("note"):
        lines.append(f"- Note: {results['args']['note']}")
    lines += [
        "",
        "## Bi-encoder (all-MiniLM-L6-v2, max 256 tokens)",
        "",
        f"Suite: {results['args'].get('suite_path') or 'BEAM 100K'}. Cold throughput: "
        f"{results['args']['cold_sample']} of its messages (seeded sample), no cache, "
        f"batch {_batch(rows)} (the encoder config's). Query encode: single BEAM questions, no cache. "
        f"Dense quality: the `dense` variant over all {_memories(rows)} messages and the answerable "
        "questions, every vector computed by that backend.",
        "",
        "| backend | texts/s (wall) | texts/s (CPU) | speed-up vs torch (CPU) | query p50 ms | "
        "query p95 ms | query p95 CPU ms | dense nDCG@10 | Δ vs torch | R@10 | questions |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for b, row in rows.items():
        if "bi_encoder" not in row or (ref and "bi_encoder" not in ref):
            continue
        bi, dq = row["bi_encoder"], row.get("dense_quality")
        speed = (
            bi["cold_texts_per_cpu_s"] / ref["bi_encoder"]["cold_texts_per_cpu_s"] if ref else float("nan")
        )
        delta = _delta(row, ref, "dense_quality")
        lines.append(
            f"| {b} | {_f(bi['cold_texts_per_s'])} | {_f(bi['cold_texts_per_cpu_s'])} | {_f(speed, 2)}× | "
            f"{_f(bi['query_wall_ms']['p50'])} | {_f(bi['query_wall_ms']['p95'])} | "
            f"{_f(bi['query_cpu_ms']['p95'])} | "
            + (
                f"{dq['nDCG@10']:.4f} | {delta:+.4f} | {dq['R@10']:.4f} | {dq['queries']} |"
                if dq
                else "– | – | – | – |"
            )
        )
    lines += batch_table(rows)
    lines += cross_encoder_section(results)
    if results.get("dense_threads"):
        lines += [
            "",
            "## Dense search threads",
            "",
            "One query's matrix-vector product over n memories (384-d float32), 200 repeats, with numpy's "
            "default BLAS threads and with one (threadpoolctl; `retrieval/retrievers/dense.py` uses one).",
            "",
            "| memories | BLAS threads | p50 ms | p95 ms | CPU ms / query |",
            "|---|---|---|---|---|",
        ]
        for r in results["dense_threads"]:
            lines.append(
                f"| {r['memories']:,} | {r['blas_threads']} | {r['wall_ms']['p50']:.3f} | "
                f"{r['wall_ms']['p95']:.3f} | {r['cpu_ms']['mean']:.3f} |"
            )
    spark = {b: row["spark_phase3"] for b, row in rows.items() if "spark_phase3" in row}
    if spark:
        lines += [
            "",
            "## spark_phase3 on spark25, one query at a time",
            "",
            "Each question alone through the whole pipeline (`Pipeline.run`), with live query encoding by "
            "that bi-encoder backend and a live rerank (neither query vectors nor rerank scores cached); "
            "corpus and indexes built once beforehand. "
            "Target: p95 ≤ 400 ms a query (CPU time where the box is shared).",
            "",
            "| bi-encoder backend | reranker backend | queries | p50 ms | p95 ms | p50 CPU ms | p95 CPU ms | "
            "nDCG@10 | p95 CPU ≤ 400 ms |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for b, sp in spark.items():
            lines.append(
                f"| {b} | {sp['reranker_backend']} | {sp['queries']} | {_f(sp['query_wall_ms']['p50'])} | "
                f"{_f(sp['query_wall_ms']['p95'])} | {_f(sp['query_cpu_ms']['p50'])} | "
                f"{_f(sp['query_cpu_ms']['p95'])} | {sp['nDCG@10']:.4f} | "
                f"{'yes' if sp['query_cpu_ms']['p95'] <= 400 else 'no'} |"
            )
    lines += ["", "## Targets", ""] + targets(results)
    return "\n".join(lines) + "\n"


def targets(results: dict[str, Any]) -> list[str]:
    rows, ref = results["backends"], results["backends"].get("torch")
    if ref is None:
        return ["- No torch reference in this run: targets are ratios to torch, not judged."]
    out = []
    for b, row in rows.items():
        if b == "torch":
            continue
        checks = []
        bi, dq, rq = row.get("bi_encoder"), row.get("dense_quality"), row.get("rerank_quality")
        if bi and "bi_encoder" in ref:
            speed = bi["cold_texts_per_cpu_s"] / ref["bi_encoder"]["cold_texts_per_cpu_s"]
            wall_speed = bi["cold_texts_per_s"] / ref["bi_encoder"]["cold_texts_per_s"]
            verdict = "meets" if speed >= TARGETS["cold_speedup"] else "misses"
            checks.append(
                f"cold throughput {speed:.2f}× torch by CPU time ({wall_speed:.2f}× by wall) {verdict} ≥ 3×"
            )
        if dq and ref.get("dense_quality"):
            d = dq["nDCG@10"] - ref["dense_quality"]["nDCG@10"]
            verdict = "meets" if abs(d) <= TARGETS["ndcg_delta"] else "misses"
            checks.append(f"dense nDCG@10 Δ {d:+.4f} {verdict} |Δ| ≤ 0.005")
        if bi:
            q95, c95 = bi["query_wall_ms"]["p95"], bi["query_cpu_ms"]["p95"]
            verdict = "meets" if q95 <= TARGETS["query_p95_ms"] else "misses"
            checks.append(f"query p95 {q95:.1f} ms wall (CPU {c95:.1f} ms) {verdict} ≤ 30 ms")
        if row.get("cross_encoder"):
            r95 = row["cross_encoder"]["rerank_cpu_ms"]["p95"]
            verdict = "meets" if r95 <= TARGETS["rerank_p95_cpu_ms"] else "misses"
            checks.append(f"rerank-16 p95 {r95:.0f} ms CPU {verdict} ≤ 200 ms")
        if rq and ref.get("rerank_quality"):
            d = rq["nDCG@10"] - ref["rerank_quality"]["nDCG@10"]
            verdict = "meets" if abs(d) <= TARGETS["ndcg_delta"] else "misses"
            checks.append(f"cross_encoder variant nDCG@10 Δ {d:+.4f} {verdict} |Δ| ≤ 0.005")
        out.append(f"- **{b}**: " + "; ".join(checks) + ".")
    return out


if __name__ == "__main__":
    sys.exit(main())
