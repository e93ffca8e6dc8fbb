"""`memeval-report` / `python -m experiments.compare`: reports/<name>/ from MLflow runs or run directories.

    memeval-report --name exp05_sweep --experiment exp05 --tag suite=beam
    memeval-report --name sweep --parent 1f2e...      # the children of one multirun parent run
    memeval-report --name sweep --sweep-dir multirun/exp05_sweep   # the same, found from the sweep folder
    memeval-report --name local --run-dir outputs/beam/hybrid/... --run-dir outputs/beam/bm25/...

`--command` (repeatable) records how the runs were produced; the report command itself is added.
Exit 2 when the runs cannot be compared (none found, other suite versions, missing metrics), or a
skipped sweep job's reused run cannot be read. Exit 1 when the report was written over fewer runs than
were asked for (failed or killed sweep jobs, reused runs no longer finished): the report lists them.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from experiments.compare.drilldown import DrilldownOptions

from experiments.evaluate.statistics import TEST_NAMES
from experiments.exit_codes import ArgumentParser, console_script
from experiments.names import name_problem, under_root
from experiments.track.finished_runs import (
    RunError,
    find_run_dirs,
    load_mlflow_runs,
    load_run_dir,
    missing_children,
    missing_run_dirs,
    unique_runs,
)


def _tag(text: str) -> str:
    """A --tag filter, KEY=VALUE: one without a key and `=` would filter nothing, silently."""
    if text.partition("=")[0] == "" or "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return text


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = ArgumentParser(prog="memeval-report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", required=True, help="report folder: <out-root>/<name>/")
    parser.add_argument("--title", help="report title (default: the name)")
    parser.add_argument("--out-root", type=Path, default=Path("reports"))
    source = parser.add_argument_group("runs (MLflow selectors combine; or run directories)")
    source.add_argument("--experiment", help="MLflow experiment name")
    source.add_argument("--parent", help="MLflow parent run id: its child runs")
    source.add_argument(
        "--sweep-dir", type=Path, help="a Hydra multirun folder: its MLflow parent's children"
    )
    source.add_argument(
        "--tag", action="append", default=[], type=_tag, metavar="KEY=VALUE", help="MLflow run tag filter"
    )
    source.add_argument("--tracking-uri", help="MLflow store (default MLFLOW_TRACKING_URI, else ./mlflow.db)")
    source.add_argument(
        "--run-dir", action="append", type=Path, default=[], help="a run dir, or a folder searched for them"
    )
    parser.add_argument(
        "--baseline",
        help="run label or variant compared against (default: a sweep's lowest setting, else the "
        "`baseline` or `hybrid` variant, else the first run)",
    )
    parser.add_argument(
        "--reference", action="append", default=[], metavar="RUN",
        help="another run label or variant every run is compared against too (repeatable; one Holm family)",
    )  # fmt: skip
    parser.add_argument(
        "--unit", choices=["auto", "cluster", "query"], default="auto",
        help="what the bootstrap and the paired test resample (default auto: whole conversations where "
        "the suite has several queries per conversation)",
    )  # fmt: skip
    parser.add_argument("--metrics", nargs="+", help="metrics in the table (default: all in the runs)")
    parser.add_argument(
        "--primary",
        help="metric for curves per label, heat map, wins/losses, drill-down "
        "(default: the suite config's `primary` when the runs have it, else the first metric)",
    )
    parser.add_argument("--label", help="label for per-label views (default: the suite's report_label)")
    parser.add_argument("--test", choices=sorted(TEST_NAMES), default="randomization")
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--keep-repeats", action="store_true", help="keep earlier runs of an identical config"
    )
    parser.add_argument("--command", action="append", default=[], help="command that produced the runs")
    drill = parser.add_argument_group("per-query drill-down (the report's last section)")
    drill.add_argument(
        "--drilldown", type=int, default=3, metavar="N",
        help="the N biggest wins and N biggest losses of each run against the baseline (default 3; 0: none)",
    )  # fmt: skip
    drill.add_argument(
        "--queries", action="append", default=[], metavar="ID[,ID...]",
        help="also drill into these query ids (comma-separated, repeatable)",
    )  # fmt: skip
    return parser.parse_args(argv)


@console_script
def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    problem = name_problem("report", args.name)
    if problem is not None:  # before any run is read: the name is the report's folder
        print(f"report error: --name: {problem}", file=sys.stderr)
        return 2
    from experiments.compare.assemble import build_report  # after parsing: it pulls in matplotlib (~0.5 s)

    tags = dict(t.split("=", 1) for t in args.tag)
    try:
        if args.sweep_dir:
            from experiments.track.sweep_parent import PARENT_FILE, read_parent  # 85 modules: when asked for

            if not args.sweep_dir.is_dir():
                raise RunError(f"--sweep-dir {args.sweep_dir}: no such folder")
            parent = read_parent(args.sweep_dir)
            if not parent:
                raise RunError(f"{args.sweep_dir} has no {PARENT_FILE}: not a multirun logged to MLflow")
            args.parent, args.tracking_uri = parent["parent_run_id"], args.tracking_uri or parent["uri"]
        missing: list[str] = []
        if args.run_dir:
            runs = unique_runs([load_run_dir(p) for p in find_run_dirs(args.run_dir)])
            missing = missing_run_dirs(args.run_dir)
            source = "run directories"
        elif args.experiment or args.parent or tags:
            runs = load_mlflow_runs(
                experiment=args.experiment, parent_run_id=args.parent, tags=tags, uri=args.tracking_uri
            )
            if args.parent:
                missing = missing_children(args.parent, args.tracking_uri)
            selector = [f"experiment {args.experiment}"] * bool(args.experiment)
            selector += [f"parent run {args.parent}"] * bool(args.parent)
            selector += [f"tag {k}={v}" for k, v in tags.items()]
            source = "MLflow: " + ", ".join(selector)
        else:
            print("error: give --run-dir, or an MLflow --experiment / --parent / --tag", file=sys.stderr)
            return 2
        this = "python -m experiments.compare " + shlex.join(
            _without_commands(sys.argv[1:] if argv is None else argv)
        )
        if args.command:  # quoting a quoted command makes it unreadable: it stands just above
            this += "  # + --command '<line>' for each line above"
        out_dir = under_root(args.out_root, args.name)
        comp = build_report(
            runs, out_dir, title=args.title or args.name, baseline=args.baseline, metrics=args.metrics,
            primary=args.primary, label=args.label, test=args.test, alpha=args.alpha, seed=args.seed,
            unit=args.unit, references=args.reference, commands=[*args.command, this], source=source,
            keep_repeats=args.keep_repeats, missing=missing, drilldown=drilldown_options(args),
        )  # fmt: skip
    except (RunError, ValueError, KeyError) as err:
        print(f"report error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {out_dir}/report.md and index.html: {len(comp.runs)} runs, baseline {comp.baseline}")
    if missing:
        print(
            f"report error: {len(missing)} run(s) asked for are not in the report (listed in it):\n  "
            + "\n  ".join(missing),
            file=sys.stderr,
        )
        return 1
    return 0


def drilldown_options(args: argparse.Namespace) -> DrilldownOptions | None:
    from experiments.compare.drilldown import DrilldownOptions  # after parsing, as build_report below

    if args.drilldown < 0:
        raise ValueError(f"--drilldown must be 0 or more, got {args.drilldown}")
    queries = tuple(dict.fromkeys(q for text in args.queries for q in text.split(",") if q))
    return DrilldownOptions(args.drilldown, queries) if args.drilldown or queries else None


def _without_commands(argv: Sequence[str]) -> list[str]:
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--command":
            skip = True
        elif not arg.startswith("--command="):
            out.append(arg)
    return out


if __name__ == "__main__":  # `python -m experiments.compare.cli`, as `python -m experiments.compare`
    sys.exit(main())
