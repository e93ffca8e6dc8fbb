"""What it takes to reach the rerank-16 budget (p95 <= 200 ms CPU): static int8, threads, max_length.

    python -m experiments.benchmarks.reranker_speed     # the trained reranker, 30 BEAM 100K reranks

One process, the trained reranker's fp32 ONNX export (`retrieval/backends.py`), and for each variant
the rerank of 16 BM25 candidates for each of `--queries` BEAM 100K questions, timed by wall clock and
by the process's CPU time (all threads), with agreement to torch's scores on the same pairs:
- fp32 ONNX Runtime and OpenVINO, with the runtime's default threads and with one;
- static int8 (ONNX Runtime `quantize_static`, QDQ, per-channel int8 weights, uint8 activations, MinMax
  calibration) of the MatMuls only and of every supported op, run by ONNX Runtime and by OpenVINO
  (which reads QDQ graphs as int8). Calibration: `--calibration-pairs` real (query, memory) pairs of
  the reranker's training distribution (BEAM 500K training pairs, never the BEAM 100K evaluation suite);
- the stage scoring at a shorter max_length than the model was trained at (64 vs 96).
Writes OUT/reranker-speed.md and OUT/reranker-speed.json. Quantized files go to a scratch folder: none
of these is a backend the stage uses unless it measures within the budget.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from hydra.utils import instantiate

from experiments.benchmarks.backend_tradeoffs import agreement, rerank_heads, timed
from experiments.benchmarks.pipeline import load_note, machine, percentiles
from experiments.configure.app_settings import RerankerSettings
from experiments.configure.compose import compose_config
from experiments.training.reranker import first_stage_lists, split_by_conversation, training_pairs
from retrieval.backends import INPUTS, _runtime, ensure_onnx, export_folder
from retrieval.encoder import EXPORT_DIR, model_revision


def calibration_pairs(n: int, seed: int = 1) -> list[tuple[str, str]]:
    """`n` of the trainer's own (query, memory) training pairs: BEAM 500K, bm25 hard negatives."""
    settings = RerankerSettings.from_config(
        compose_config(["tracking=none", "progress=false"], config_name="train_reranker")
    )
    suite = instantiate(settings.train_suite, _convert_="all")
    split = split_by_conversation(suite, settings.val_fraction, settings.seed)
    lists = first_stage_lists(settings, suite, split.train, settings.negative_depth)
    pairs = training_pairs(suite, split.train, lists, settings, np.random.default_rng(settings.seed))
    pick = np.random.default_rng(seed).choice(len(pairs), min(n, len(pairs)), replace=False)
    return [(pairs[i].query, pairs[i].text) for i in pick]


