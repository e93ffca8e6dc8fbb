"""What a run leaves in its folder: the results of a finished run, or the record of a skipped or failed one.

    config.yaml, tags.json, per_query.csv, run.trec, ranking.csv, qrels.tsv (+ qrels.mustnot.tsv),
    metrics.json (written last, atomically: its presence marks a finished run folder)
    skipped.json  a finished run answered this job (experiments/run/resume.py)
    failed.json   a multirun job that failed (experiments/track/sweep_parent.py)

A run refused before any work leaves no folder behind (`discard_if_unused`); a full disk while writing
is an OutputError naming the folder, not a traceback.
"""

from __future__ import annotations

import contextlib
import errno
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.hydra_config import HydraConfig

from experiments.run_folder.trec import write_qrels, write_run
from experiments.suites.suite import Suite
from experiments.track.mlflow_tracker import MlflowTracker, resolve_uri
from experiments.track.sweep_parent import job_failed, job_reused
from retrieval.pipeline import RunOutput

if TYPE_CHECKING:  # pandas and scipy: imported when a run evaluates (tests/project/test_entry_points.py)
    from experiments.evaluate.table import Evaluation


class OutputError(OSError):
    """The run's results could not be written (a full disk, a file-size or disk quota limit)."""


# errno values that mean "no room": the disk, a quota, or a per-file size limit (ulimit -f).
_NO_ROOM = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT})


@contextlib.contextmanager
def writing(run_dir: Path) -> Iterator[None]:
    """Writes into the run folder; no room left is an OutputError naming the folder, not a traceback."""
    try:
        yield
    except OSError as err:
        if isinstance(err, OutputError) or err.errno not in _NO_ROOM:  # said once, by the innermost
            raise
        raise OutputError(
            err.errno,
            f"cannot write the results to {run_dir}: {err.strerror} ({err.filename or 'a file there'}); "
            "free space or raise the limit and run again (metrics.json is written last, so the folder "
            "is not taken for a finished run)",
        ) from None


def write_run_folder(
    run_dir: Path,
    *,
    config_text: str,
    tags: dict[str, str],
    suite: Suite,
    output: RunOutput,
    evaluation: Evaluation,
    tag: str,
    metrics: list[str],
) -> None:
    """A finished run's folder: its resolved config and tags (the same provenance as its MLflow run, for
    reports built from folders), then its results (`write_outputs`, metrics.json last)."""
    with writing(run_dir):
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(config_text)
        (run_dir / "tags.json").write_text(json.dumps(tags, indent=2))
        write_outputs(run_dir, suite, output, evaluation, tag=tag, metrics=metrics)


def write_outputs(
    run_dir: Path, suite: Suite, output: RunOutput, evaluation: Evaluation, tag: str, metrics: list[str]
) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    # pandas (~0.5 s to import): imported when there is a run to write, not for `memeval-run --help`
    from experiments.csv_cells import safe_frame
    from experiments.run_folder import ranking

    safe_frame(evaluation.per_query).to_csv(run_dir / "per_query.csv")  # no cell a spreadsheet runs
    write_run(output.ranked, run_dir / "run.trec", tag=tag)
    # The top of each ranking with its score columns: what a report's per-query drill-down explains.
    ranking.write_ranking(
        output.ranked, suite.qrels, run_dir / ranking.FILENAME, ranking.saved_depth(metrics, suite.k)
    )
    write_qrels(suite.qrels, run_dir)  # must-not judgements apart: trec_eval crashes on negative grades
    # metrics.json last: its presence marks a finished run directory.
    tmp = run_dir / ".metrics.json.tmp"
    tmp.write_text(json.dumps(evaluation.metrics, indent=2, sort_keys=False, default=str))
    tmp.replace(run_dir / "metrics.json")


def write_skipped(
    run_dir: Path, cfg_hash: str, finished: Any, tracker: MlflowTracker | None
) -> dict[str, Any]:
    """A finished run answers this job: log nothing new, point to it, return its metrics.

    skipped.json names the run directory when it is still whole, and the MLflow run (id and store):
    reports and the gate follow either (experiments.track.finished_runs)."""
    where = finished.run_dir or f"MLflow run {finished.mlflow_run_id}"
    print(f"skipped: config {cfg_hash} already has a finished run ({finished.source}: {where})")
    run_dir.mkdir(parents=True, exist_ok=True)
    note = {
        "config_hash": cfg_hash,
        "source": finished.source,
        "run_dir": finished.run_dir,
        "mlflow_run_id": finished.mlflow_run_id,
        "mlflow_uri": resolve_uri(tracker.uri) if tracker is not None and finished.mlflow_run_id else None,
    }
    (run_dir / "skipped.json").write_text(json.dumps(note, indent=2))
    if tracker is not None and tracker.parent_run_id and finished.mlflow_run_id:  # listed under the parent
        job_reused(resolve_uri(tracker.uri), tracker.parent_run_id, cfg_hash, finished.mlflow_run_id)
    return {"overall": dict(finished.overall), "skipped": note}


def record_failed_job(
    tags: dict[str, str], run_dir: Path, parent: dict[str, str], err: BaseException
) -> None:
    """A failed multirun job: failed.json, and a FAILED child run (and parent) when the sweep is tracked.
    `tags`: its variant, and its config hash when the config resolves."""
    try:
        run_name = f"{HydraConfig.get().runtime.choices.get('suite', 'suite')}-{tags['variant']}"
        job_failed(run_dir, parent, err, run_name=run_name, tags=tags)
    except Exception as record_err:  # never hide the job's own error behind this one
        print(f"warning: could not record the failed job in {run_dir}: {record_err}", file=sys.stderr)


def discard_if_unused(run_dir: Path) -> None:
    """Remove a run directory that holds only what Hydra wrote before the run refused to start, so a
    refused run leaves no empty result folder behind (results, if any, are never touched)."""
    if run_dir.is_dir() and all(p.name == ".hydra" or p.suffix == ".log" for p in run_dir.iterdir()):
        shutil.rmtree(run_dir, ignore_errors=True)
        here = Path.cwd().resolve()
        for parent in run_dir.resolve().parents:  # and the folders made only for it (outputs/<suite>/...)
            if parent == here or here not in parent.parents or any(parent.iterdir()):
                break
            parent.rmdir()
