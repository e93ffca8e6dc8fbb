"""The whole conformance suite's time against memeval-serve: `python -m experiments.benchmarks.conform_speed`.

    python -m experiments.benchmarks.conform_speed                     # bm25 and exp05; writes the report
    python -m experiments.benchmarks.conform_speed --variants bm25 --out outputs/conform_speed.md

For each served variant: memeval-serve started (experiments/benchmarks/live_system.py's `Server`, warmed by
its start-up only), then `memeval-conform system=memeval_serve tracking=none` as a user runs it (the
console script, its start-up included), timed wall to wall, with the client's and the server's CPU
seconds and the load average before and after: the machine is shared, so the wall time is read beside
them. Target: at most 60 s on a 2-core machine. Writes reports/benchmarks/conform.md (+ .json).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from experiments import PROJECT_ROOT
from experiments.benchmarks.live_system import Server
from experiments.track.mlflow_tracker import git_commit

TARGET_S = 60.0


def cpu_kind() -> str:
    """The CPU's model name (/proc/cpuinfo), else the platform's word for it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def one(variant: str, cache_dir: str, n: int) -> dict[str, Any]:
    server = Server(f"variant={variant}", cache_dir=cache_dir)
    try:
        with tempfile.TemporaryDirectory(prefix="conform-speed-") as tmp:
            command = [
                str(Path(sys.executable).parent / "memeval-conform"),
                f"system.base_url={server.url}",
                "tracking=none",
                f"hydra.run.dir={tmp}/run",
            ]
            load_before, server_cpu = os.getloadavg()[0], server.cpu_s()
            children = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            done = subprocess.run(
                command,
                cwd=PROJECT_ROOT,
                capture_output=True,
                text=True,
                env={**os.environ, "HF_HUB_OFFLINE": "1"},
            )
            wall = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if done.returncode not in (0, 1):
                raise SystemExit(f"memeval-conform exited {done.returncode}: {done.stderr[-2000:]}")
            report = json.loads(Path(tmp, "run", "conformance.json").read_text())
        return {
            "variant": variant,
            "pass": n,
            "wall_s": wall,
            "client_cpu_s": (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime),
            "server_cpu_s": server.cpu_s() - server_cpu,
            "load_1min": [load_before, os.getloadavg()[0]],
            "checks": len(report["checks"]),
            "counts": report["counts"],
            "exchanges": sum(len(c["evidence"]) for c in report["checks"]),
        }
    finally:
        server.stop()


def render(results: dict[str, Any], command: str) -> str:
    rows = [
        f"| {r['variant']} | {r['pass']} | {r['checks']} | {r['exchanges']} | {r['wall_s']:.1f} | "
        f"{r['client_cpu_s']:.1f} | "
        f"{r['server_cpu_s']:.1f} | {r['load_1min'][0]:.1f} / {r['load_1min'][1]:.1f} | "
        f"{'met' if r['wall_s'] <= TARGET_S else 'MISSED'} |"
        for r in results["runs"]
    ]
    return "\n".join(
        [
            "# memeval-conform against memeval-serve: the whole suite's time",
            "",
            f"Command: `{command}`  ",
            f"Date: {results['date']}; commit {results['commit']}; {results['machine']}.",
            "",
            "| served variant | pass | checks | exchanges | wall s | client CPU s | server CPU s "
            "| load (1 min) before / after | "
            f"target {TARGET_S:g} s |",
            "|---|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            "Wall: the console script as a user runs it, start-up included, against a memeval-serve "
            "already up. CPU seconds: the client (memeval-conform) and the server over that wall. "
            "The machine is shared: at a load above its cores, the wall is mostly waiting for a core; "
            "CPU seconds are the cost. Each pass starts a new memeval-serve on the same embedding cache "
            "(`--cache-dir`): with a new cache the first pass embeds every text (cold), the next reads them.",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variants", nargs="+", default=["bm25", "exp05"])
    parser.add_argument("--cache-dir", default=str(PROJECT_ROOT / ".memeval_cache"))
    parser.add_argument("--passes", type=int, default=1, help="runs per variant (new cache: first is cold)")
    parser.add_argument("--out", default=str(PROJECT_ROOT / "reports" / "benchmarks" / "conform.md"))
    args = parser.parse_args(argv)
    results = {
        "date": f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "commit": git_commit()[:10],
        "machine": f"{cpu_kind()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "runs": [one(v, args.cache_dir, n) for v in args.variants for n in range(1, args.passes + 1)],
    }
    command = "python -m experiments.benchmarks.conform_speed " + shlex.join(
        argv if argv is not None else sys.argv[1:]
    )
    text = render(results, command.strip())
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    out.with_suffix(".json").write_text(json.dumps(results, indent=2))
    print(text)


if __name__ == "__main__":
    main()
