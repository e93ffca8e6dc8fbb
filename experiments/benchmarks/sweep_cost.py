"""What a sweep costs compared with one run: `python -m experiments.benchmarks.sweep_cost`.

    python -m experiments.benchmarks.sweep_cost                     # exp05 boost weight, 21 points, BEAM 100K
    python -m experiments.benchmarks.sweep_cost --sweep stage.fusion.k=20,40,60 --variant hybrid
    python -m experiments.benchmarks.sweep_cost --suite-path S_10M --no-mlflow --study '' \\
        encoder.backend=openvino-int8                               # extra overrides go to every run

Times, as subprocesses from the repository root, one run of the variant (`python -m experiments.run`)
against the multirun over the sweep with memeval's launcher (Hydra's basic launcher composing each job
once: hydra_plugins/memeval_launcher; all jobs in one process, `resume=false`
so no job is skipped), two ways:
  - warm: with the shared `.memeval_cache/` after a warm-up run (embeddings and retrieval candidates
    cached for both; the single run is `--repeats` times, median kept);
  - cold (`--cold`, off by default: it embeds the corpus twice, ~20 min on a busy 2-core machine):
    each with its own empty cache directory, as the first sweep of a new variant or suite is.
Warm, it times both without tracking (`tracking=none`) and with the default tracking (`--mlflow`, on by
default): MLflow's SQLite store `./mlflow.db` and `./mlruns`, in a scratch working directory, created by the
warm-up run. Warm, it also times the same points as a study (`--study`, default `boost_sweep21_beam100k`:
`python -m experiments.study`, one process, rows sharing the retrieval prefix through the process memo),
with a cache folder that shares the warm embeddings and candidates but not the finished-run index, so
every row runs. The figure is sweep wall time / single-run wall time (target: at most 2). CPU seconds
of the child processes are reported too: on a shared machine the wall time is noisy, CPU time much less so.
Writes reports/benchmarks/sweep_cost.md with the figures, the machine, the date and the commands.
"""

from __future__ import annotations

import argparse
import json
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

from experiments import PROJECT_ROOT
from experiments.benchmarks.pipeline import add_wait_quiet, wait_for_quiet, wait_note
from experiments.benchmarks.report_paths import portable
from experiments.configure.compose import compose_config
from experiments.track.mlflow_tracker import git_commit

REPO = PROJECT_ROOT
DEFAULT_SWEEP = "stage.instruction_boost.weight=range(0,0.525,0.025)"
TARGET_RATIO = 2.0


