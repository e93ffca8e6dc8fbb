"""A finished run written straight into a local SQLite MLflow store, without importing MLflow.

Importing MLflow and opening its SQLAlchemy store costs a small run more CPU than its retrieval (issue
41, reports/benchmarks/tracking_cost.md). For a `sqlite:///` store whose schema is at the revision the
installed MLflow's migrations end at, the run is written here with the standard library's sqlite3 into
MLflow's own tables (runs, tags, params, metrics, latest_metrics, datasets, inputs, input_tags), in one
transaction, and its files are copied into the run's artifact folder, row for row as MlflowClient's
create_run, log_inputs, log_batch, log_artifact and set_terminated write them
(tests/track/test_sqlite_run.py reads both back through MlflowClient and compares). A new experiment is
made here too, as create_experiment makes it, where MLflow's default artifact root applies. Any other
store (a server, another schema revision) or experiment (deleted, unmarked) goes through MlflowClient.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import re
import shutil
import sqlite3
import time
import urllib.parse
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BUSY_TIMEOUT_S = 30  # several runs may finish at once: wait for another writer's transaction
_MAX_FLOAT = 1.7976931348623157e308  # MLflow stores +-inf as the largest finite double
_MAX_EXPERIMENT_NAME = 500  # mlflow.utils.validation.MAX_EXPERIMENT_NAME_LENGTH
_REVISION = re.compile(r"^revision\s*=\s*['\"](\w+)['\"]", re.M)
_DOWN = re.compile(r"^down_revision\s*=\s*(.+)$", re.M)


@functools.cache
def schema_head() -> str:
    """The revision the installed MLflow's migrations end at, read from its migration scripts as text
    (the one revision no other names as its `down_revision`), so checking a store imports no MLflow."""
    spec = importlib.util.find_spec("mlflow")  # finds the package without running its __init__
    if spec is None or spec.origin is None:
        raise RuntimeError("mlflow is not installed")
    versions = Path(spec.origin).parent / "store" / "db_migrations" / "versions"
    revisions: set[str] = set()
    parents: set[str] = set()
    for script in versions.glob("*.py"):
        text = script.read_text(encoding="utf-8")
        found = _REVISION.search(text)
        if found is None:
            continue
        revisions.add(found.group(1))
        down = _DOWN.search(text)
        parents.update(re.findall(r"['\"](\w+)['\"]", down.group(1)) if down else [])
    heads = revisions - parents
    if len(heads) != 1:
        raise RuntimeError(f"MLflow's migrations in {versions} end at {len(heads)} revisions, not one")
    return heads.pop()


def connect(path: Path) -> sqlite3.Connection:
    """A connection that waits for other writers, in autocommit mode (transactions are explicit)."""
    return sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)


def experiment_id(path: Path, name: str, kind_tag: str) -> str | None:
    """The id of the active experiment `name` already marked with `kind_tag`; None when it is new,
    deleted or unmarked (MlflowClient then creates or marks it, a one-off)."""
    con = connect(path)
    try:
        row = con.execute(
            "select e.experiment_id from experiments e join experiment_tags t on t.experiment_id ="
            " e.experiment_id and t.key = ? where e.name = ? and e.lifecycle_stage = 'active'",
            (kind_tag, name),
        ).fetchone()
    finally:
        con.close()
    return None if row is None else str(row[0])


def create_experiment(path: Path, name: str, kind_tag: str, kind: str, artifact_root: str) -> str | None:
    """MlflowClient's create_experiment for a new experiment `name` tagged `kind_tag: kind`, its artifact
    location `<artifact_root>/<id>` (store_template.default_artifact_root), row for row as MLflow writes it
    (tests/track/test_store_template.py compares). Returns its id; if another process made it meanwhile,
    the id `experiment_id` finds; None when MLflow must decide (a name MLflow refuses, or an experiment
    of that name already there, deleted or unmarked)."""
    if not 0 < len(name) <= _MAX_EXPERIMENT_NAME:
        return None
    con = connect(path)
    try:
        con.execute("begin immediate")  # the write lock: one process makes it, the others then find it
        try:
            if con.execute("select 1 from experiments where name = ?", (name,)).fetchone():
                con.execute("rollback")
                return experiment_id(path, name, kind_tag)
            now = int(time.time() * 1000)
            new = con.execute(
                "insert into experiments (name, lifecycle_stage, creation_time, last_update_time)"
                " values (?, 'active', ?, ?)",
                (name, now, now),
            ).lastrowid
            # MLflow's double write: the id comes from the insert, the artifact location from the id
            con.execute(
                "update experiments set artifact_location = ? where experiment_id = ?",
                (f"{artifact_root.rstrip('/')}/{new}", new),
            )
            con.execute(
                "insert into experiment_tags (key, value, experiment_id) values (?, ?, ?)",
                (kind_tag, kind, new),
            )
            con.execute("commit")
        except BaseException:
            con.execute("rollback")
            raise
    finally:
        con.close()
    return str(new)


def local_folder(uri: str) -> Path | None:
    """The folder of a local artifact location (a path or `file://`); None for any other scheme."""
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme == "file" and parts.netloc in ("", "localhost"):
        return Path(urllib.parse.unquote(parts.path))
    if parts.scheme == "" and uri.startswith("/"):
        return Path(uri)
    return None


def _stored_value(value: float) -> tuple[float, int]:
    """(value, is_nan) as MLflow's SQL store keeps a metric."""
    if math.isnan(value):
        return 0.0, 1
    if math.isinf(value):
        return (_MAX_FLOAT if value > 0 else -_MAX_FLOAT), 0
    return float(value), 0


