"""Finished runs read back as plain records, from a run directory or from an MLflow store.

Sits at the end of the data flow, after `experiments.run` wrote a run directory (metrics.json,
per_query.csv, config.yaml) and, when tracking was on, logged the same files to MLflow. The gate
and the comparison report read runs only through `RunRecord`, so both work offline from run
directories and from a team's MLflow store alike.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from experiments.answer.metric_names import is_answer_metric
from experiments.evaluate.metrics import parse_metric
from experiments.run_folder import CONFIG_HASH_TAG
from experiments.run_folder.check import RunFolderError, check_run_folder, describe_partial, partial_mark
from experiments.run_folder.per_query import read_per_query  # noqa: F401 (imported from here too)
from experiments.run_folder.ranking import FILENAME as RANKING_FILE
from experiments.run_folder.ranking import read_ranking
from experiments.track.mlflow_tracker import REUSED_TAG_PREFIX, flatten, resolve_uri, sqlite_path

PROVENANCE_TAGS = ("suite_hash", "model_revisions", "git_commit", "memeval_version")
# Per-query columns scored like metrics but where less is better
# (experiments/evaluate/metrics/noise.py; harm@k, the
# must-not memories returned: experiments/evaluate/metrics/harm.py).
LOWER_IS_BETTER = re.compile(r"(noise|harm)@[1-9][0-9]*")


def higher_is_better(metric: str) -> bool:
    return not LOWER_IS_BETTER.fullmatch(metric)


class RunError(ValueError):
    """A run cannot be read: missing files, or an MLflow query that matched nothing."""


@dataclass(frozen=True, eq=False)
class RunRecord:
    """One finished run: where it came from, its flattened config, metrics.json and per-query table."""

    source: str  # run directory or `mlflow:<run id>`
    params: Mapping[str, str]
    summary: Mapping[str, Any]
    per_query: pd.DataFrame  # index query_id; label.*, abstention, latency_ms, ms.*, metric columns
    tags: Mapping[str, str] = field(default_factory=dict)
    finished_at: float = 0.0  # seconds since the epoch: which of two repeats is the later one
    # The top of each ranking with its score columns (experiments.run_folder.ranking); None for runs made
    # before it.
    ranking: pd.DataFrame | None = None
    config: Mapping[str, Any] = field(default_factory=dict)  # the run's resolved config, nested

    @property
    def variant(self) -> str:
        return str(self.summary.get("variant") or self.params.get("variant.name") or "?")

    @property
    def suite_hash(self) -> str:
        return str(self.summary.get("suite", {}).get("content_hash") or self.tags.get("suite_hash") or "")

    @property
    def suite_name(self) -> str:
        return str(self.summary.get("suite", {}).get("name") or self.tags.get("suite") or "?")

    @property
    def partial(self) -> dict[str, Any] | None:
        """What a partial merge (memeval-merge --allow-partial) lacks; None for a whole run."""
        return partial_mark(self.summary)

    @property
    def partial_text(self) -> str:
        """`partial: 1 of 2 shards; missing 1/2`, or "" for a whole run."""
        mark = self.partial
        return "" if mark is None else f"partial: {describe_partial(mark)}"

    @property
    def metrics(self) -> list[str]:
        """Relevance metric columns of the per-query table, in their order."""
        return [c for c in self.per_query.columns if _is_metric(c)]

    def answerable(self) -> pd.DataFrame:
        """Rows of queries with a relevant memory: the ones every relevance metric averages over."""
        return self.per_query[~self.per_query["abstention"].astype(bool)]


def _is_metric(name: str) -> bool:
    if LOWER_IS_BETTER.fullmatch(name) or is_answer_metric(name):
        return True
    try:
        parse_metric(name)
    except ValueError:
        return False
    return True


def load_run_dir(path: str | Path) -> RunRecord:
    """A run directory written by `experiments.run` (metrics.json marks it finished).

    A sweep job skipped because a finished run answered it holds only skipped.json: the run it names
    is loaded instead, from its run directory when that is still whole, else from the MLflow store.
    """
    root = _followed(Path(path))
    if not (root / "metrics.json").is_file() and (root / "skipped.json").is_file():
        return _load_reused(root)
    if not (root / "metrics.json").exists() and not (root / "metrics.json").is_symlink():
        raise RunError(f"{root} is not a finished run directory: missing metrics.json")
    try:  # its files whole, its per-query values those of its run.trec (experiments/run_folder/check.py)
        checked = check_run_folder(root)
    except RunFolderError as err:
        raise RunError(f"not a whole finished run: {err}") from None
    finished = (root / "metrics.json").stat().st_mtime
    ranking = read_ranking(root / RANKING_FILE) if (root / RANKING_FILE).is_file() else None
    return RunRecord(
        str(root), flatten(checked.config), checked.metrics, checked.per_query, checked.tags, finished,
        ranking, checked.config,
    )  # fmt: skip


def _followed(root: Path) -> Path:
    """A job a re-run sweep skipped holds only skipped.json, naming the finished run that answers it."""
    if not (root / "metrics.json").is_file() and (root / "skipped.json").is_file():
        target = json.loads((root / "skipped.json").read_text()).get("run_dir")
        if target and (Path(target) / "metrics.json").is_file():
            return Path(target)
    return root


def _load_reused(job: Path) -> RunRecord:
    """The MLflow run a skipped job names (its run directory is gone or was never on this disk)."""
    note = json.loads((job / "skipped.json").read_text())
    run_id = note.get("mlflow_run_id")
    if not run_id:
        raise RunError(
            f"{job} was skipped as answered by the run in {note.get('run_dir')}, which no longer holds "
            "metrics.json, and names no MLflow run: re-run the sweep with resume=false for this point"
        )
    import mlflow  # ~1 s to import: only when a store is asked

    uri = note.get("mlflow_uri") or resolve_uri()
    _existing_store(uri)
    try:
        client = mlflow.MlflowClient(uri)
        run = client.get_run(run_id)
        if run.info.status != "FINISHED":
            raise RunError(f"{job} reused MLflow run {run_id} in {uri}, which is now {run.info.status}")
        record = _mlflow_record(client, run)
    except RunError:
        raise
    except Exception as err:
        raise RunError(f"{job} reused MLflow run {run_id}, which cannot be read from {uri}: {err}") from err
    if record is None:
        raise RunError(f"{job} reused MLflow run {run_id} in {uri}, which has no per_query.csv artifact")
    return record


def find_run_dirs(paths: list[str | Path]) -> list[Path]:
    """Each path is a run directory, or a folder (e.g. a Hydra multirun) searched for them, sorted.

    Skipped sweep jobs count as the finished run they reused: its run directory when it is whole,
    else the job directory itself (`load_run_dir` then follows its MLflow run); each is listed once.
    """
    found: list[Path] = []
    for path in map(Path, paths):
        if (path / "metrics.json").is_file() or (path / "skipped.json").is_file():
            found.append(_followed(path))
        elif path.is_dir():
            markers = sorted([*path.rglob("metrics.json"), *path.rglob("skipped.json")])
            found.extend(_followed(p.parent) for p in markers)
        else:
            raise RunError(f"{path} does not exist")
    found = [p for p in dict.fromkeys(found) if _is_run(p)]
    if not found:
        raise RunError(f"no finished run directory (with metrics.json) under {', '.join(map(str, paths))}")
    return found


def _is_run(path: Path) -> bool:
    return (path / "metrics.json").is_file() or (path / "skipped.json").is_file()


def missing_run_dirs(paths: list[str | Path]) -> list[str]:
    """Hydra job directories under `paths` that hold no run: failed or killed jobs, with the reason."""
    out = []
    for path in map(Path, paths):
        if not path.is_dir():
            continue
        jobs = sorted({p.parent for p in [*path.rglob(".hydra"), *path.rglob("failed.json")]})
        for job in jobs:
            if _is_run(job):
                continue
            failed = job / "failed.json"
            reason = (
                json.loads(failed.read_text()).get("error", "failed")
                if failed.is_file()
                else "no metrics.json: the job did not finish"
            )
            out.append(f"{job}: {reason}")
    return out


def unique_runs(records: list[RunRecord]) -> list[RunRecord]:
    """One record per run (two skipped jobs may name the same finished run)."""
    return list({r.source: r for r in records}.values())


def load_mlflow_runs(
    *,
    experiment: str | None = None,
    parent_run_id: str | None = None,
    tags: Mapping[str, str] | None = None,
    uri: str | None = None,
) -> list[RunRecord]:
    """Finished MLflow runs selected by experiment name, parent run and/or tags, oldest first.

    Per-query values and metrics.json come from each run's artifacts (what `experiments.run` logs).
    """
    import mlflow  # ~1 s to import: only when a store is asked

    tracking_uri = uri or resolve_uri()  # an explicit store (--tracking-uri) wins over the environment
    _existing_store(tracking_uri)
    client = mlflow.MlflowClient(tracking_uri)
    if experiment:
        found = client.get_experiment_by_name(experiment)
        if found is None:
            raise RunError(f"no MLflow experiment named {experiment!r} in {tracking_uri}")
        experiment_ids = [found.experiment_id]
    else:
        experiment_ids = [e.experiment_id for e in client.search_experiments()]
    clauses = ["attributes.status = 'FINISHED'"]
    if parent_run_id:
        clauses.append(f"tags.`mlflow.parentRunId` = '{parent_run_id}'")
    for key, value in (tags or {}).items():
        clauses.append(f"tags.`{key}` = '{value}'")
    runs = client.search_runs(experiment_ids, " and ".join(clauses), order_by=["attributes.start_time ASC"])
    if parent_run_id:
        runs += _reused_by_sweep(client, parent_run_id, {r.info.run_id for r in runs})
    if not runs:
        selector = " and ".join(clauses[1:]) or "all"
        raise RunError(f"no finished MLflow run in {tracking_uri} matches {selector}")
    records = [r for r in (_mlflow_record(client, run) for run in runs) if r is not None]
    if not records:
        raise RunError(f"the MLflow runs matched in {tracking_uri} have no per_query.csv artifact")
    return records


def _existing_store(uri: str) -> None:
    """Reading runs never creates a store: a local SQLite store that is not there is an error."""
    path = sqlite_path(uri)
    if path is not None and not path.is_file():
        raise RunError(f"there is no MLflow store at {path} (from {uri})")


def _mlflow_record(client: Any, run: Any) -> RunRecord | None:
    """A finished MLflow run's metrics.json and per-query table (None: it holds no results, e.g. a parent)."""
    have = {a.path for a in client.list_artifacts(run.info.run_id)}
    if not {"metrics.json", "per_query.csv"} <= have:
        return None
    optional = [n for n in (RANKING_FILE, "config.yaml") if n in have]
    with tempfile.TemporaryDirectory(prefix="memeval-report-") as tmp:
        for name in ("metrics.json", "per_query.csv", *optional):
            client.download_artifacts(run.info.run_id, name, tmp)
        ranking, config = Path(tmp) / RANKING_FILE, Path(tmp) / "config.yaml"
        settings = (yaml.safe_load(config.read_text()) or {}) if config.is_file() else {}
        return RunRecord(
            f"mlflow:{run.info.run_id}",
            # A run's settings from its full config, as for a run directory (MLflow's params are the
            # cleaned view of them: experiments/track/run_params.py).
            flatten(settings) if settings else dict(run.data.params),
            json.loads((Path(tmp) / "metrics.json").read_text()),
            read_per_query(Path(tmp) / "per_query.csv"),
            {k: v for k, v in run.data.tags.items() if not k.startswith("mlflow.")},
            (run.info.end_time or run.info.start_time or 0) / 1000,
            read_ranking(ranking) if ranking.is_file() else None,
            (yaml.safe_load(config.read_text()) or {}) if config.is_file() else {},
        )