def quantize(fp32: Path, out: Path, tokenizer, pairs, max_length: int, matmul_only: bool) -> Path:
    # onnxruntime.quantization imports onnx and its shape inference (~1 s): only static int8 needs them
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    pre = out / "pre.onnx"
    if not pre.is_file():
        quant_pre_process(str(fp32), str(pre), skip_symbolic_shape=True)
    batches = []
    for i in range(0, len(pairs), 16):
        enc = tokenizer(
            [q for q, _ in pairs[i : i + 16]],
            [t for _, t in pairs[i : i + 16]],
            padding=True,
            truncation="longest_first",
            max_length=max_length,
            return_tensors="np",
        )
        batches.append({k: enc[k].astype("int64") for k in INPUTS if k in enc})

    class Reader:
        def __init__(self) -> None:
            self.it = iter(batches)

        def get_next(self):
            return next(self.it, None)

    path = out / ("int8-static-matmul.onnx" if matmul_only else "int8-static-all.onnx")
    quantize_static(
        str(pre),
        str(path),
        Reader(),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        calibrate_method=CalibrationMethod.MinMax,
        **({"op_types_to_quantize": ["MatMul"]} if matmul_only else {}),
    )
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reranker", default="./models/cross-encoder-beam500k")
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--calibration-pairs", type=int, default=128)
    parser.add_argument("--scratch", default=".memeval_cache/reranker_speed")
    parser.add_argument("--out", default="reports/benchmarks")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch  # ~5 s (with sentence_transformers): only the measurement itself needs them
    from sentence_transformers import CrossEncoder

    info = machine()
    info["command"] = "python -m experiments.benchmarks.reranker_speed " + shlex.join(
        argv if argv is not None else sys.argv[1:]
    )
    path = str(Path(args.reranker).resolve())
    trained = json.loads((Path(path) / "training.json").read_text())
    max_length = int(trained["config"]["max_length"])
    model = CrossEncoder(path, num_labels=1, max_length=max_length, device="cpu")
    tokenizer = model.tokenizer
    folder = export_folder(EXPORT_DIR, path, model_revision(path), "cross-encoder")
    fp32 = ensure_onnx(model[0].model.eval(), tokenizer, folder, "sequence-classification", int8=False)
    scratch = Path(args.scratch) / f"{folder.name}-cal{args.calibration_pairs}"
    scratch.mkdir(parents=True, exist_ok=True)
    heads = rerank_heads(args.queries)
    pairs = calibration_pairs(args.calibration_pairs)
    quantized = {}
    for matmul_only in (True, False):
        t = time.perf_counter()
        quantized[matmul_only] = quantize(fp32, scratch, tokenizer, pairs, max_length, matmul_only)
        print(f"static int8 ({'MatMul' if matmul_only else 'all ops'}) in {time.perf_counter() - t:.0f} s")

    def runtime_scorer(onnx_path: Path, runtime: str, threads: int | None, length: int):
        names, run, _ = _runtime(onnx_path, runtime, threads)

        def score(query: str, texts: list[str]) -> np.ndarray:
            enc = tokenizer(
                [query] * len(texts),
                texts,
                padding=True,
                truncation="longest_first",
                max_length=length,
                return_tensors="np",
            )
            return run({k: enc[k].astype("int64") for k in names}).reshape(-1)

        return score

    def torch_scorer(query: str, texts: list[str]) -> np.ndarray:
        pairs = [(query, t) for t in texts]
        return np.asarray(model.predict(pairs, activation_fn=torch.nn.Identity(), show_progress_bar=False))

    variants: list[tuple[str, Any]] = [("torch fp32", torch_scorer)]
    for runtime in ("onnx", "openvino"):
        for threads in (None, 1):
            name = f"{runtime} fp32, {'default' if threads is None else threads} thread(s)"
            variants.append((name, runtime_scorer(fp32, runtime, threads, max_length)))
        for matmul_only, path_ in quantized.items():
            name = f"{runtime} static int8 ({'MatMul' if matmul_only else 'all ops'}), 1 thread"
            variants.append((name, runtime_scorer(path_, runtime, 1, max_length)))
        variants.append((f"{runtime} fp32, 1 thread, max_length 64", runtime_scorer(fp32, runtime, 1, 64)))
    rows: dict[str, Any] = {}
    for name, score in variants:
        score(*heads[0])  # warm-up
        walls, cpus, scores = [], [], []
        for query, texts in heads:
            s, wall, cpu = timed(lambda q=query, t=texts, f=score: f(q, t))
            walls.append(1000 * wall)
            cpus.append(1000 * cpu)
            scores.append([float(x) for x in s])
        rows[name] = {
            "wall_ms": percentiles(walls),
            "cpu_ms": percentiles(cpus),
            "scores": scores,
            "loadavg_after": list(os.getloadavg()),
        }
        rows[name]["agreement_with_torch"] = agreement(rows["torch fp32"]["scores"], scores)
        print(name, rows[name]["cpu_ms"]["p95"], rows[name]["agreement_with_torch"], flush=True)
    info["loadavg_end"] = list(os.getloadavg())
    spread = [float(np.ptp(s)) for s in rows["torch fp32"]["scores"]]
    result = {
        "machine": info,
        "args": vars(args),
        "training": trained.get("stop_reason"),
        "max_length": max_length,
        "torch_score_range_median": float(np.median(spread)),
        "rows": rows,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "reranker-speed.json").write_text(json.dumps(result, indent=1))
    (out / "reranker-speed.md").write_text(render(result, trained))
    print(f"wrote {out / 'reranker-speed.md'}")
    return 0


def render(result: dict[str, Any], trained: dict[str, Any]) -> str:
    info = result["machine"]
    lines = [
        "# Rerank of 16: static int8, threads and max_length against the 200 ms CPU budget",
        "",
        "Generated by experiments/benchmarks/reranker_speed.py; raw numbers in `reranker-speed.json`. "
        "Do not edit by hand.",
        "",
        f"- `{info['command']}` on {info['date_utc']}; CPU {info['cpu']}, {info['nproc']} cores; "
        f"load average (1/5/15 min) at start {', '.join(f'{x:.2f}' for x in info['loadavg_start'])}, "
        f"at end {', '.join(f'{x:.2f}' for x in info['loadavg_end'])}.",
        load_note(info),
        f"- Reranker: `{result['args']['reranker']}`, {trained.get('num_layers')} layers, trained at "
        f"max_length {result['max_length']} ({trained.get('steps')} steps, stopped by "
        f"{trained.get('stop_reason')}); {result['args']['queries']} BEAM 100K questions, each "
        "reranking its BM25 top 16. Median spread (max - min) of torch's 16 logits per query: "
        f"{result['torch_score_range_median']:.4f}.",
        "",
        "| variant | p50 ms | p95 ms | p50 CPU ms | p95 CPU ms | max abs diff vs torch | "
        "Spearman vs torch | top-8 overlap | p95 CPU ≤ 200 ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in result["rows"].items():
        ag = row["agreement_with_torch"]
        lines.append(
            f"| {name} | {row['wall_ms']['p50']:,.0f} | {row['wall_ms']['p95']:,.0f} | "
            f"{row['cpu_ms']['p50']:,.0f} | {row['cpu_ms']['p95']:,.0f} | {ag['max_abs_diff']:.4f} | "
            f"{ag['spearman_mean']:.3f} | {ag['top8_overlap']:.3f} | "
            f"{'yes' if row['cpu_ms']['p95'] <= 200 else 'no'} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
