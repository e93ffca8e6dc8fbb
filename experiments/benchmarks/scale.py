"""What a run costs as the suite grows: `python -m experiments.benchmarks.scale`.

    python -m experiments.benchmarks.scale --suite-path SUITE_DIR --variants bm25,hybrid
    python -m experiments.benchmarks.scale --suite-path S_100K --suite-path S_1M --suite-path S_10M \\
        --variants bm25 --out reports/benchmarks/scale.md          # several sizes: the slope per phase
    python -m experiments.benchmarks.scale --suite-path SUITE_DIR --variants bm25 --shards 4

Each `--suite-path` is a suite folder in the canonical format (`suite=jsonl`; `--suite beam` for a BEAM
tier folder). Each variant runs on it as a subprocess (`python -m experiments.run`, `tracking=none`,
`progress=false`, `resume=false`), twice:
  - cold: a new, empty cache folder (embeddings, candidates, model exports all made by this run);
  - warm: the embeddings the cold run made, a new candidate cache: a re-run whose encoding is cached
    (`--embeddings DIR`: those in DIR instead, e.g. the shared .memeval_cache/embeddings, and no cold run
    is needed for a warm one).
Per run: wall and CPU seconds (the child's user + system, from getrusage), the load average at its start,
and from the run's metrics.json its peak RSS (`resource.peak_rss_mb`) and the wall seconds of each phase
(`timings`). The machine line names the CPU and its instruction-set class (retrieval/compute.py: amx,
avx512, ...), which decides the encoder's speed. With several suite sizes, the report fits each phase's
seconds against the memory count on log-log axes (numpy polyfit): the slope is how the phase grows (1:
linear, 2: quadratic), and draws it (scale.png beside the report).

`--shards N` also runs each variant cold as N shards (`shard=i/N`, a joblib multirun) and reports the
sharded wall (shards plus the merge) over the unsharded cold wall, and whether the merged run's
`IDENTICAL` files equal the unsharded run's byte for byte; it needs the `shard` config key, and says so
(exit 2) where this checkout lacks it. `--shard-jobs N` runs N shards at a time (joblib's `n_jobs`; its
default is one per core): 1 runs them one after another, the same work as the unsharded run plus the
process starts and the merge.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from experiments import PROJECT_ROOT
from experiments.benchmarks.report_paths import portable
from experiments.benchmarks.sweep_cost import _machine, _timed
from experiments.configure.compose import compose_config
from experiments.exit_codes import EXIT_BAD_INPUT
from experiments.track.mlflow_tracker import git_commit
from retrieval.compute import cpu_isa

MODES = ("cold", "warm")
IDENTICAL = ("run.trec", "qrels.tsv")  # what a merged run must equal byte for byte (docs/running_at_scale.md)


def run_once(
    suite: str, path: Path, variant: str, cache: Path, embeddings: Path, out: Path, extra: list[str]
) -> dict[str, Any]:
    """One run as a subprocess: its wall, CPU, load at start, and metrics.json's resource and timings."""
    args = [
        sys.executable, "-m", "experiments.run", f"suite={suite}", f"suite.path={path}", f"variant={variant}",
        "tracking=none", "progress=false", "resume=false", f"cache_dir={cache}",
        f"encoder.cache_dir={embeddings}", f"hydra.run.dir={out}", *extra,
    ]  # fmt: skip
    load = os.getloadavg()[0]
    wall, cpu = _timed(args)
    metrics = json.loads((out / "metrics.json").read_text())
    return {
        "command": shlex.join(["python", *args[1:]]),
        "wall_s": wall,
        "cpu_s": cpu,
        "load_1min": load,
        "memories": metrics["suite"]["memories"],
        "queries": metrics["suite"]["queries"],
        "peak_rss_mb": metrics["resource"]["peak_rss_mb"],
        "timings": metrics.get("timings", {}),
    }


def shard_key_problem(suite: str, path: Path, variant: str) -> str | None:
    """Why `--shards` cannot run here (no `shard` config key), or None."""
    cfg = compose_config([f"suite={suite}", f"suite.path={path}", f"variant={variant}"])
    if "shard" in cfg:
        return None
    return (
        "--shards needs the `shard` config key (shard=i/n: issue #36's sharding by scope), which this "
        "checkout's config does not have; run without --shards"
    )


