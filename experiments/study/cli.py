"""`memeval-study` / `python -m experiments.study study=<plan>`: run a study plan end to end.

    python -m experiments.study study=boost_beam100k
    python -m experiments.study study=boost_beam100k tracking=none ++study.stats.seed=1

Loads conf/study/<plan>.yaml (checked before anything runs), runs every row through
`experiments.run` (caches, process memo, resume: a re-run reuses finished rows), one MLflow parent
run with a child per row when tracking is on, then writes report.md + index.html into the study's
output folder (`report_dir`): outputs/studies/<study>/ by default, beside the rows' runs; the committed
reports/<study>/ only when asked (`refresh=true`, or `output_dir=reports/<study>`), so a study run leaves
the checkout's tracked files as they were.
Exit 2 on a bad plan, suite or config, a missing model, or an unreachable store.
"""

from __future__ import annotations

import shlex
import sys
import tempfile
from pathlib import Path

from experiments.configure.app import Job, hydra_app
from experiments.configure.app_settings import StudySettings
from experiments.configure.compose import CONF_DIR, answer_help
from experiments.configure.setup import setup
from experiments.exit_codes import console_script
from experiments.names import UnsafeNameError, under_root

REPORTS_DIR = "reports"  # the committed reports, relative to the working directory (the checkout)


def run(settings: StudySettings, command: str, name: str | None = None) -> Path:
    """Run the plan `settings.plan` (named `name`, its file name, unless it states one); write its report."""
    # pandas and matplotlib come with these: imported once there is a study to run (--help stays fast)
    from experiments.study.experiment import SuiteResults, run_plan
    from experiments.study.plan import PlanError, load_plan
    from experiments.study.report import write_report

    if settings.plan is None:
        plans = sorted(p.stem for p in (CONF_DIR / "study").glob("*.yaml"))
        raise PlanError(f"study: name a plan, study=<name>; shipped plans: {plans} (--help for more)")
    plan = load_plan(settings.plan, name=name)
    result = run_plan(
        plan,
        runs_dir=under_root(settings.runs_root, plan.name),
        tracking=settings.tracking if settings.tracking is not None else False,
        cache_dir=settings.cache_dir,
        progress=settings.progress,
    )
    print(result)
    out = write_report(result, report_dir(settings, plan.name), commands=[command])
    parts = [(r, out / i) for i, r in result.results] if isinstance(result, SuiteResults) else [(result, out)]
    for part, folder in parts:
        if part.parent_run_id:
            _log_report(part.parent_run_id, settings.tracker_uri, folder)
    print(f"wrote {out}/report.md and index.html: {len(plan.rows)} rows, baseline {plan.baseline}")
    return out


def report_dir(settings: StudySettings, study: str) -> Path:
    """Where a study's report goes: `output_dir` if given, the committed reports/<study>/ with
    `refresh=true`, else <runs_root>/<study>/ (an output folder, beside the rows' runs)."""
    if settings.output_dir:
        return Path(settings.output_dir)
    return under_root(REPORTS_DIR if settings.refresh else settings.runs_root, study)


def _log_report(parent_run_id: str, tracker_uri: str | None, out: Path) -> None:
    """The report's files under the study's parent run, `report/`. MLflow shows an HTML artifact alone,
    so the index.html logged there has its figures inlined (render.with_inline_images); the PNGs are
    logged too, for report.md."""
    import mlflow  # ~4.5 s to import: only a tracked study logs its report

    from experiments.compare.render import with_inline_images  # pandas, and the tracker's ~110 modules:
    from experiments.track.mlflow_tracker import resolve_uri  # not for --help

    client = mlflow.MlflowClient(tracking_uri=resolve_uri(tracker_uri))
    with tempfile.TemporaryDirectory(prefix="memeval-report-") as tmp:
        inlined = Path(tmp) / "index.html"
        for path in sorted(p for p in out.iterdir() if p.is_file()):
            if path.name == inlined.name:
                inlined.write_text(with_inline_images(path.read_text("utf-8"), out), "utf-8")
            client.log_artifact(parent_run_id, str(inlined if path.name == inlined.name else path), "report")


@hydra_app("run_study", StudySettings.from_config)
def run_app(settings: StudySettings, job: Job) -> None:
    command = "python -m experiments.study " + shlex.join(job.overrides)
    # The study machinery pulls in pandas and matplotlib, these error classes numpy and the pipeline
    # (~0.25 s of CPU for --help): imported once there is a study to run, so `--help` answers at once
    # (tests/project/test_entry_points.py checks what the entry modules import).
    from experiments.configure.check import ConfigError
    from experiments.study.plan import PlanError
    from experiments.suites.suite import SuiteError
    from experiments.track.finished_runs import RunError
    from experiments.track.mlflow_tracker import TrackingError
    from retrieval.encoder import ModelNotFoundError
    from retrieval.pipeline import PipelineConfigError

    try:
        run(settings, command, name=job.choices.get("study"))
    except (
        PlanError,
        ConfigError,
        SuiteError,
        PipelineConfigError,
        TrackingError,
        ModelNotFoundError,
        RunError,
        UnsafeNameError,
    ) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


@console_script
def main() -> None:
    """`memeval-study`: the Hydra app, or its help text at once (without Hydra's slow group listing)."""
    if not answer_help("run_study", sys.argv[1:]):
        setup()
        run_app()


if __name__ == "__main__":
    main()