def write_run(
    path: Path,
    experiment: str,
    *,
    run_name: str,
    tags: Mapping[str, str],
    params: Mapping[str, str],
    metrics: Mapping[str, float],
    files: list[tuple[str, Path | str]],
    dataset: Mapping[str, str] | None,
    dataset_tags: Mapping[str, str],
    started_ms: int | None,
) -> str | None:
    """Write a FINISHED run and return its id; None when the experiment's artifact location is not a
    local folder (the caller then uses MlflowClient). `files`: (artifact path, a file to copy or text
    to write). The rows go in one transaction after the files are in place; if anything fails, the
    rows are rolled back and the run's artifact folder removed, so nothing is half-written."""
    con = connect(path)
    try:
        row = con.execute(
            "select artifact_location from experiments where experiment_id = ?", (int(experiment),)
        ).fetchone()
        folder = local_folder(row[0]) if row and row[0] else None
        if folder is None:
            return None
        run_id = uuid.uuid4().hex
        artifact_uri = f"{row[0].rstrip('/')}/{run_id}/artifacts"  # MLflow's append_to_uri_path
        run_folder = folder / run_id
        try:
            _copy_files(run_folder / "artifacts", files)
            _insert(
                con,
                experiment,
                run_id,
                artifact_uri,
                run_name,
                tags,
                params,
                metrics,
                dataset,
                dataset_tags,
                started_ms,
            )
        except BaseException:
            shutil.rmtree(run_folder, ignore_errors=True)
            raise
        return run_id
    finally:
        con.close()


def _copy_files(artifacts: Path, files: list[tuple[str, Path | str]]) -> None:
    for name, source in files:
        target = artifacts / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(source, Path):
            shutil.copy2(source, target)  # what MLflow's LocalArtifactRepository.log_artifact does
        else:
            target.write_text(source, encoding="utf-8")


def _insert(
    con: sqlite3.Connection,
    experiment: str,
    run_id: str,
    artifact_uri: str,
    run_name: str,
    tags: Mapping[str, str],
    params: Mapping[str, str],
    metrics: Mapping[str, float],
    dataset: Mapping[str, str] | None,
    dataset_tags: Mapping[str, str],
    started_ms: int | None,
) -> None:
    now = int(time.time() * 1000)
    all_tags = dict(tags)
    all_tags.setdefault("mlflow.runName", run_name)
    con.execute("begin immediate")  # the write lock now: no other writer between the reads and writes
    try:
        con.execute(
            "insert into runs (run_uuid, name, source_type, source_name, entry_point_name, user_id, status,"
            " start_time, end_time, source_version, lifecycle_stage, artifact_uri, experiment_id,"
            " deleted_time) values (?, ?, 'UNKNOWN', '', '', ?, 'FINISHED', ?, ?, '', 'active', ?, ?, NULL)",
            (
                run_id,
                run_name,
                all_tags.get("mlflow.user", "unknown"),
                started_ms or now,
                now,
                artifact_uri,
                int(experiment),
            ),
        )
        con.executemany(
            "insert into tags (key, value, run_uuid) values (?, ?, ?)",
            [(k, v, run_id) for k, v in all_tags.items()],
        )
        con.executemany(
            "insert into params (key, value, run_uuid) values (?, ?, ?)",
            [(k, v, run_id) for k, v in params.items()],
        )
        rows = [(k, *_stored_value(v)) for k, v in metrics.items()]
        con.executemany(
            "insert into metrics (key, value, timestamp, run_uuid, step, is_nan) values (?, ?, ?, ?, 0, ?)",
            [(k, v, now, run_id, nan) for k, v, nan in rows],
        )
        con.executemany(
            "insert into latest_metrics (key, value, timestamp, step, is_nan, run_uuid)"
            " values (?, ?, ?, 0, ?, ?)",
            [(k, v, now, nan, run_id) for k, v, nan in rows],
        )
        if dataset is not None:
            _link_dataset(con, experiment, run_id, dataset, dataset_tags)
        con.execute("commit")
    except BaseException:
        con.execute("rollback")
        raise


