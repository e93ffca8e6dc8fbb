"""Scale and speed benchmark: how the harness's cost grows with memories, and whether it meets its targets.

    python -m experiments.benchmarks.pipeline                       # full: synth 1k/10k/100k + BEAM 500K
    python -m experiments.benchmarks.pipeline --sizes 1000 --queries 50 --no-beam500k --out outputs/b  # smoke

Writes OUT/README.md (tables, machine, date, targets met or missed and by how much) and
OUT/results.json (every raw number). Data flow: for each suite (a `beam_synth` conversation of N
messages in one scope, and BEAM 500K), two child processes, so each suite's peak memory is its own:
- `prepare` fills a benchmark-private embedding cache (WORK/<suite>/embeddings) and measures cold
  embedding throughput on a sample with no cache at all. Document vectors come from the shared cache
  when it has them, else are embedded for real when the suite has at most `--embed-limit` distinct
  texts, else are *seeded*: random unit vectors of the model's dimension stored under the texts' real
  cache keys. A seeded vector costs exactly what a real one costs to load, stack and multiply (the
  cost depends on shapes, not values), but rankings over it mean nothing: the benchmark measures cost,
  never quality, and the report says which vectors were seeded. Cold build time for a suite that was
  not embedded for real is extrapolated from the sample's throughput (said so in the report).
- `measure` runs each variant (bm25, dense, hybrid, exp05, cross_encoder) once over the queries with
  the warm cache (query vectors cached too), recording index build times, per-query and per-stage
  latency, queries per second, and ru_maxrss after each variant; then the embedding cache hit rate of
  a hybrid run and the cost of a second run of it (prefix-candidate cache hit); then bm25s against
  rank-bm25 (build, query throughput, equal rankings).
The parent also times the harness's metric computation against ir_measures on one 10,000-query run.

The cross-encoder rerank is scored without its score cache (the real cost of a rerank). With no
trained model in ./models, the MiniLM bi-encoder weights load as a CrossEncoder with a fresh
classification head: the same architecture and sequence length, so the same latency, meaningless scores.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import resource
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import Any

import ir_measures
import numpy as np
from threadpoolctl import threadpool_limits

from experiments import PROJECT_ROOT
from experiments.benchmarks.pipeline_readme import VARIANTS, write_readme
from experiments.configure.build import pipeline_from_config
from experiments.configure.compose import compose_config
from experiments.evaluate.metrics import per_query
from experiments.suites.beam import load_beam
from experiments.suites.generators.beam_synth import MAX_QUESTIONS_PER_ABILITY, generate
from retrieval.compute import cpu_isa
from retrieval.encoder import (
    MINILM,
    SentenceEncoder,
    _write_npz,
    load_sentence_transformer,
    resolve_model_path,
)
from retrieval.reranker import load_cross_encoder
from retrieval.retrievers.bm25 import BM25Retriever
from retrieval.reuse import CandidateCache
from retrieval.types import Corpus

REPO = PROJECT_ROOT
TRAINED_CE = REPO / "models" / "cross-encoder-beam500k"
METRICS = ("P@5", "P@10", "R@10", "nDCG@10", "RR", "AP")
IR_MEASURES = {"P@5": "P@5", "P@10": "P@10", "R@10": "R@10", "nDCG@10": "nDCG@10", "RR": "RR", "AP": "AP"}


# ------------------------------------------------------------------------------------------ helpers
def percentiles(values: Sequence[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=float)
    if not len(a):
        return {"p50": float("nan"), "p95": float("nan"), "mean": float("nan")}
    return {"p50": float(np.percentile(a, 50)), "p95": float(np.percentile(a, 95)), "mean": float(a.mean())}


def maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def add_wait_quiet(parser: argparse.ArgumentParser) -> None:
    """A benchmark's `--wait-quiet SECONDS` (see `wait_for_quiet`)."""
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=300,
        metavar="SECONDS",
        help="first wait at most this long for the 1-minute load to fall to half the cores (0: no wait)",
    )