def sharded_args(
    suite: str, path: Path, variant: str, shards: int, work: Path, extra: list[str], jobs: int | None = None
) -> list[str]:
    """The command of the variant cold as `shards` joblib jobs (`shard=0/n,...`), `jobs` at a time."""
    cache = work / "cache"
    values = ",".join(f"{i}/{shards}" for i in range(shards))
    n_jobs = [f"hydra.launcher.n_jobs={jobs}"] if jobs else []
    return [
        sys.executable, "-m", "experiments.run", "-m", "hydra/launcher=joblib", *n_jobs, f"suite={suite}",
        f"suite.path={path}", f"variant={variant}", f"shard={values}", "tracking=none", "progress=false",
        "resume=false", f"cache_dir={cache}", f"encoder.cache_dir={cache / 'embeddings'}",
        f"hydra.sweep.dir={work / 'shards'}", *extra,
    ]  # fmt: skip


def differing(merged: Path, whole: Path) -> list[str]:
    """The `IDENTICAL` files whose bytes differ between a merged run folder and the unsharded one."""
    return [
        name
        for name in IDENTICAL
        if not (merged / name).is_file() or (merged / name).read_bytes() != (whole / name).read_bytes()
    ]


def run_sharded(
    suite: str, path: Path, variant: str, shards: int, work: Path, extra: list[str], jobs: int | None = None
) -> dict[str, Any]:
    """The variant cold as `shards` joblib jobs, then the merge of their run folders (the sweep's or ours)."""
    args = sharded_args(suite, path, variant, shards, work, extra, jobs)
    wall, cpu = _timed(args)
    # A sharded sweep merges its jobs itself (a sweep callback: merged/<k> in the sweep folder), inside the
    # wall above; where it did not, memeval-merge joins the sweep folder's shards here, timed apart.
    merge_wall = merge_cpu = 0.0
    if not any((work / "shards").glob("merged/*/metrics.json")):
        merge = [str(Path(sys.executable).parent / "memeval-merge"), str(work / "shards"), "--no-tracking"]
        merge_wall, merge_cpu = _timed(merge)
    command = shlex.join(["python", *args[1:]])
    return {
        "command": command,
        "wall_s": wall + merge_wall,
        "cpu_s": cpu + merge_cpu,
        "merge_wall_s": merge_wall,
        "merged": next((work / "shards").glob("merged/*/metrics.json")).parent,
    }


def slopes(rows: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, float]]:
    """(variant, mode) -> {phase: slope of log(seconds) over log(memories)}, where a phase has 2+ sizes."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    for key in dict.fromkeys((r["variant"], r["mode"]) for r in rows):
        runs = [r for r in rows if (r["variant"], r["mode"]) == key]
        phases = dict.fromkeys(p for r in runs for p in [*r["timings"], "wall"])
        for phase in phases:
            points = [
                (r["memories"], r["wall_s"] if phase == "wall" else r["timings"].get(phase)) for r in runs
            ]
            points = [(m, s) for m, s in points if s and s > 0]
            if len({m for m, _ in points}) >= 2:
                x, y = np.log10([m for m, _ in points]), np.log10([s for _, s in points])
                out.setdefault(key, {})[phase] = float(np.polyfit(x, y, 1)[0])
    return out


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Phase seconds against memories on log-log axes, one panel per (variant, mode)."""
    import matplotlib  # only when several sizes are measured: the plot is the one figure

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(dict.fromkeys((r["variant"], r["mode"]) for r in rows))
    fig, axes = plt.subplots(1, len(keys), figsize=(5 * len(keys), 4), squeeze=False)
    for ax, key in zip(axes[0], keys, strict=True):
        runs = sorted((r for r in rows if (r["variant"], r["mode"]) == key), key=lambda r: r["memories"])
        for phase in dict.fromkeys(p for r in runs for p in r["timings"]):
            points = [(r["memories"], r["timings"][phase]) for r in runs if r["timings"].get(phase, 0) > 0]
            if points:
                ax.loglog(*zip(*points, strict=True), marker="o", label=phase)
        ax.set(title=f"{key[0]} ({key[1]})", xlabel="memories", ylabel="wall s")
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _encoding(row: dict[str, Any]) -> str:
    """`memories/s | not-encoding %` cells of a cold run that encoded its memories, else `- | -` (a warm
    run's `encode documents` phase, if any, encodes other texts: tag_inference's tag vocabulary)."""
    seconds = row["timings"].get("encode documents")
    if row["mode"] != "cold" or not seconds:
        return "- | -"
    return f"{row['memories'] / seconds:,.1f} | {100 * (1 - seconds / row['wall_s']):.1f}"