def _timed(args: list[str], cwd: Path = REPO) -> tuple[float, float]:
    """(wall s, child CPU s) of one subprocess run (from the repository root by default); fails loudly."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True)
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


def _measure_study(tmp: Path, plan: str) -> dict:
    """One warm study run: embeddings and candidates shared, no finished rows to reuse (all rows run)."""
    cache = tmp / "study_cache"
    cache.mkdir(parents=True)
    for part in ("embeddings", "candidates", "models"):
        if (REPO / ".memeval_cache" / part).exists():
            (cache / part).symlink_to((REPO / ".memeval_cache" / part).resolve())
    args = [sys.executable, "-m", "experiments.study", f"study={plan}", "tracking=none", "progress=false"]
    wall, cpu = _timed([*args, f"cache_dir={cache}", f"runs_root={tmp}/runs", f"output_dir={tmp}/out"])
    rows = sum(1 for p in Path(tmp, "runs").glob("*/*") if (p / "metrics.json").is_file())
    print(f"study {plan}: {rows} rows, {wall:.1f} s wall, {cpu:.1f} s CPU", flush=True)
    return {"plan": plan, "wall": wall, "cpu": cpu, "rows": rows}


def _measure(
    tmp: Path, common: list[str], sweep: str, repeats: int, cache_dir: str | None, cwd: Path = REPO
) -> dict:
    """Single runs and one sweep; with `cache_dir`, every command gets its own empty cache under it."""
    run = [sys.executable, "-m", "experiments.run"]
    cwd.mkdir(parents=True, exist_ok=True)

    def cache(name: str) -> list[str]:
        return [f"cache_dir={cache_dir}/{name}"] if cache_dir else []

    singles, sweeps = [], []
    if cache_dir is None:
        print("warm-up run (fills the embedding and candidate caches)...", flush=True)
        _timed([*run, *common, f"hydra.run.dir={tmp}/warmup"], cwd)
    # Warm, a single run and the sweep alternate, `repeats` pairs: the shared machine's speed drifts by
    # tens of percent over minutes, and each pair meets the same drift. Cold: one pair.
    for i in range(repeats if cache_dir is None else 1):
        singles.append(_timed([*run, *common, *cache(f"single{i}"), f"hydra.run.dir={tmp}/single{i}"], cwd))
        name = "sweep" if i == 0 else f"sweep{i}"
        sweeps.append(
            _timed(
                [*run, "-m", *common, sweep, "resume=false", *cache(name), f"hydra.sweep.dir={tmp}/{name}"],
                cwd,
            )
        )
        print(
            f"pair {i + 1}: single {singles[-1][0]:.1f} s wall, {singles[-1][1]:.1f} s CPU; "
            f"sweep {sweeps[-1][0]:.1f} s wall, {sweeps[-1][1]:.1f} s CPU",
            flush=True,
        )
    wall = statistics.median(w for w, _ in sweeps)
    cpu = statistics.median(c for _, c in sweeps)
    jobs = [p for p in Path(tmp, "sweep").iterdir() if (p / "metrics.json").is_file()]
    jobs.sort(key=lambda p: int(p.name))
    inside = [json.loads((p / "metrics.json").read_text())["wall_s"] for p in jobs]
    single_wall = statistics.median(w for w, _ in singles)
    single_cpu = statistics.median(c for _, c in singles)
    pairs = ", ".join(f"{w / sw:.2f}x" for (sw, _), (w, _) in zip(singles, sweeps, strict=True))
    print(f"sweep of {len(jobs)} jobs: {wall:.1f} s wall (pairs: {pairs} one run)", flush=True)
    return {
        "single_wall": single_wall,
        "single_cpu": single_cpu,
        "n_single": len(singles),
        "n_sweep": len(sweeps),
        "sweep_wall": wall,
        "sweep_cpu": cpu,
        "jobs": len(jobs),
        "inside": inside,
        # the median over the pairs of sweep / single (each pair timed back to back)
        "ratio": statistics.median(w / sw for (sw, _), (w, _) in zip(singles, sweeps, strict=True)),
        "cpu_ratio": statistics.median(c / sc for (_, sc), (_, c) in zip(singles, sweeps, strict=True)),
        "ratios": [w / sw for (sw, _), (w, _) in zip(singles, sweeps, strict=True)],
    }


def _compose_cpu_s(overrides: list[str], repeats: int = 5) -> float:
    """CPU seconds Hydra takes to compose this config once (Hydra's basic launcher: twice per job)."""
    compose_config(overrides, hydra_node=True)  # warm imports
    started = time.process_time()
    for _ in range(repeats):
        compose_config(overrides, hydra_node=True)
    return (time.process_time() - started) / repeats


def _rows(name: str, m: dict, variant: str) -> str:
    return (
        f"| {name}: one run of `{variant}` (median of {m['n_single']}) | {m['single_wall']:.1f} | "
        f"{m['single_cpu']:.1f} | |\n"
        f"| {name}: sweep, {m['jobs']} jobs, memeval launcher (median of {m['n_sweep']}) | "
        f"{m['sweep_wall']:.1f} | {m['sweep_cpu']:.1f} | "
        f"**{m['ratio']:.2f}x** wall, {m['cpu_ratio']:.2f}x CPU — "
        f"{'meets' if m['ratio'] <= TARGET_RATIO else 'misses'} the target "
        f"(pairs by wall: {', '.join(f'{r:.2f}x' for r in m['ratios'])}) |\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--suite", default="beam")
    parser.add_argument("--suite-path", default="../shared/beam/100K")
    parser.add_argument("--variant", default="exp05")
    parser.add_argument("--sweep", default=DEFAULT_SWEEP, help="one Hydra sweep override")
    parser.add_argument("--repeats", type=int, default=2, help="timed warm single runs (median kept)")
    parser.add_argument("--cold", action=argparse.BooleanOptionalAction, default=False)
    parser.add_argument(
        "--mlflow",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time both warm with the default MLflow tracking (a SQLite store in a scratch folder)",
    )
    parser.add_argument("--study", default="boost_sweep21_beam100k", help="study plan timed warm ('' skips)")
    parser.add_argument("--out", default="reports/benchmarks/sweep_cost.md")
    parser.add_argument(
        "overrides", nargs="*", help="overrides for every run (e.g. encoder.backend=openvino-int8)"
    )
    add_wait_quiet(parser)
    args = parser.parse_args(argv)

    common = [
        f"suite={args.suite}",
        f"suite.path={args.suite_path}",
        f"variant={args.variant}",
        "tracking=none",
        "progress=false",
        *args.overrides,
    ]
    wait = wait_for_quiet(args.wait_quiet)
    load_before = os.getloadavg()
    # With tracking: the config's default store (./mlflow.db, ./mlruns) in a scratch working directory, so
    # paths the commands share with the repository are given absolute.
    tracked = [
        *(o for o in common if o != "tracking=none" and not o.startswith("suite.path=")),
        f"suite.path={(REPO / args.suite_path).resolve()}",
        f"cache_dir={REPO / '.memeval_cache'}",
    ]
    with tempfile.TemporaryDirectory(prefix="sweep_benchmark.") as tmp:
        warm = _measure(Path(tmp, "warm"), common, args.sweep, args.repeats, None)
        mlflow = (
            _measure(Path(tmp, "mlflow"), tracked, args.sweep, args.repeats, None, Path(tmp, "home"))
            if args.mlflow
            else None
        )
        study = _measure_study(Path(tmp, "study"), args.study) if args.study else None
        cold = _measure(Path(tmp, "cold"), common, args.sweep, 1, f"{tmp}/caches") if args.cold else None
    load_after = os.getloadavg()

    inside = warm["inside"]
    compose_s = _compose_cpu_s([o for o in common if not o.startswith("progress")])
    extra_jobs = max(warm["jobs"] - 1, 1)
    per_job_cpu = (warm["sweep_cpu"] - warm["single_cpu"]) / extra_jobs
    budget_cpu = (TARGET_RATIO - 1) * warm["single_cpu"] / extra_jobs
    per_job = warm["sweep_wall"] / max(warm["jobs"], 1)
    command = " ".join(
        ["python -m experiments.benchmarks.sweep_cost", *(argv if argv is not None else sys.argv[1:])]
    )
    cold_note = (
        " cold: each command starts from its own empty `cache_dir`, as the first sweep of a new variant"
        " or suite does."
        if cold
        else " Not measured here: cold (`--cold`, each side embedding the corpus from an empty cache)."
    )
    table = _rows("warm", warm, args.variant)
    table += _rows("warm, MLflow tracking", mlflow, args.variant) if mlflow else ""
    table += _rows("cold", cold, args.variant) if cold else ""
    mlflow_note = (
        "\n- warm, MLflow tracking: the same commands without `tracking=none`, so each run and each sweep"
        " job logs to MLflow as by default: a SQLite store `./mlflow.db` with `./mlruns`, made by the warm-up"
        " run in a scratch working directory (the suite path and `cache_dir` given absolute). Each sweep job"
        f" adds {(mlflow['sweep_cpu'] - mlflow['single_cpu']) / extra_jobs:.2f} s of CPU there, against"
        f" {per_job_cpu:.2f} s untracked: MLflow's own work per run (its SQLAlchemy store creating the run,"
        " one batch of params and metrics, the files as artifacts, the dataset input, the end status)."
        if mlflow
        else " Not measured here: with MLflow tracking (`--mlflow`)."
    )
    if study:
        ratio, cpu_ratio = study["wall"] / warm["single_wall"], study["cpu"] / warm["single_cpu"]
        table += (
            f"| warm: study `{study['plan']}`, {study['rows']} rows, one process (report included) | "
            f"{study['wall']:.1f} | {study['cpu']:.1f} | **{ratio:.2f}x** wall, {cpu_ratio:.2f}x CPU — "
            f"{'meets' if ratio <= TARGET_RATIO else 'misses'} the target |\n"
        )
    study_note = (
        f"\n- Study: `python -m experiments.study study={study['plan']} tracking=none progress=false` with a"
        " cache folder holding the warm embeddings and candidates but no finished-run index (every row runs)."
        if study
        else ""
    )
    wait_line = f"{note}\n" if (note := wait_note(wait)) else ""
    report = f"""# Sweep cost: a {warm["jobs"]}-point sweep vs one run

Generated by `{command}` — do not edit by hand.

| | wall s | CPU s (child processes) | sweep / one run |
|---|---:|---:|---|
{table}
Target: a sweep costs at most {TARGET_RATIO}x the wall time of one run of the same variant. Each figure is the
median, over {warm["n_single"]} pairs timed back to back (a single run, then the sweep), of sweep / single;
the times in the table are medians of each side.

- One run: `python -m experiments.run {" ".join(common)}`
- Sweep: `python -m experiments.run -m {" ".join(common)} {args.sweep} resume=false`{study_note}
- warm: both use the shared `.memeval_cache/` after a warm-up run (embeddings and retrieval candidates
  cached), `tracking=none`.{cold_note}{mlflow_note}
- Where a warm sweep job's time goes: {per_job:.2f} s wall per job on average, of which
  {statistics.mean(inside) if inside else float("nan"):.2f} s inside the run (pipeline from the first
  changed stage on, plus evaluation: `wall_s` in each job's metrics.json; first job
  {inside[0] if inside else float("nan"):.2f} s) and the rest outside it (checking and hashing the config,
  Hydra saving each job's config and log, the run files written).
- Why (CPU, steadier than wall here): one warm run costs {warm["single_cpu"]:.1f} s, mostly process
  start, imports and loading the suite, since its retrieval prefix is cached on disk. Each further job
  of the sweep adds {per_job_cpu:.2f} s; to stay within {TARGET_RATIO}x, {extra_jobs} more jobs could
  add {budget_cpu:.2f} s each. A full Hydra composition costs {compose_s:.2f} s (measured here): Hydra's
  basic launcher composes every job twice (to validate the batch, then to launch it), i.e.
  {2 * compose_s:.2f} s a job; memeval's launcher composes once per sweep and sets each job's values.
- What a sweep shares: all jobs run in one process (imports once), the suite is loaded once, and the
  ingested corpus, indexes and candidates after the retrieval prefix and after every rank stage are
  memoised by fingerprint, so each job re-runs only the stages from the first one whose config
  changed (`instruction_boost` onwards) and the evaluation.
- Machine: {_machine()}. Load average before/after: {load_before[0]:.1f} / {load_after[0]:.1f}
  (the machine is shared: wall times are noisy, CPU seconds less so).
{wait_line}- Date: {datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}; commit {git_commit()[:12]}.
"""
    out = REPO / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(portable(report))  # committed: the suite and cache paths of this machine by name only
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
