"""What a live system costs the harness: `python -m experiments.benchmarks.live_system`.

    python -m experiments.benchmarks.live_system                  # BEAM 100K, hybrid; writes the report
    python -m experiments.benchmarks.live_system --repeats 1 --out outputs/live.md     # a quick look

Two figures, both measured in one run of this command, on loopback:
1. Overhead: the same variant scored in process (`Pipeline.run`, no candidate cache) and through
   memeval-serve + the HTTP adapter (`variant=system`, concurrency 1, so each query's wall time is its
   own). Per query: the fastest of `--repeats` interleaved passes of each; the figure is served p50 minus
   in-process p50 (target: at most 10 ms). The served time is the whole round trip: the adapter's
   request, HTTP, the server's JSON, and the server running the variant for that query.
2. Concurrency: memeval-serve serving bm25 with a 50 ms sleep in every search (`--search-delay-ms`),
   asked for every query at concurrency 1 and 4; queries per second of the prefetch (target: 4 gives at
   least 3x the QPS of 1).
CPU seconds beside wall: this process's (the adapter, or the in-process pipeline) and the server's
(from /proc), and the load average at each pass: the machine is shared. Writes reports/benchmarks/
live_system.md with the figures, the machine, the date and the command.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from experiments import PROJECT_ROOT
from experiments.benchmarks.report_paths import report_file
from experiments.track.mlflow_tracker import git_commit
from retrieval.types import Corpus

OVERHEAD_TARGET_MS = 10.0
QPS_TARGET = 3.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Server:
    """memeval-serve in a subprocess on a free loopback port, up until `stop()`."""

    def __init__(self, *args: str, cache_dir: str):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "experiments.serve.cli",
                *args,
                f"cache_dir={cache_dir}",
                "--port",
                str(self.port),
            ],
            cwd=PROJECT_ROOT,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 300
        while True:
            try:
                urllib.request.urlopen(f"{self.url}/health", timeout=2).read()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"memeval-serve {' '.join(args)} did not start") from None
                time.sleep(0.3)

    def cpu_s(self) -> float:
        return _server_cpu_s(self.proc.pid)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def _in_process_pass(pipeline: Any, suite: Any) -> dict[str, Any]:
    """One in-process run over the suite's queries (no candidate cache): per-query ms (the sum of its
    stage timings), wall and CPU seconds of the run (index build included), the load at the start."""
    load = os.getloadavg()[0]
    cpu, wall = time.process_time(), time.perf_counter()
    output = pipeline.run(suite.memories, suite.queries, progress=False)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {
        "per_query_ms": {r.query_id: r.latency_ms for r in output.ranked},
        "ranked": [(r.query_id, tuple(r.memory_ids)) for r in output.ranked],
        "wall_s": wall,
        "cpu_s": cpu,
        "server_cpu_s": None,
        "load_1min": load,
    }


def _served_pass(pipeline: Any, suite: Any, server: Server) -> dict[str, Any]:
    """The suite ingested into the service (untimed), then every query asked at concurrency 1: each
    query's wall time at the service, and the wall and CPU seconds of the searches alone, this process's
    (the adapter) and the server's."""
    index = pipeline.retrievers[0].build(Corpus(tuple(suite.memories)))  # reset, ingest, searchable
    load, server_cpu = os.getloadavg()[0], server.cpu_s()
    cpu, wall = time.process_time(), time.perf_counter()
    index.prefetch(suite.queries)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {
        "per_query_ms": {q.id: index.latency_ms(q) for q in suite.queries},
        "wall_s": wall,
        "cpu_s": cpu,
        "server_cpu_s": server.cpu_s() - server_cpu,
        "load_1min": load,
    }