def missing_children(parent_run_id: str, uri: str | None = None) -> list[str]:
    """Jobs of a sweep with no finished run: children that FAILED or are still RUNNING (killed) with no
    FINISHED run of the same config, and reused runs that are no longer FINISHED."""
    import mlflow  # ~1 s to import: only when a store is asked

    uri = uri or resolve_uri()
    _existing_store(uri)
    client = mlflow.MlflowClient(uri)
    parent = client.get_run(parent_run_id)
    children = client.search_runs(
        [parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent_run_id}'", max_results=5000
    )
    done = {r.data.tags.get(CONFIG_HASH_TAG) for r in children if r.info.status == "FINISHED"}
    out = []
    for run in children:
        if run.info.status != "FINISHED" and run.data.tags.get(CONFIG_HASH_TAG) not in done:
            error = run.data.tags.get("memeval.error", "")
            out.append(f"mlflow:{run.info.run_id} ({run.info.status}{': ' + error if error else ''})")
    for key, run_id in parent.data.tags.items():
        if key.startswith(REUSED_TAG_PREFIX) and key.removeprefix(REUSED_TAG_PREFIX) not in done:
            try:
                status = client.get_run(run_id).info.status
            except Exception:  # deleted from the store
                status = "gone"
            if status != "FINISHED":
                out.append(f"mlflow:{run_id} (reused, now {status})")
    return out


def _reused_by_sweep(client: Any, parent_run_id: str, have: set[str]) -> list:
    """Runs a re-run sweep did not repeat: a skipped job tags its parent with the finished run it reused."""
    tags = client.get_run(parent_run_id).data.tags
    reused = sorted({v for k, v in tags.items() if k.startswith(REUSED_TAG_PREFIX)} - have)
    runs = [client.get_run(run_id) for run_id in reused]
    return [r for r in runs if r.info.status == "FINISHED"]