def _link_dataset(
    con: sqlite3.Connection,
    experiment: str,
    run_id: str,
    dataset: Mapping[str, str],
    dataset_tags: Mapping[str, str],
) -> None:
    """MLflow's log_inputs: the experiment's dataset row by (name, digest), made if new, and the link."""
    found = con.execute(
        "select dataset_uuid from datasets where experiment_id = ? and name = ? and digest = ?",
        (int(experiment), dataset["name"], dataset["digest"]),
    ).fetchone()
    if found is None:
        dataset_uuid = uuid.uuid4().hex
        con.execute(
            "insert into datasets (dataset_uuid, experiment_id, name, digest, dataset_source_type,"
            " dataset_source, dataset_schema, dataset_profile) values (?, ?, ?, ?, ?, ?, NULL, ?)",
            (
                dataset_uuid,
                int(experiment),
                dataset["name"],
                dataset["digest"],
                dataset["source_type"],
                dataset["source"],
                dataset["profile"],
            ),
        )
    else:
        dataset_uuid = found[0]
    input_uuid = uuid.uuid4().hex
    con.execute(
        "insert into inputs (input_uuid, source_type, source_id, destination_type, destination_id, step)"
        " values (?, 'DATASET', ?, 'RUN', ?, 0)",
        (input_uuid, dataset_uuid, run_id),
    )
    con.executemany(
        "insert into input_tags (input_uuid, name, value) values (?, ?, ?)",
        [(input_uuid, k, v) for k, v in dataset_tags.items()],
    )


def json_text(mapping: Mapping[str, Any]) -> str:
    """What MlflowClient.log_dict writes for a `.json` artifact."""
    return json.dumps(dict(mapping), indent=2, default=str)


def at_head(path: Path) -> bool:
    """Whether the SQLite store at `path` exists and is at this MLflow's schema revision: its tables are
    then the ones this module reads and writes."""
    if not path.is_file():
        return False
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
        try:
            versions = [r[0] for r in con.execute("select version_num from alembic_version")]
        finally:
            con.close()
    except sqlite3.Error:
        return False
    return versions == [schema_head()]


@dataclass(frozen=True)
class StoredRun:
    """What a finished-run lookup needs of a run: its tags, its metrics (as `run.data.metrics`: the
    latest value of each) and its artifact folder (None when the artifacts are not in a local folder)."""

    run_id: str
    tags: dict[str, str]
    metrics: dict[str, float]
    artifacts: Path | None


def newest_finished(
    path: Path,
    experiment_id: str | None,
    experiment_name: str,
    tags: Mapping[str, str],
    without_tag: str,
) -> StoredRun | None:
    """The newest FINISHED, active run of the experiment with all of `tags` and without `without_tag`,
    as MlflowClient's search_runs orders them (start time, newest first, then run id); None if none."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
    try:
        if experiment_id is None:
            row = con.execute("select experiment_id from experiments where name = ?", (experiment_name,))
            found = row.fetchone()
            if found is None:
                return None
            experiment_id = str(found[0])
        has = "exists (select 1 from tags t where t.run_uuid = r.run_uuid and t.key = ? and t.value = ?)"
        lacks = "not exists (select 1 from tags t where t.run_uuid = r.run_uuid and t.key = ?)"
        where = " and ".join([has] * len(tags) + [lacks])
        args = [x for kv in tags.items() for x in kv] + [without_tag]
        row = con.execute(
            "select r.run_uuid, r.artifact_uri from runs r where r.experiment_id = ? and r.status ="
            f" 'FINISHED' and r.lifecycle_stage = 'active' and {where}"
            " order by r.start_time desc, r.run_uuid limit 1",
            [int(experiment_id), *args],
        ).fetchone()
        if row is None:
            return None
        run_id, artifact_uri = row
        run_tags = dict(con.execute("select key, value from tags where run_uuid = ?", (run_id,)))
        metrics = {
            key: math.nan if is_nan else value
            for key, value, is_nan in con.execute(
                "select key, value, is_nan from latest_metrics where run_uuid = ?", (run_id,)
            )
        }
    finally:
        con.close()
    return StoredRun(run_id, run_tags, metrics, local_folder(artifact_uri) if artifact_uri else None)