def wait_for_quiet(
    max_wait_s: float,
    *,
    below: float | None = None,
    poll_s: float = 5.0,
    load: Callable[[], tuple[float, float, float]] = os.getloadavg,
) -> dict[str, Any]:
    """Wait, at most `max_wait_s`, for the 1-minute load to fall to `below` (default: half the cores),
    printing the load as it waits; then measure either way (the report says which). Returns what
    happened, for the report: seconds waited, the load then, the threshold, whether it was reached."""
    threshold = len(os.sched_getaffinity(0)) / 2 if below is None else below
    started = time.monotonic()
    while True:
        now = load()[0]
        waited = time.monotonic() - started
        quiet = now <= threshold
        if quiet or waited >= max_wait_s:
            return {
                "max_wait_s": max_wait_s,
                "waited_s": round(waited, 1),
                "load_1min": now,
                "threshold": threshold,
                "quiet": quiet,
            }
        print(
            f"waiting for a quiet machine: 1-minute load {now:.2f} > {threshold:.2f} "
            f"({waited:.0f} of at most {max_wait_s:.0f} s)",
            flush=True,
        )
        time.sleep(min(poll_s, max(max_wait_s - waited, 0.0)))


def wait_note(wait: dict[str, Any] | None) -> str:
    """The report's line on the wait for a quiet machine (empty when the run did not wait)."""
    if not wait or not wait["max_wait_s"] or (wait["waited_s"] == 0 and wait["quiet"]):
        return ""
    reached = "reached" if wait["quiet"] else "not reached: measured anyway"
    return (
        f"- Waited {wait['waited_s']:.0f} s for the 1-minute load to fall to {wait['threshold']:.2f} "
        f"({reached}; load {wait['load_1min']:.2f} when measuring began)."
    )


def load_note(info: dict[str, Any]) -> str:
    """One sentence on how loaded the machine was (1-minute load at start and end vs its cores): written
    from the numbers, so a quiet run does not read as a shared one."""
    peak = max(info["loadavg_start"][0], info.get("loadavg_end", [0.0])[0])
    cores = info["nproc"]
    if peak > cores:
        return (
            f"- The {cores} cores were shared (1-minute load up to {peak:.1f}, above the core count): wall "
            "times are inflated by contention; **CPU time** (user + system, all threads of the process) is "
            "the measure judged, wall time beside it."
        )
    return (
        f"- The machine was quiet (1-minute load at most {peak:.1f} on {cores} cores): wall and CPU time "
        "both hold; **CPU time** (user + system, all threads of the process) is the measure judged, as on "
        "a shared box."
    )