def report(results: dict[str, Any], command: str, figure: str | None) -> str:
    rows = results["runs"]
    phases = list(dict.fromkeys(p for r in rows for p in r["timings"]))
    lines = [
        "# Scale: what a run costs as the suite grows",
        "",
        f"Command: `{command}`  ",
        f"Date: {results['date']}; commit {results['commit']}.  ",
        f"Machine: {results['machine']}; CPU class {results['isa']}.  ",
        f"Load average (1 min) at start {results['load_start']:.2f}, at end {results['load_end']:.2f} (each "
        "run's own in the table: CPU time is the figure a shared machine inflates least).",
        "",
        f"Cold: an empty cache folder. Warm: {results['warm_embeddings']}, a new candidate cache. Peak RSS "
        "and phase seconds are the run's metrics.json (`resource.peak_rss_mb`, `timings`).",
        "",
        "## Runs",
        "",
        "| suite | memories | queries | variant | mode | wall s | CPU s | load (1 min) | peak RSS MB "
        "| encoded memories/s | not encoding % |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *(
            f"| {r['suite']} | {r['memories']:,} | {r['queries']:,} | {r['variant']} | {r['mode']} | "
            f"{r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['load_1min']:.2f} | {r['peak_rss_mb']:,.0f} | "
            f"{_encoding(r)} |"
            for r in rows
        ),
        "",
        "Encoded memories/s: the memories over the `encode documents` phase's seconds (a cold run; a warm "
        "one reads them from the cache); not encoding: the share of the wall outside that phase. `outside "
        "phases` below is the wall before the first phase and after metrics (start-up, imports, writing).",
        "",
        "## Wall seconds per phase",
        "",
        "| suite | variant | mode | " + " | ".join(phases) + " | outside phases |",
        "|---|---|---|" + "---|" * (len(phases) + 1),
        *(
            f"| {r['suite']} | {r['variant']} | {r['mode']} | "
            + " | ".join(f"{r['timings'][p]:.1f}" if p in r["timings"] else "-" for p in phases)
            + f" | {r['wall_s'] - sum(r['timings'].values()):.1f} |"
            for r in rows
        ),
    ]
    fitted = results["slopes"]
    if fitted:
        fitted_phases = list(dict.fromkeys(p for s in fitted.values() for p in s))
        lines += [
            "",
            "## Growth: slope of log(seconds) over log(memories)",
            "",
            "1 is linear, 2 quadratic (numpy polyfit over the sizes measured).",
            "",
            "| variant | mode | " + " | ".join(fitted_phases) + " |",
            "|---|---|" + "---|" * len(fitted_phases),
            *(
                f"| {key.split('/')[0]} | {key.split('/')[1]} | "
                + " | ".join(f"{s[p]:.2f}" if p in s else "-" for p in fitted_phases)
                + " |"
                for key, s in fitted.items()
            ),
        ]
        if figure:
            lines += ["", f"![phase seconds against memories, log-log]({figure})"]
    if results["sharded"]:
        lines += [
            "",
            f"## Sharded ({results['shards']} shards, joblib launcher, merged) against unsharded, cold",
            "",
            "The sharded wall holds the sweep's own merge; `merge apart s` is a merge run after it, where "
            "the sweep did not merge (0 otherwise).",
            "",
            f"Shards at a time: {results.get('shard_jobs') or 'joblib default (one per core)'}. "
            f"Identical: the merged run's {', '.join(IDENTICAL)} equal the unsharded cold run's byte for "
            "byte (else the files that differ).",
            "",
            "| suite | variant | unsharded wall s | sharded + merge wall s | CPU s | merge apart s | ratio "
            "| identical |",
            "|---|---|---|---|---|---|---|---|",
            *(
                f"| {s['suite']} | {s['variant']} | {s['unsharded_wall_s']:.1f} | {s['wall_s']:.1f} | "
                f"{s['cpu_s']:.1f} | {s['merge_wall_s']:.1f} | {s['ratio']:.2f} | "
                f"{'yes' if not s['differing'] else 'no: ' + ', '.join(s['differing'])} |"
                for s in results["sharded"]
            ),
        ]
    lines += ["", "## Commands", "", *(f"- `{r['command']}`" for r in [*rows, *results["sharded"]])]
    return "\n".join([*lines, ""])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suite-path", action="append", required=True, type=Path,
                        help="a suite folder (repeat for several sizes)")  # fmt: skip
    parser.add_argument("--suite", default="jsonl", help="the suite config that reads it (jsonl, beam)")
    parser.add_argument("--variants", default="bm25", help="comma-separated variants, e.g. bm25,hybrid,exp05")
    parser.add_argument("--modes", default="cold,warm", help="cold, warm or both")
    parser.add_argument(
        "--shards", type=int, default=0, help="also run each variant as N shards (needs shard=)"
    )
    parser.add_argument(
        "--shard-jobs", type=int, default=None, help="shards at a time (joblib n_jobs; 1: one after another)"
    )
    parser.add_argument(
        "--embeddings", type=Path, default=None, help="warm runs' embeddings (default: cold's)"
    )
    parser.add_argument("--work", type=Path, default=None, help="scratch folder (default: a new temp folder)")
    parser.add_argument("--out", type=Path, default=PROJECT_ROOT / "reports" / "benchmarks" / "scale.md")
    parser.add_argument("overrides", nargs="*", help="extra config overrides for every run")
    args = parser.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    modes = [m for m in args.modes.split(",") if m]
    if set(modes) - set(MODES) or not modes:
        parser.error(f"--modes: one or both of {', '.join(MODES)}, got {args.modes!r}")
    for path in args.suite_path:
        if not path.is_dir():
            parser.error(f"--suite-path {path}: not a folder")
    if args.shards:
        problem = shard_key_problem(args.suite, args.suite_path[0].resolve(), variants[0])
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            raise SystemExit(EXIT_BAD_INPUT)
    work = args.work or Path(tempfile.mkdtemp(prefix="memeval-scale-"))
    load_start = os.getloadavg()[0]
    rows: list[dict[str, Any]] = []
    sharded: list[dict[str, Any]] = []
    for size, path in enumerate(args.suite_path):
        path = path.resolve()
        for variant in variants:
            base = work / f"{size}-{variant}"
            # the cold run's, which the warm run reuses, unless --embeddings names a warm folder
            embeddings = args.embeddings or base / "cold" / "cache" / "embeddings"
            for mode in ("cold", "warm"):
                if mode not in modes and not (mode == "cold" and "warm" in modes and not args.embeddings):
                    continue
                where = base / mode
                warmed = embeddings if mode == "warm" else where / "cache" / "embeddings"
                row = run_once(
                    args.suite, path, variant, where / "cache", warmed, where / "run", args.overrides
                )
                if mode in modes:
                    rows.append({"suite": path.name, "variant": variant, "mode": mode, **row})
            if args.shards:
                cold = next(
                    r for r in rows if (r["suite"], r["variant"], r["mode"]) == (path.name, variant, "cold")
                )
                done = run_sharded(
                    args.suite, path, variant, args.shards, base / "sharded", args.overrides, args.shard_jobs
                )
                merged = done.pop("merged")
                sharded.append(
                    {
                        "suite": path.name,
                        "variant": variant,
                        **done,
                        "unsharded_wall_s": cold["wall_s"],
                        "ratio": done["wall_s"] / cold["wall_s"],
                        "differing": differing(merged, base / "cold" / "run"),
                    }
                )
    fitted = slopes(rows)
    results = {
        "date": f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "commit": git_commit()[:10],
        "machine": _machine(),
        "isa": cpu_isa(),
        "load_start": load_start,
        "load_end": os.getloadavg()[0],
        "runs": rows,
        "slopes": {f"{v}/{m}": s for (v, m), s in fitted.items()},
        "shards": args.shards,
        "shard_jobs": args.shard_jobs,
        "warm_embeddings": f"the embeddings in {args.embeddings}"
        if args.embeddings
        else "the cold run's embeddings",
        "sharded": sharded,
    }
    figure = None
    if fitted:
        figure = args.out.with_suffix(".png").name
        args.out.parent.mkdir(parents=True, exist_ok=True)
        plot(rows, args.out.with_suffix(".png"))
    command = "python -m experiments.benchmarks.scale " + shlex.join(
        argv if argv is not None else sys.argv[1:]
    )
    text = portable(report(results, command.strip(), figure), work)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    args.out.with_suffix(".json").write_text(portable(json.dumps(results, indent=2), work))
    print(text)


if __name__ == "__main__":
    main()
