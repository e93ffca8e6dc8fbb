"""What a sweep costs compared with one run: `python -m experiments.sweep_benchmark`.

    python -m experiments.sweep_benchmark                     # exp05 boost weight, 21 points, BEAM 100K
    python -m experiments.sweep_benchmark --sweep stage.fusion.k=20,40,60 --variant hybrid

Times, as subprocesses from the repository root (so the shared `.memeval_cache/` is used), after one
warm-up run that fills the embedding and candidate caches (both measurements start warm):
  1. one run of the variant (`python -m experiments.run ...`), `--repeats` times (median kept);
  2. the multirun over the sweep with the basic launcher (all jobs in one process), `resume=false`
     so no job is skipped.
The figure is sweep wall time / single-run wall time (target: at most 1.5). CPU seconds of the child
processes are reported too: on a shared machine the wall time is noisy, CPU time much less so.
Writes reports/benchmarks/sweep_cost.md with the figures, the machine, the date and the commands.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from experiments.tracking import git_commit

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SWEEP = "stage.instruction_boost.weight=range(0,0.525,0.025)"
TARGET_RATIO = 1.5


def _timed(args: list[str]) -> tuple[float, float]:
    """(wall s, child CPU s) of one subprocess run from the repository root; fails loudly."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(args, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"command failed ({proc.returncode}): {' '.join(args)}\n{proc.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    system = f"{platform.system()} {platform.release()}"
    return f"{cpu}, {os.cpu_count()} logical cores, {system}, Python {platform.python_version()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--suite", default="beam")
    parser.add_argument("--suite-path", default="../shared/beam/100K")
    parser.add_argument("--variant", default="exp05")
    parser.add_argument("--sweep", default=DEFAULT_SWEEP, help="one Hydra sweep override")
    parser.add_argument("--repeats", type=int, default=2, help="timed single runs (median kept)")
    parser.add_argument("--out", default="reports/benchmarks/sweep_cost.md")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="sweep_benchmark.") as tmp:
        common = [
            f"suite={args.suite}",
            f"suite.path={args.suite_path}",
            f"variant={args.variant}",
            "tracking=none",
            "progress=false",
        ]
        single = [sys.executable, "-m", "experiments.run", *common, f"hydra.run.dir={tmp}/single"]
        multirun = [
            sys.executable,
            "-m",
            "experiments.run",
            "-m",
            *common,
            args.sweep,
            "resume=false",
            f"hydra.sweep.dir={tmp}/sweep",
        ]
        load_before = os.getloadavg()
        print("warm-up run (fills the embedding and candidate caches)...", flush=True)
        _timed(single)
        singles = []
        for i in range(args.repeats):
            singles.append(_timed(single))
            print(f"single run {i + 1}: {singles[-1][0]:.1f} s wall, {singles[-1][1]:.1f} s CPU", flush=True)
        print("sweep...", flush=True)
        sweep_wall, sweep_cpu = _timed(multirun)
        jobs = sorted(p for p in Path(tmp, "sweep").iterdir() if (p / "metrics.json").is_file())
        load_after = os.getloadavg()

    single_wall = statistics.median(w for w, _ in singles)
    single_cpu = statistics.median(c for _, c in singles)
    ratio, cpu_ratio = sweep_wall / single_wall, sweep_cpu / single_cpu
    verdict = "meets" if ratio <= TARGET_RATIO else "misses"
    print(f"sweep of {len(jobs)} jobs: {sweep_wall:.1f} s wall ({ratio:.2f}x one run), CPU {cpu_ratio:.2f}x")

    shown_single = "python -m experiments.run " + " ".join(common)
    shown_sweep = "python -m experiments.run -m " + " ".join([*common, args.sweep, "resume=false"])
    command = " ".join(
        ["python -m experiments.sweep_benchmark", *(argv if argv is not None else sys.argv[1:])]
    )
    report = f"""# Sweep cost: a {len(jobs)}-point sweep vs one run

Generated by `{command}` — do not edit by hand.

| | wall s | CPU s (child processes) |
|---|---:|---:|
| one run of `{args.variant}` (median of {len(singles)}) | {single_wall:.1f} | {single_cpu:.1f} |
| sweep, {len(jobs)} jobs, basic launcher | {sweep_wall:.1f} | {sweep_cpu:.1f} |
| **ratio** | **{ratio:.2f}x** | {cpu_ratio:.2f}x |

Target: at most {TARGET_RATIO}x the wall time of one run — this measurement **{verdict}** it.

- One run: `{shown_single}`
- Sweep: `{shown_sweep}`
- Both start warm (a warm-up run first fills the embedding cache and the prefix-candidate cache), with
  `tracking=none` (MLflow logging adds a fixed cost per job; see docs/sweeps.md).
- Why a sweep costs little more than one run: all jobs run in one process (imports once), the suite
  is loaded once, the ingested corpus and the candidates after every stage are memoised in the process
  by fingerprint, so each job re-runs only the stages from the first one whose config changed
  (`instruction_boost` onwards) and the evaluation.
- Machine: {_machine()}. Load average before/after: {load_before[0]:.1f} / {load_after[0]:.1f}
  (the machine is shared: wall times are noisy, CPU seconds less so).
- Date: {datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}; commit {git_commit()[:12]}.
"""
    out = REPO / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