def machine() -> dict[str, Any]:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown",
    )
    mem_kb = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal")
    )
    packages = ("torch", "sentence-transformers", "numpy", "bm25s", "rank-bm25", "ir-measures", "mlflow")
    return {
        "date_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu,
        "isa": cpu_isa(),  # the class that decides kernels and OpenVINO's default precision
        "nproc": len(os.sched_getaffinity(0)),
        "ram_gb": round(mem_kb / 1024**2, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": {p: version(p) for p in packages},
        "loadavg_start": list(os.getloadavg()),
    }


def _compose(variant: str, work: Path, ce_model: str | None):
    overrides = [f"variant={variant}", f"cache_dir={work}", "progress=false", "tracking=none"]
    if variant == "cross_encoder":
        overrides += [
            f"stage.cross_encoder.scorer.model={ce_model}",
            "stage.cross_encoder.scorer.cache_dir=null",
        ]
    return compose_config(overrides)


def _pipeline(variant: str, work: Path, ce_model: str | None):

    cfg = _compose(variant, work, ce_model)
    return pipeline_from_config(list(cfg.variant.stages), cfg.stage, depth=cfg.depth)


def _queries(suite, n: int) -> list:
    """`n` query executions: the suite's questions in order, cycled (distinct ids) when there are fewer."""
    base = list(suite.queries)
    return [replace(base[i % len(base)], id=f"{base[i % len(base)].id}#{i}") for i in range(n)]


def _key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ------------------------------------------------------------------------------------------ prepare
def prepare(path: Path, work: Path, *, embed_limit: int, cold_sample: int, shared_cache: Path) -> dict:
    """Fill WORK/embeddings with document and query vectors; measure cold embedding throughput."""
    suite = load_beam(path)
    texts = list(dict.fromkeys(m.text for m in suite.memories))
    encoder = SentenceEncoder(cache_dir=str(work / "embeddings"), show_progress=False)
    t = time.perf_counter()
    model = load_sentence_transformer(encoder.path, encoder.device)
    model_load_s = time.perf_counter() - t
    sample = texts[:cold_sample]
    t = time.perf_counter()
    SentenceEncoder(cache_dir=None, show_progress=False).encode(sample, role="document")
    sample_s = time.perf_counter() - t
    throughput = len(sample) / sample_s

    store = encoder._store("document", "")  # private on purpose: the benchmark seeds its own cache
    missing = [x for x in texts if _key(x) not in store]
    shared = SentenceEncoder(cache_dir=str(shared_cache), show_progress=False)._store("document", "")
    from_shared = {_key(x): shared[_key(x)] for x in missing if _key(x) in shared}
    if from_shared:
        _write_npz(encoder._folder("document", ""), from_shared)
        store.update(from_shared)
    missing = [x for x in missing if _key(x) not in store]
    source = {
        "already_cached": len(texts) - len(missing) - len(from_shared),
        "shared_cache": len(from_shared),
    }
    full_cold_s = None
    if missing and len(texts) <= embed_limit:
        t = time.perf_counter()
        encoder.encode(missing, role="document")
        full_cold_s = time.perf_counter() - t
        source["embedded_now"] = len(missing)
    elif missing:
        rng = np.random.default_rng(0)
        dim = model.get_embedding_dimension()
        for start in range(0, len(missing), 20_000):
            chunk = missing[start : start + 20_000]
            vectors = rng.standard_normal((len(chunk), dim)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            _write_npz(encoder._folder("document", ""), dict(zip(map(_key, chunk), vectors, strict=True)))
        source["seeded"] = len(missing)
    encoder.encode([q.text for q in suite.queries], role="query")  # real query vectors, now cached
    return {
        "distinct_texts": len(texts),
        "model_load_s": model_load_s,
        "cold_sample": len(sample),
        "cold_sample_s": sample_s,
        "cold_texts_per_s": throughput,
        "cold_full_embed_s_measured": full_cold_s,
        "cold_full_embed_s_extrapolated": len(texts) / throughput,
        "vector_source": source,
        "prepare_maxrss_mb": maxrss_mb(),
    }


# ------------------------------------------------------------------------------------------ measure
def _timed_run(pipeline, suite, queries, cache=None) -> tuple[Any, float]:
    t = time.perf_counter()
    output = pipeline.run(
        suite.memories, queries, suite_hash=suite.content_hash if cache else None, cache=cache, progress=False
    )
    return output, time.perf_counter() - t


def _variant_numbers(output, wall_s: float) -> dict[str, Any]:
    latency = [r.latency_ms for r in output.ranked]
    stages: dict[str, list[float]] = {}
    for r in output.ranked:
        for stage, ms in r.timings_ms.items():
            stages.setdefault(stage, []).append(ms)
    return {
        "build_ms": dict(output.build_ms),
        "latency_ms": percentiles(latency),
        "stage_ms": {s: percentiles(v) for s, v in stages.items()},
        # From the timed query path only: one-time costs (index build, hashing the model's weights for a
        # fingerprint on first use) would otherwise swamp a few hundred millisecond-queries.
        "qps": 1000 / float(np.mean(latency)) if latency else float("nan"),
        "wall_s": wall_s,
    }


def _bm25_side_by_side(suite, n_queries: int) -> dict[str, Any]:
    corpus = Corpus(tuple(suite.memories))
    queries = list(suite.queries)[:n_queries]
    out: dict[str, Any] = {"queries": len(queries)}
    hits = {}
    for backend in ("bm25s", "rank_bm25"):
        t = time.perf_counter()
        index = BM25Retriever(backend=backend, top_n=10).build(corpus)
        build_s = time.perf_counter() - t
        t = time.perf_counter()
        hits[backend] = [index.search(q) for q in queries]
        search_s = time.perf_counter() - t
        out[backend] = {"build_s": build_s, "qps": len(queries) / search_s}
    same = ties = 0
    for (ia, sa), (ib, sb) in zip(hits["bm25s"], hits["rank_bm25"], strict=True):
        if np.array_equal(ia, ib):
            same += 1
        elif len(sa) == len(sb) and np.allclose(sa * 2.5, sb, rtol=1e-4):  # bm25s omits (k1 + 1)
            ties += 1  # same scores position by position: the lists differ only among tied documents
    out.update(
        identical_top10=same,
        differ_only_within_ties=ties,
        differ=len(queries) - same - ties,
        qps_ratio=out["bm25s"]["qps"] / out["rank_bm25"]["qps"],
    )
    return out


def _wall_and_cpu(calls) -> dict[str, Any]:
    """Run each zero-argument call once; per call: wall ms and process CPU ms (all threads)."""
    wall, cpu = [], []
    for call in calls:
        w, c = time.perf_counter(), time.process_time()
        call()
        cpu.append((time.process_time() - c) * 1000)
        wall.append((time.perf_counter() - w) * 1000)
    return {"wall_ms": percentiles(wall), "cpu_ms": percentiles(cpu), "calls": len(wall)}


def cpu_time_probes(suite, queries, work: Path, ce_model: str, ce_queries: int) -> dict[str, Any]:
    """The two latency targets again, timed in wall *and* process CPU time. CPU time is what a query
    costs whatever else runs on the machine: on an idle box its wall time is at most its CPU time
    (less when torch or BLAS use both cores), so it bounds the idle latency when the box is shared."""
    pipeline = _pipeline("hybrid", work, ce_model)
    corpus = Corpus(tuple(pipeline.ingest_memories(suite.memories)))
    indexes = [(r.channel, r.build(corpus)) for r in pipeline.retrievers]

    def hybrid(query) -> None:
        pipeline.fusion(corpus, {channel: index.search(query) for channel, index in indexes})

    out = {"hybrid_query": _wall_and_cpu([partial(hybrid, q) for q in queries])}
    # OpenBLAS's default 2 threads for the dense matrix-vector product wait on each other when the
    # cores are shared; one BLAS thread shows what that costs.

    with threadpool_limits(limits=1, user_api="blas"):
        out["hybrid_query_blas1"] = _wall_and_cpu([partial(hybrid, q) for q in queries])
    stage = next(s for s in _pipeline("cross_encoder", work, ce_model).stages if s.name == "cross_encoder")
    heads = []
    for query in queries[:ce_queries]:
        candidates = pipeline.fusion(corpus, {channel: index.search(query) for channel, index in indexes})
        texts = [str(t) for t in candidates.top(stage.top_n).attribute("text")]
        heads.append((query.text, texts))
    out["rerank_16"] = _wall_and_cpu([partial(stage.scorer.score, q, t) for q, t in heads])
    out["rerank_16"]["pairs_per_call"] = stage.top_n
    # What a rerank computes: a batch of 16 pairs padded to its longest pair (at most max_length tokens).

    tokenizer = load_cross_encoder(stage.scorer.path, stage.scorer.max_length, stage.scorer.device).tokenizer
    lengths = [
        [
            len(tokenizer(q, t, truncation=True, max_length=stage.scorer.max_length)["input_ids"])
            for t in texts
        ]
        for q, texts in heads
    ]
    out["rerank_16"]["tokens_per_pair_mean"] = float(np.mean([x for row in lengths for x in row]))
    out["rerank_16"]["padded_tokens_per_call_mean"] = float(np.mean([len(row) * max(row) for row in lengths]))
    out["torch_threads"] = __import__("torch").get_num_threads()
    return out


def measure(
    path: Path, work: Path, *, n_queries: int, ce_model: str, bm25_queries: int, ce_queries: int
) -> dict:
    t = time.perf_counter()
    suite = load_beam(path)
    result: dict[str, Any] = {
        "load_s": time.perf_counter() - t,
        "memories": len(suite.memories),
        "scopes": len({m.scope_key for m in suite.memories}),
        "distinct_queries": len(suite.queries),
        "query_executions": n_queries,
        "variants": {},
        "maxrss_mb_after": {},
    }
    queries = _queries(suite, n_queries)
    result["maxrss_mb_after"]["load"] = maxrss_mb()
    for variant in VARIANTS:
        pipeline = _pipeline(variant, work, ce_model)
        if variant == "cross_encoder":  # load the model before timing, as a warm process would have it
            scorer = next(s for s in pipeline.stages if s.name == "cross_encoder").scorer
            load_cross_encoder(scorer.path, scorer.max_length, scorer.device)
        # The cross-encoder costs ~0.3 s a query on 2 cores: fewer executions keep the run short.
        output, wall = _timed_run(
            pipeline, suite, queries[:ce_queries] if variant == "cross_encoder" else queries
        )
        result["variants"][variant] = _variant_numbers(output, wall)
        result["maxrss_mb_after"][variant] = maxrss_mb()
        del pipeline, output

    # Embedding cache hit rate, and what a second run of the same suite costs (prefix-candidate cache).
    candidates = work / "candidates"
    shutil.rmtree(candidates, ignore_errors=True)
    runs = []
    for _ in range(2):
        pipeline = _pipeline("hybrid", work, ce_model)
        encoder = next(s for s in pipeline.stages if s.name == "dense").encoder
        output, wall = _timed_run(pipeline, suite, queries, CandidateCache(candidates))
        stats = dict(encoder.stats)
        lookups = stats["hits"] + stats["misses"]
        runs.append(
            {
                "wall_s": wall,
                "prefix_cache_hit": output.prefix_cache_hit,
                **stats,
                "hit_rate": stats["hits"] / lookups if lookups else None,
            }
        )
    result["second_run"] = {"first": runs[0], "second": runs[1]}
    result["cpu_time_probes"] = cpu_time_probes(suite, queries, work, ce_model, ce_queries)
    result["bm25_side_by_side"] = _bm25_side_by_side(suite, bm25_queries)
    result["maxrss_mb_after"]["bm25_side_by_side"] = maxrss_mb()
    return result


# ------------------------------------------------------------------------------------------ metrics
def metrics_vs_ir_measures(n_queries: int = 10_000, depth: int = 100, seed: int = 0) -> dict[str, Any]:
    """One seeded graded run of `n_queries` queries: time and compare experiments.evaluate.metrics and
    ir_measures."""
    rng = np.random.default_rng(seed)
    qrels, run, scored = {}, {}, {}
    for i in range(n_queries):
        qid = f"q{i}"
        judged = rng.choice(400, size=int(rng.integers(1, 20)), replace=False)
        qrels[qid] = {f"d{j}": int(rng.integers(0, 3)) for j in judged}
        ranked = [f"d{j}" for j in rng.choice(400, size=depth, replace=False)]
        run[qid] = ranked
        scored[qid] = {d: float(depth - r) for r, d in enumerate(ranked)}
    t = time.perf_counter()
    ours = per_query(qrels, run, list(METRICS))
    ours_s = time.perf_counter() - t
    measures = {ir_measures.parse_measure(v): k for k, v in IR_MEASURES.items()}
    t = time.perf_counter()
    theirs = list(ir_measures.iter_calc(list(measures), qrels, scored))
    theirs_s = time.perf_counter() - t
    max_diff = 0.0
    for m in theirs:
        if m.query_id in ours.index:
            max_diff = max(max_diff, abs(float(ours.at[m.query_id, measures[m.measure]]) - m.value))
    answerable = {q for q, j in qrels.items() if any(g > 0 for g in j.values())}
    return {
        "queries": n_queries,
        "scored_queries": len(ours),
        "answerable": len(answerable),
        "depth": depth,
        "metrics": list(METRICS),
        "harness_s": ours_s,
        "ir_measures_s": theirs_s,
        "time_ratio_ir_measures_over_harness": theirs_s / ours_s,
        "max_abs_difference": max_diff,
        "values_compared": len(theirs),
    }


# ------------------------------------------------------------------------------------------ orchestration
def synth_folder(work: Path, n_messages: int, seed: int) -> Path:
    """One beam_synth conversation of `n_messages` (written once, reused by later runs)."""
    folder = work / "data" / f"synth-{n_messages}-seed{seed}"
    if not (folder / "1" / "probing_questions" / "probing_questions.json").is_file():
        tmp = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        generate(tmp, 1, n_messages, seed, questions_per_ability=MAX_QUESTIONS_PER_ABILITY)
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)
    return folder / "1"


def _child(phase: str, args: argparse.Namespace, path: Path, work: Path) -> dict:
    """Run one phase for one suite in a fresh process (its own peak memory); return its JSON."""
    out = work / f"{phase}.json"
    command = [
        sys.executable,
        "-m",
        "experiments.benchmarks.pipeline",
        "--phase",
        phase,
        "--path",
        str(path),
        "--work",
        str(work),
        "--result",
        str(out),
        "--queries",
        str(args.queries),
        "--embed-limit",
        str(args.embed_limit),
        "--cold-sample",
        str(args.cold_sample),
        "--bm25-queries",
        str(args.bm25_queries),
        "--ce-queries",
        str(args.ce_queries),
        "--shared-cache",
        str(args.shared_cache),
        "--ce-model",
        str(args.ce_model),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    subprocess.run(command, check=True, cwd=REPO, env=env)
    return json.loads(out.read_text())


def cross_encoder_model(work: Path) -> tuple[str, str]:
    """The trained reranker if there is one, else MiniLM weights as an (untrained-head) CrossEncoder."""
    if TRAINED_CE.is_dir():
        return str(TRAINED_CE), "trained (models/cross-encoder-beam500k)"
    folder = work / "ce-minilm-untrained-head"
    if not (folder / "config.json").is_file():
        from sentence_transformers import CrossEncoder  # pulls in torch (~5 s): only to save this model once

        CrossEncoder(resolve_model_path(MINILM), num_labels=1, max_length=128).save(str(folder))
    return str(folder), "MiniLM-L6 weights with an untrained head (same architecture: same latency)"


def _write(results: dict[str, Any], out: Path, note: str) -> None:

    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    write_readme(results, out / "README.md", note=note)


def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "machine": machine(),
        "suites": {},
        "note": args.note,
        "command": "python -m experiments.benchmarks.pipeline " + shlex.join(sys.argv[1:]),
    }
    args.ce_model, results["cross_encoder_model"] = cross_encoder_model(work)
    print("benchmark: metrics vs ir_measures", flush=True)
    results["metrics_vs_ir_measures"] = metrics_vs_ir_measures(args.metric_queries)
    suites = [(f"synth {n:,}", synth_folder(work, n, args.seed), n) for n in args.sizes]
    if args.beam500k:
        suites.append(("BEAM 500K", Path(args.beam500k).resolve(), None))
    for label, path, _ in suites:
        print(f"benchmark: {label} ({path})", flush=True)
        suite_work = work / label.replace(" ", "-").replace(",", "")
        entry = {"path": str(path), "prepare": _child("prepare", args, path, suite_work)}
        entry["measure"] = _child("measure", args, path, suite_work)
        results["suites"][label] = entry
        results["machine"]["loadavg_end"] = list(os.getloadavg())
        _write(
            results, Path(args.out), args.note + " (partial: suites still running)"
        )  # a late stop keeps these
    results["machine"]["loadavg_end"] = list(os.getloadavg())
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[1_000, 10_000, 100_000],
        help="beam_synth conversation sizes (messages, one scope each)",
    )
    parser.add_argument(
        "--beam500k", default=str(REPO.parent / "shared" / "beam" / "500K"), help="BEAM 500K tier folder"
    )
    parser.add_argument("--no-beam500k", dest="beam500k", action="store_const", const=None)
    parser.add_argument("--queries", type=int, default=200, help="query executions per variant")
    parser.add_argument("--ce-queries", type=int, default=30, help="query executions for cross_encoder")
    parser.add_argument("--bm25-queries", type=int, default=50, help="queries for bm25s vs rank-bm25")
    parser.add_argument("--metric-queries", type=int, default=10_000)
    parser.add_argument(
        "--embed-limit",
        type=int,
        default=2_000,
        help="embed for real up to this many distinct texts; seed vectors above it",
    )
    parser.add_argument("--cold-sample", type=int, default=500, help="texts embedded cold, no cache")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", default=str(REPO / ".memeval_cache" / "benchmark"))
    parser.add_argument("--shared-cache", default=str(REPO / ".memeval_cache" / "embeddings"))
    parser.add_argument("--out", default=str(REPO / "reports" / "benchmarks"))
    parser.add_argument("--note", default="", help="free text for the report (e.g. other load on the box)")
    # internal: one phase for one suite, in a child process
    parser.add_argument("--phase", choices=["prepare", "measure"], help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--ce-model", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase:
        work, path = Path(args.work), Path(args.path)
        work.mkdir(parents=True, exist_ok=True)
        if args.phase == "prepare":
            out = prepare(
                path,
                work,
                embed_limit=args.embed_limit,
                cold_sample=args.cold_sample,
                shared_cache=Path(args.shared_cache),
            )
        else:
            out = measure(
                path,
                work,
                n_queries=args.queries,
                ce_model=args.ce_model,
                bm25_queries=args.bm25_queries,
                ce_queries=args.ce_queries,
            )
        Path(args.result).write_text(json.dumps(out, indent=2))
        return 0
    results = run_benchmark(args)
    out = Path(args.out)
    _write(results, out, args.note)
    print(f"benchmark: wrote {out / 'README.md'} and {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