def overhead(suite_overrides: list[str], variant: str, repeats: int, cache_dir: str) -> dict[str, Any]:
    from experiments.configure.build import build_pipeline
    from experiments.configure.compose import compose_config
    from experiments.configure.settings import load_suite_from_config

    base = [*suite_overrides, "tracking=none", f"cache_dir={cache_dir}"]
    suite = load_suite_from_config(compose_config([*base, f"variant={variant}"]))
    in_process = build_pipeline(compose_config([*base, f"variant={variant}"]))
    server = Server(f"variant={variant}", cache_dir=cache_dir)
    try:
        served = build_pipeline(
            compose_config([*base, "variant=system", f"system.base_url={server.url}", "system.concurrency=1"])
        )
        # Warm-up, both sides (models loaded, embeddings cached), and the rankings compared.
        reference = _in_process_pass(in_process, suite)["ranked"]
        through = served.run(suite.memories, suite.queries, progress=False).ranked
        same = reference == [(r.query_id, tuple(r.memory_ids)) for r in through]
        passes: dict[str, list[dict]] = {"in_process": [], "served": []}
        for _ in range(repeats):  # interleaved: a load spike hits both sides alike
            passes["in_process"].append(_in_process_pass(in_process, suite))
            passes["served"].append(_served_pass(served, suite, server))
    finally:
        server.stop()
    n = len(suite.queries)
    out: dict[str, Any] = {"variant": variant, "n_queries": n, "same_rankings": same}
    for side, runs in passes.items():
        fastest = np.array([min(r["per_query_ms"][q.id] for r in runs) for q in suite.queries])
        out[side] = {
            "p50_ms": float(np.percentile(fastest, 50)),
            "p95_ms": float(np.percentile(fastest, 95)),
            "wall_s": [r["wall_s"] for r in runs],
            "cpu_s": [r["cpu_s"] for r in runs],
            "server_cpu_s": [r["server_cpu_s"] for r in runs],
            "load_1min": [r["load_1min"] for r in runs],
        }
    out["added_p50_ms"] = out["served"]["p50_ms"] - out["in_process"]["p50_ms"]
    # CPU a served search costs, client and server together (the searches alone, no ingest): what the
    # wall time would approach on an idle machine.
    served_cpu = [c + s for c, s in zip(out["served"]["cpu_s"], out["served"]["server_cpu_s"], strict=True)]
    out["served_cpu_ms_per_query"] = min(served_cpu) / n * 1000
    return out


def concurrency(suite_overrides: list[str], delay_ms: float, repeats: int, cache_dir: str) -> dict[str, Any]:
    """QPS of the prefetch at concurrency 1 and 4, `repeats` interleaved passes of each, the fastest kept."""
    from experiments.configure.build import build_pipeline
    from experiments.configure.compose import compose_config
    from experiments.configure.settings import load_suite_from_config

    base = [*suite_overrides, "tracking=none", f"cache_dir={cache_dir}"]
    suite = load_suite_from_config(compose_config([*base, "variant=bm25"]))
    server = Server("variant=bm25", "--search-delay-ms", f"{delay_ms:g}", cache_dir=cache_dir)
    passes: dict[int, list[dict]] = {1: [], 4: []}
    try:
        indexes = {}
        for level in passes:
            cfg = compose_config(
                [*base, "variant=system", f"system.base_url={server.url}", f"system.concurrency={level}"]
            )
            indexes[level] = build_pipeline(cfg).retrievers[0].build(Corpus(tuple(suite.memories)))
        for _ in range(repeats):
            for level, index in indexes.items():
                index._answers.clear()  # ask every query again
                load, cpu, wall = os.getloadavg()[0], time.process_time(), time.perf_counter()
                index.prefetch(suite.queries)
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                passes[level].append({"wall_s": wall, "cpu_s": cpu, "load_1min": load})
    finally:
        server.stop()
    out: dict[str, Any] = {"delay_ms": delay_ms, "n_queries": len(suite.queries), "repeats": repeats}
    for level, runs in passes.items():
        best = min(runs, key=lambda r: r["wall_s"])
        out[f"c{level}"] = {
            "qps": len(suite.queries) / best["wall_s"],
            **best,
            "all_wall_s": [r["wall_s"] for r in runs],
        }
    out["ratio"] = out["c4"]["qps"] / out["c1"]["qps"]
    return out


def report(results: dict[str, Any], command: str) -> str:
    o, c = results["overhead"], results["concurrency"]
    ip, sv = o["in_process"], o["served"]

    def seconds(values: list) -> str:
        return ", ".join(f"{v:.2f}" for v in values if v is not None) or "-"

    met_o = "met" if o["added_p50_ms"] <= OVERHEAD_TARGET_MS else "MISSED"
    met_c = "met" if c["ratio"] >= QPS_TARGET else "MISSED"
    return "\n".join(
        [
            "# Live system: adapter + server overhead, and concurrency",
            "",
            f"Command: `{command}`  ",
            f"Date: {results['date']}; commit {results['commit']}; {results['machine']}.",
            "",
            f"## Loopback overhead ({o['variant']} on BEAM 100K, {o['n_queries']} queries)",
            "",
            "| side | p50 ms | p95 ms | wall s per pass | CPU s per pass (this process) | server CPU s "
            "| load (1 min) |",
            "|---|---|---|---|---|---|---|",
            f"| in process | {ip['p50_ms']:.2f} | {ip['p95_ms']:.2f} | {seconds(ip['wall_s'])} | "
            f"{seconds(ip['cpu_s'])} | - | {seconds(ip['load_1min'])} |",
            f"| memeval-serve + HTTP adapter | {sv['p50_ms']:.2f} | {sv['p95_ms']:.2f} | "
            f"{seconds(sv['wall_s'])} | "
            f"{seconds(sv['cpu_s'])} | {seconds(sv['server_cpu_s'])} | {seconds(sv['load_1min'])} |",
            "",
            f"**Added p50: {o['added_p50_ms']:+.2f} ms per query** (wall; target at most "
            f"{OVERHEAD_TARGET_MS:g} ms: {met_o}). Rankings identical on both sides: {o['same_rankings']}. "
            "Per query, the fastest of "
            f"{len(ip['wall_s'])} interleaved passes of each side (after a warm-up pass of each: models "
            "loaded, embeddings cached); the served time is the whole round trip at concurrency 1, ingest "
            "excluded. In-process wall and CPU are whole runs (index build included); served wall and CPU "
            "are the searches alone (the suite is ingested before each pass, untimed). "
            f"A served search costs {o['served_cpu_ms_per_query']:.2f} ms of CPU, adapter and server "
            "together (the fastest pass): on a shared machine at this load, most of the wall time is "
            "waiting for a core, twice per query (client, then server).",
            "",
            f"## Concurrency (bm25 served with {c['delay_ms']:g} ms per search, {c['n_queries']} queries)",
            "",
            "| concurrency | queries/s | wall s | CPU s (client) | load (1 min) |",
            "|---|---|---|---|---|",
            *(
                f"| {lv} | {c[f'c{lv}']['qps']:.1f} | {c[f'c{lv}']['wall_s']:.2f} | "
                f"{c[f'c{lv}']['cpu_s']:.2f} | {c[f'c{lv}']['load_1min']:.2f} |"
                for lv in (1, 4)
            ),
            "",
            f"**Concurrency 4 gives {c['ratio']:.2f}x the queries per second of concurrency 1** (target at "
            f"least {QPS_TARGET:g}x: {met_c}). The prefetch of every query, measured in this process; the "
            f"fastest of {c['repeats']} interleaved passes of each level (all walls: c1 "
            f"{', '.join(f'{w:.2f}' for w in c['c1']['all_wall_s'])} s; c4 "
            f"{', '.join(f'{w:.2f}' for w in c['c4']['all_wall_s'])} s).",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--beam", default="../shared/beam/100K", help="BEAM tier folder")
    parser.add_argument("--variant", default="hybrid")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--delay-ms", type=float, default=50.0)
    parser.add_argument("--cache-dir", default=str(PROJECT_ROOT / ".memeval_cache"))
    parser.add_argument("--out", default=str(PROJECT_ROOT / "reports" / "benchmarks" / "live_system.md"))
    args = parser.parse_args(argv)
    out = report_file(args.out, "live_system.md")  # a folder or a file, known before minutes of work
    suite = ["suite=beam", f"suite.path={Path(args.beam).resolve()}"]
    results = {
        "date": f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "commit": git_commit()[:10],
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "overhead": overhead(suite, args.variant, args.repeats, args.cache_dir),
        "concurrency": concurrency(suite, args.delay_ms, args.repeats, args.cache_dir),
    }
    command = "python -m experiments.benchmarks.live_system " + shlex.join(
        argv if argv is not None else sys.argv[1:]
    )
    text = report(results, command.strip())
    out.write_text(text)
    out.with_suffix(".json").write_text(json.dumps(results, indent=2, default=str))
    print(text)


if __name__ == "__main__":
    main()
