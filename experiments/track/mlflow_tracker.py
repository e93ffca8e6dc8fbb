"""MLflow tracking: one MLflow run per harness run, with params, metrics, tags and files.

Store: `MLFLOW_TRACKING_URI` when set (a team's `mlflow server`), else the config's `uri`, else a
local SQLite store `./mlflow.db` (artifacts in `./mlruns`), which needs no server. Results are
always on disk in the run directory first, so a store that is down loses nothing: the error names
the store and the directory that holds the results.
"""

from __future__ import annotations

import fcntl
import functools
import getpass
import hashlib
import json
import math
import os
import re
import sqlite3
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np

# mlflow (~1 s to import) is imported inside the functions that talk to a store: `memeval-run --help`,
# a config error and a run with tracking=none never pay for it (tests/project/test_entry_points.py).
from experiments.evaluate.metrics import metric_name_for_mlflow
from experiments.track import sqlite_run, store_template
from experiments.track.sqlite_run import schema_head

MAX_PARAM_CHARS = 500  # long values are truncated in params; the full config is an artifact
# MLflow's own limits (mlflow.utils.validation; tests/project/test_names.py checks they still agree), checked
# before a run (experiments.configure.check, experiments.names) rather than met after it.
MAX_EXPERIMENT_NAME_CHARS = 500
MAX_KEY_CHARS = 250  # a param, tag or metric key
MAX_DATASET_NAME_CHARS = 500
MAX_TAG_VALUE_CHARS = 8000


class TrackingError(RuntimeError):
    pass


def resolve_uri(uri: str | None = None) -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or uri or f"sqlite:///{Path.cwd() / 'mlflow.db'}"


def sqlite_path(uri: str) -> Path | None:
    """The file of a `sqlite:///...` store URI; None for any other store (a server, another database)."""
    if not uri.startswith("sqlite:///"):
        return None
    rest = uri.removeprefix("sqlite:///").split("?", 1)[0]
    if rest in ("", ":memory:"):
        return None
    return Path(rest if rest.startswith("/") else Path.cwd() / rest)


_CORE_TABLES = ("experiments", "runs", "metrics", "params", "tags")


def _schema_head() -> str:
    """The schema revision this MLflow's migrations end at, read once per process from its migration
    scripts as text: checking a warm store imports no MLflow (sqlite_run.schema_head)."""
    return schema_head()


def _store_problem(path: Path) -> str | None:
    """Why the SQLite file at `path` is not a complete MLflow store, or None when it is one."""
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
        try:
            tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
            versions = (
                [r[0] for r in con.execute("select version_num from alembic_version")]
                if "alembic_version" in tables
                else []
            )
            runs = con.execute("select count(*) from runs").fetchone()[0] if "runs" in tables else 0
        finally:
            con.close()
    except sqlite3.Error as err:
        return f"it cannot be read as a SQLite database ({err})"
    missing = [t for t in _CORE_TABLES if t not in tables]
    head = _schema_head()
    if not missing and versions == [head]:
        return None
    if not versions or missing:
        what = "it has no schema version" if versions == [] else f"its schema is at revision {versions[0]}"
        what += f" and lacks the tables {', '.join(missing)}" if missing else ""
    else:
        what = f"its schema is at revision {versions[0]}, not {head}"
    if runs:
        return (
            f"{what}; it holds {runs} run(s). If an older MLflow made it, back it up and run "
            f"`mlflow db upgrade sqlite:///{path}`"
        )
    return (
        f"{what} and holds no runs: it was left half-made (e.g. a process was killed while creating it). "
        f"Delete {path} (or move it away) and run again; the store is then created afresh"
    )


def ensure_store(uri: str) -> None:
    """Make a local SQLite store safe to use: create it once, completely, or refuse a half-made one.

    Several processes may start at once on a new store (parallel runs, sweep workers), and any of
    them may be killed. Creation holds an exclusive `fcntl` lock on `.<name>.lock` beside the file,
    builds the schema in a temporary file in the same folder and renames it into place, so the store's
    path only ever holds a complete store. A leftover temporary file (a creator was killed) is removed
    by the next creator. An existing file that is not a complete store (made some other way and
    interrupted) raises TrackingError naming it and saying how to fix it. Other stores: nothing to do.
    """
    path = sqlite_path(uri)
    if path is None:
        return
    if not _is_empty(path):
        problem = _store_problem(path)
        if problem:
            raise TrackingError(f"the MLflow store {path} is not usable: {problem}.")
        return
    try:
        _create_once(path)
    except TrackingError:
        raise
    except Exception as err:  # e.g. a folder that cannot be written
        raise TrackingError(f"cannot create the MLflow store {path}: {err}") from err


def _create_once(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{path.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released by the kernel if this process dies
        try:
            if not _is_empty(path):  # another process created it while this one waited
                problem = _store_problem(path)
                if problem:
                    raise TrackingError(f"the MLflow store {path} is not usable: {problem}.")
                return
            for stale in path.parent.glob(f".{path.name}.*.creating"):
                stale.unlink(missing_ok=True)  # a killed creator's (we hold the lock)
            _create_store(path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _is_empty(path: Path) -> bool:
    try:
        return path.stat().st_size == 0
    except OSError:  # not there (or its folder is not one): creating it says why it cannot be made
        return True


def _create_store(path: Path) -> None:
    tmp = path.parent / f".{path.name}.{os.getpid()}.creating"
    tmp.unlink(missing_ok=True)
    if not store_template.copy_template(tmp):  # MLflow's migrations, once per MLflow version
        _migrate_new_store(tmp)
        store_template.keep_template(tmp)
    with open(tmp, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _migrate_new_store(tmp: Path) -> None:
    """MLflow makes a store at `tmp`: its tables, every migration, the Default experiment."""
    import mlflow
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    tmp_uri = f"sqlite:///{tmp}"
    try:
        mlflow.MlflowClient(tracking_uri=tmp_uri).search_experiments()
    finally:
        engine = SqlAlchemyStore._engine_map.pop(tmp_uri, None)
        if engine is not None:
            engine.dispose()


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """{dotted key: value as text, truncated} of a nested config (the run's params, by their config names)."""
    return dict(_flat_items(config, prefix))


def _flat_items(config: Mapping[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out += _flat_items(value, f"{name}.")
        else:
            text = str(value)
            out.append((name, text if len(text) <= MAX_PARAM_CHARS else text[: MAX_PARAM_CHARS - 3] + "..."))
    return out


def mlflow_params(config: Mapping[str, Any]) -> dict[str, str]:
    """The flattened config as MLflow params, each key made one MLflow accepts by the rule of every
    MLflow key memeval writes (`safe_key`): a service's own keys (Chroma's `where: {$contains: ...}`)
    are config keys too. A key that needs no change keeps its name; the full config is an artifact."""
    out: dict[str, str] = {}
    for key, text in _flat_items(config):
        out[safe_key(key, out)] = text
    return out


TRACKING_STORE_TAG = "memeval.tracking_store"  # the store the run was logged to (credentials removed)
METRIC_NAMES_TAG = "memeval.metric_names"  # on a run: the artifact mapping MLflow metric keys back
METRIC_NAMES_FILE = "metric_names.json"  # {safe MLflow key: name in metrics.json (label.value.metric)}
_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]")
_MAX_KEY = MAX_KEY_CHARS


def _relevance_key(name: str) -> str:
    try:
        return metric_name_for_mlflow(name)
    except ValueError:  # not a relevance metric (latency, counts): keep as is
        return name.replace("@", "_at_")


def _is_quality(name: str) -> bool:
    try:
        metric_name_for_mlflow(name)
        return True
    except ValueError:
        return False


def _entries(summary: Mapping[str, Any]) -> list[tuple[str, str, float]]:
    """(wanted key, original name, value) for every number: the overall quality metrics first (MLflow's
    compare page plots the first metrics by default), their 95% CI bounds, then counts and latency, then
    per label value."""
    numbers = [
        (k, float(v))
        for k, v in summary["overall"].items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    ]
    out = [(_relevance_key(k), k, v) for k, v in numbers if _is_quality(k)]
    for name, bounds in (summary.get("overall_ci95") or {}).items():
        if isinstance(bounds, (list, tuple)) and len(bounds) == 2 and all(_finite(b) for b in bounds):
            key = _relevance_key(name)
            out += [
                (f"{key}_ci_lo", f"{name} ci_lo", float(bounds[0])),
                (f"{key}_ci_hi", f"{name} ci_hi", float(bounds[1])),
            ]
    out += [(_relevance_key(k), k, v) for k, v in numbers if not _is_quality(k)]
    for label, values in summary.get("by_label", {}).items():
        for value, stats in values.items():
            for name, v in stats.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    wanted = f"{label}.{value}.{_relevance_key(name)}".replace(" ", "_")
                    out.append((wanted, f"{label}.{value}.{name}", float(v)))
    out.append(("scope_leaks", "scope_leaks", float(summary.get("scope_leaks", 0))))
    # the run's peak memory (experiments/run/resources.py): `resource.peak_rss_mb`
    out += [(f"resource.{k}", f"resource.{k}", float(v)) for k, v in (summary.get("resource") or {}).items()]
    return out


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def safe_key(wanted: str, taken: Mapping[str, str] | set[str] = frozenset()) -> str:
    """A key MLflow accepts (`[A-Za-z0-9_.-]`, no leading `.`, <= 250 chars), not in `taken`: the one rule
    for every metric and param key memeval logs (docs/sweeps.md prints it: `python -m
    experiments.track.mlflow_tracker`).

    Label names and values are free text (`C++ & tools (v2)`), and so are a service's own config keys
    (`$contains`): every other character becomes `_`; when that makes two names meet, or the name is too
    long, a short hash of the wanted name follows, so the mapping stays one-to-one (for metrics it is
    recorded with the run, `metric_names.json`; for params, config.yaml holds the original keys).
    """
    safe = _UNSAFE.sub("_", wanted)
    if safe.startswith(".") or not safe:
        safe = "_" + safe
    digest = hashlib.sha256(wanted.encode()).hexdigest()
    if len(safe) > _MAX_KEY:
        safe = f"{safe[: _MAX_KEY - 9]}-{digest[:8]}"
    width = 8
    while safe in taken:  # a collision: make it unique, deterministically
        safe = f"{safe[: _MAX_KEY - width - 1]}-{digest[:width]}"
        width += 2
    return safe


def mlflow_metric_names(summary: Mapping[str, Any]) -> dict[str, str]:
    """{MLflow key: name in metrics.json} for every metric `mlflow_metrics` logs (the reverse mapping)."""
    names: dict[str, str] = {}
    for wanted, original, _ in _entries(summary):
        names[safe_key(wanted, names)] = original
    return names


# Which unit the run's statistics resampled (cluster | query) and over how many clusters.
STATISTICS_UNIT_TAG = "memeval.statistics_unit"


def statistics_tags(summary: Mapping[str, Any]) -> dict[str, str]:
    """The MLflow tag saying what the run's CIs resampled: `cluster (10 clusters)` or `query`."""
    stats = summary.get("statistics") or {}
    if not stats:
        return {}
    clusters = f" ({stats['n_clusters']} clusters)" if stats.get("unit") == "cluster" else ""
    return {STATISTICS_UNIT_TAG: f"{stats['unit']}{clusters}"}


def mlflow_metrics(summary: Mapping[str, Any]) -> dict[str, float]:
    """metrics.json -> flat MLflow metric keys: `R_at_10`, `ability.knowledge_update.R_at_10`...

    Keys are always valid MLflow names; `mlflow_metric_names` gives the same keys with their originals.
    """
    out: dict[str, float] = {}
    for wanted, _, value in _entries(summary):
        out[safe_key(wanted, out)] = value
    return out


def read_metric_names(client: Any, run: Any) -> dict[str, str]:
    """The run's {MLflow key: original name}; {} for a run logged before the mapping was recorded."""
    if run.data.tags.get(METRIC_NAMES_TAG) != METRIC_NAMES_FILE:
        return {}
    with tempfile.TemporaryDirectory(prefix="memeval-names-") as tmp:
        path = client.download_artifacts(run.info.run_id, METRIC_NAMES_FILE, tmp)
        return dict(json.loads(Path(path).read_text()))


def original_metrics(client: Any, run: Any) -> dict[str, float]:
    """A run's MLflow metrics under their metrics.json names (`nDCG@10`, `category.C++ & tools.P@5`).

    Runs without a recorded mapping: a relevance metric's key is derived the old way (`nDCG_at_10`)."""
    stored = dict(run.data.metrics)
    names = read_metric_names(client, run)
    if names:
        return {names[k]: v for k, v in stored.items() if k in names}
    return stored


def overall_from_mlflow(client: Any, run: Any, names: list[str]) -> dict[str, float]:
    """The overall values of `names` (metrics.json names) from an MLflow run."""
    return _overall(run.data.metrics, read_metric_names(client, run), names)


def overall_from_stored(run: sqlite_run.StoredRun, names: list[str]) -> dict[str, float] | None:
    """As overall_from_mlflow, for a run read from a local SQLite store; None when its metric key
    mapping is in artifacts outside a local folder (then ask MlflowClient)."""
    if run.tags.get(METRIC_NAMES_TAG) != METRIC_NAMES_FILE:
        return _overall(run.metrics, {}, names)
    if run.artifacts is None:
        return None
    mapped = json.loads((run.artifacts / METRIC_NAMES_FILE).read_text(encoding="utf-8"))
    return _overall(run.metrics, mapped, names)


def _overall(stored: Mapping[str, float], mapped: Mapping[str, str], names: list[str]) -> dict[str, float]:
    if mapped:
        wanted = {original: safe for safe, original in mapped.items()}
        return {name: stored[wanted[name]] for name in names if wanted.get(name) in stored}
    legacy = {name: _relevance_key(name) for name in names}
    return {name: stored[key] for name, key in legacy.items() if key in stored}


@functools.cache
def package_version() -> str:
    """The installed memeval's version, once per process (a metadata scan each call)."""
    try:
        return version("memeval")
    except PackageNotFoundError:
        return "unknown"


@functools.cache
def git_commit() -> str:
    """The checkout's commit when this process first asks: the code it imported (a sweep's jobs all run
    the code loaded at its start, as `code_version` is per process too)."""
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def dataset_name(suite_name: str, path: Any = None) -> str:
    """The suite's name in MLflow's Dataset column, with the tier or file it was read from when the name
    alone does not say it (`beam-100K`, not `beam`)."""
    if not path:
        return suite_name
    stem = Path(str(path)).stem
    return suite_name if stem.lower().startswith(suite_name.lower()) else f"{suite_name}-{stem}"


LATENCY_TAG = "memeval.latency_covers"  # what a run's latency figures timed, and what came from a cache


def latency_for_mlflow(summary: Mapping[str, Any], per_query: Any) -> tuple[dict[str, float], dict[str, str]]:
    """Latency for every run, with what it covers. metrics.json's per-query figures are null when work was
    reused from a cache (a sweep's later jobs rank from the cached retrieval, all queries in one batch).
    MLflow always gets `latency_ms_p50/_p95/_mean` for the work this run did, and a tag that says what
    they timed: per query, or amortised (a batch's time / its queries), which stages came from a cache,
    and whether embeddings were computed or read (a warm run is not comparable with a cold one)."""
    cache = summary.get("cache") or {}
    stages = [c.removeprefix("ms.") for c in per_query.columns if c.startswith("ms.")]
    timed = [s for s in stages if per_query[f"ms.{s}"].notna().all()]
    embeddings = cache.get("embeddings") or {}
    hits, misses = int(embeddings.get("hits", 0)), int(embeddings.get("misses", 0))
    if hits + misses == 0:
        encoded = "no embeddings computed"
    elif misses == 0:
        encoded = f"embeddings warm (all {hits:,} from the cache)"
    else:
        encoded = f"embeddings cold ({misses:,} computed, {hits:,} from the cache)"
    overall = summary.get("overall") or {}
    if overall.get("latency_ms_p50") is not None:  # every stage timed per query (mlflow_metrics has it)
        total = per_query["latency_ms"].dropna()
        metrics = {"latency_ms_mean": float(total.mean())} if len(total) else {}
        return metrics, {LATENCY_TAG: f"per query, every stage ({', '.join(stages)}); {encoded}"}
    n = len(per_query)
    batches = {
        k.removeprefix("rank."): v
        for k, v in (summary.get("build_ms") or {}).items()
        if k.startswith("rank.")
    }
    batched = [s for s in stages if s not in timed and s in batches]
    reused = [s for s in stages if s not in timed and s not in batches]
    per = per_query[[f"ms.{s}" for s in timed]].sum(axis=1).to_numpy() if timed else np.zeros(n)
    per = per + sum(batches[s] for s in batched) / max(n, 1)
    covers = [f"per query: {', '.join(timed)}" if timed else ""]
    covers.append(f"amortised over {n} queries ranked as one batch: {', '.join(batched)}" if batched else "")
    covers.append(f"answered from a cache (not timed): {', '.join(reused)}" if reused else "")
    tag = {LATENCY_TAG: "; ".join([c for c in covers if c] + [encoded])}
    if not n or not (timed or batched):
        return {}, tag
    return {
        "latency_ms_p50": float(np.percentile(per, 50)),
        "latency_ms_p95": float(np.percentile(per, 95)),
        "latency_ms_mean": float(per.mean()),
    }, tag


DATASET_DIGEST_CHARS = 8  # as MLflow's own datasets: the UI's Dataset column shows `name (digest)` whole


@dataclass(frozen=True)
class SuiteDataset:
    """The evaluation suite as an MLflow dataset input: name, content digest and where it was read."""

    name: str
    digest: str
    source: str
    profile: Mapping[str, Any]

    def as_row(self) -> dict[str, str]:
        """The dataset's fields as MLflow stores them."""
        return {
            "name": self.name,
            "digest": self.digest[:DATASET_DIGEST_CHARS],
            "source_type": "local",
            "source": json.dumps({"uri": self.source}),
            "profile": json.dumps(dict(self.profile), default=str),
        }

    def as_input(self) -> Any:
        from mlflow.entities import Dataset, DatasetInput, InputTag

        tags = [InputTag(k, v) for k, v in DATASET_INPUT_TAGS.items()]
        return DatasetInput(Dataset(**self.as_row()), tags=tags)


@dataclass(frozen=True)
class _RunRecord:
    """What one run logs, whichever way it is written (sqlite_run directly, or MlflowClient)."""

    name: str
    tags: Mapping[str, str]
    params: Mapping[str, str]
    metrics: Mapping[str, float]
    files: list[tuple[str, Path | str]]  # (artifact path, a file to copy or text to write)
    dataset: SuiteDataset | None
    started_ms: int | None


@dataclass(frozen=True)
class MlflowTracker:
    experiment: str = "memeval"
    uri: str | None = None
    experiment_id: str | None = None  # set by a sweep's parent, so workers never race to create it
    parent_run_id: str | None = None

    def log(
        self,
        *,
        run_name: str,
        params: Mapping[str, str],
        metrics: Mapping[str, float],
        tags: Mapping[str, str],
        run_dir: Path,
        config_text: str,
        metric_names: Mapping[str, str] | None = None,
        started_ms: int | None = None,
        dataset: SuiteDataset | None = None,
    ) -> str:
        """`started_ms`: when the work began (so the MLflow UI's Duration is the run's, not the
        logging's); `dataset`: the suite, logged as the run's input with its content digest."""
        uri = resolve_uri(self.uri)
        ensure_store(uri)  # a half-made store raises here, naming the file and the fix
        try:
            run_tags = {**tags, "memeval.run_dir": str(Path(run_dir).resolve())}  # sweeps.RUN_DIR_TAG
            if metric_names is not None:
                run_tags[METRIC_NAMES_TAG] = METRIC_NAMES_FILE
            if self.parent_run_id:
                run_tags["mlflow.parentRunId"] = self.parent_run_id
            # MLflow's own tags, so the UI's Source, Version and User columns mean something.
            for key, value in provenance_tags("memeval-run").items():
                run_tags.setdefault(key, value)
            if tags.get("git_commit") and tags["git_commit"] != "unknown":
                run_tags["mlflow.source.git.commit"] = tags["git_commit"]
            run_tags[TRACKING_STORE_TAG] = store_for_display(uri)
            files: list[tuple[str, Path | str]] = [*_run_texts(run_dir, config_text, metric_names)]
            files += _run_files(run_dir)  # after the texts: a run folder's config.yaml wins, as before
            run = _RunRecord(run_name, run_tags, params, metrics, files, dataset, started_ms)
            direct = self._log_direct(uri, run)
            if direct is not None:
                return direct
            return self._log_client(uri, run)
        except Exception as err:
            raise TrackingError(
                f"could not log to the MLflow store {uri}: {err}\nThe results are safe on disk in {run_dir}"
            ) from err

    def _log_direct(self, uri: str, run: _RunRecord) -> str | None:
        """The run written by sqlite_run (no MLflow import) when the store is a local SQLite file at this
        MLflow's schema (ensure_store checked it) and the experiment exists or is new; else None."""
        path = sqlite_path(uri)
        if path is None:
            return None
        experiment_id = self.experiment_id or sqlite_run.experiment_id(
            path, self.experiment, EXPERIMENT_KIND_TAG
        )
        if experiment_id is None and (root := store_template.default_artifact_root()) is not None:
            experiment_id = sqlite_run.create_experiment(
                path, self.experiment, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND, root
            )
        if experiment_id is None:
            return None
        return sqlite_run.write_run(
            path,
            experiment_id,
            run_name=run.name,
            tags=run.tags,
            params=run.params,
            metrics=run.metrics,
            files=run.files,
            dataset=None if run.dataset is None else run.dataset.as_row(),
            dataset_tags=DATASET_INPUT_TAGS,
            started_ms=run.started_ms,
        )

    def _log_client(self, uri: str, run: _RunRecord) -> str:
        """The run through MlflowClient: any store (a server, another database, a new experiment)."""
        import mlflow
        from mlflow.entities import Metric, Param

        # A client for this store, not mlflow.set_tracking_uri: that also sets MLFLOW_TRACKING_URI in
        # os.environ, which resolve_uri then prefers for every later run of this process.
        client = mlflow.MlflowClient(tracking_uri=uri)
        experiment_id = self.experiment_id or _experiment_id(self.experiment, uri)
        created = client.create_run(
            experiment_id, run_name=run.name, tags=dict(run.tags), start_time=run.started_ms
        )
        run_id = created.info.run_id
        try:
            if run.dataset is not None:
                log_dataset(client, run_id, run.dataset.as_input())
            # One call: the client splits it into batches within the store's limits (100 params,
            # 1000 entities), and each batch is one store transaction, the store's unit of cost.
            ts = _now_ms()
            client.log_batch(
                run_id,
                params=[Param(k, v) for k, v in run.params.items()],
                metrics=[Metric(k, v, ts, 0) for k, v in run.metrics.items()],
            )
            for name, source in run.files:
                if isinstance(source, Path):
                    folder = str(Path(name).parent)
                    client.log_artifact(run_id, str(source), artifact_path=None if folder == "." else folder)
                else:
                    client.log_text(run_id, source, name)
            client.set_terminated(run_id, "FINISHED")
        except BaseException:
            client.set_terminated(run_id, "FAILED")
            raise
        return run_id


RUN_TREC_HEAD_LINES = 50  # MLflow previews .txt artifacts, not .trec: the head of run.trec as text
DATASET_INPUT_TAGS = {"mlflow.data.context": "evaluation"}


def _run_texts(
    run_dir: Path, config_text: str, metric_names: Mapping[str, str] | None
) -> list[tuple[str, str]]:
    """The artifacts written from text: the resolved config, the metric key mapping (as MlflowClient's
    log_dict writes JSON) and the head of `run.trec` as text so MLflow's artifact view can show it."""
    texts = [("config.yaml", config_text)]
    if metric_names is not None:
        texts.append((METRIC_NAMES_FILE, sqlite_run.json_text(metric_names)))
    trec = run_dir / "run.trec"
    if trec.is_file():
        with trec.open() as handle:
            head = "".join(line for _, line in zip(range(RUN_TREC_HEAD_LINES), handle, strict=False))
        texts.append(("run.trec.head.txt", head))
    return texts


def _run_files(run_dir: Path) -> list[tuple[str, Path]]:
    """The run folder's files as artifacts (an empty file, e.g. a `run.log` nothing wrote to, is left
    out) and Hydra's record of the command (`.hydra/overrides.yaml`; config.yaml is the resolved config)."""
    out = [(p.name, p) for p in sorted(run_dir.iterdir()) if p.is_file() and p.stat().st_size > 0]
    overrides = run_dir / ".hydra" / "overrides.yaml"
    if overrides.is_file():
        out.append((".hydra/overrides.yaml", overrides))
    return out


def log_dataset(client: Any, run_id: str, dataset_input: Any, attempts: int = 4) -> None:
    """Link the suite's dataset to the run. The first runs of one suite in parallel workers can all find
    no dataset row and all insert it; the store's UNIQUE (experiment, name, digest) then refuses all but
    one. A refused worker retries: the row exists now, and the store links it instead of inserting."""
    from mlflow.exceptions import MlflowException

    for attempt in range(attempts):
        try:
            client.log_inputs(run_id, datasets=[dataset_input])
            return
        except MlflowException as err:
            text = str(err)
            duplicate = "datasets" in text and ("UNIQUE constraint" in text or "duplicate key" in text)
            if not duplicate or attempt == attempts - 1:
                raise
            time.sleep(0.1 * (attempt + 1))


# The experiment kind MLflow's own "Machine learning" choice writes: an MLflow UI that reads it opens the
# experiment on its runs table. MLflow 3.17's UI does not read it yet (it follows its GenAI / Model training
# switch, `?workflowType=machine_learning`; the README says so); the tag states the kind either way.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"


def _experiment_id(name: str, uri: str) -> str:
    """The experiment's id, created if new; either way marked as model development (the runs table),
    unless someone chose another kind for it in the UI."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        try:
            return client.create_experiment(name, tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
        except Exception:  # created meanwhile by another process
            experiment = client.get_experiment_by_name(name)
            if experiment is None:
                raise
    if EXPERIMENT_KIND_TAG not in experiment.tags:  # made by an older memeval or by hand
        client.set_experiment_tag(experiment.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    return experiment.experiment_id


def store_for_display(uri: str) -> str:
    """The store's URI without credentials (`https://user:token@host` -> `https://host`)."""
    parts = urllib.parse.urlsplit(uri)
    if parts.username is None and parts.password is None:
        return uri
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def service_tags(
    system: Mapping[str, Any] | None, choice: str | None = None, answered: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """Which live service answered a run (its `system` config, resolved): the adapter, the config it came
    from, the mode, the base URL without credentials, and what the service said it is at its health
    check (`answered`: metrics.json's `system.service`, e.g. memeval-serve's served variant). Never a
    header (they hold the secrets)."""
    if not system:
        return {}
    adapter = system.get("adapter") or {}
    tags = {
        "memeval.system.adapter": str(adapter.get("_target_", "?")),
        "memeval.system.mode": str(system.get("mode", "live")),
    }
    if choice:
        tags["memeval.system.config"] = choice
    url = system.get("base_url") or adapter.get("base_url")
    if url:
        tags["memeval.system.base_url"] = store_for_display(str(url))
    for key, value in (answered or {}).items():
        tags[f"memeval.system.served.{key}"] = str(value)
    return tags


def user_name() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no login name (a container without a passwd entry)
        return "unknown"


def provenance_tags(source: str) -> dict[str, str]:
    """MLflow's own tags for who and what made a run (its Source, Version and User columns)."""
    tags = {
        "mlflow.source.name": source,
        "mlflow.source.type": "LOCAL",
        "mlflow.user": user_name(),
        "git_commit": git_commit(),
        "memeval_version": package_version(),
    }
    if tags["git_commit"] != "unknown":
        tags["mlflow.source.git.commit"] = tags["git_commit"]
    return tags


def _now_ms() -> int:
    return int(time.time() * 1000)


def open_parent_run(
    tracker: MlflowTracker,
    *,
    key_tag: str,
    key: str,
    run_name: str,
    tags: Mapping[str, str],
    params: Mapping[str, str],
    source: str,
    description: str = "",
    reopen: bool = True,
) -> dict[str, str]:
    """The parent run of a sweep or a study: created once in the launching process (the store and the
    experiment too, safely), or, with `reopen`, the newest earlier parent with the same `key` reopened,
    so a re-run's new children join the ones that finished before. It carries MLflow's provenance tags
    (`source`: the console script) and `description` as its note. Returns what each child needs
    (uri, experiment_id, parent_run_id)."""
    import mlflow
    from mlflow.entities import Param

    uri = resolve_uri(tracker.uri)
    ensure_store(uri)  # a new SQLite store is created here, once (and safely: see ensure_store)
    experiment_id = tracker.experiment_id or _experiment_id(tracker.experiment, uri)
    client = mlflow.MlflowClient(tracking_uri=uri)
    parent_id = None
    if reopen:
        previous = client.search_runs(
            [experiment_id],
            filter_string=f"tags.`{key_tag}` = '{key}'",
            order_by=["attributes.start_time DESC"],
            max_results=1,
        )
        if previous:
            parent_id = previous[0].info.run_id
            client.update_run(parent_id, status="RUNNING")
    if parent_id is None:
        parent_tags = {
            **provenance_tags(source),
            TRACKING_STORE_TAG: store_for_display(uri),
            key_tag: key,
            **tags,
        }
        if description:
            parent_tags["mlflow.note.content"] = description[:MAX_TAG_VALUE_CHARS]
        parent = client.create_run(experiment_id, run_name=run_name[:250], tags=parent_tags)
        parent_id = parent.info.run_id
        if params:
            safe: dict[str, str] = {}
            for k, v in params.items():  # override keys: named by the rule of every key (safe_key)
                safe[safe_key(k, safe)] = str(v)[:MAX_PARAM_CHARS]
            client.log_batch(parent_id, params=[Param(k, v) for k, v in safe.items()])
    return {"uri": uri, "experiment_id": experiment_id, "parent_run_id": parent_id}


BEST_CHILD_TAG = "memeval.best_child"
REUSED_TAG_PREFIX = "memeval.reused."  # on a parent: `<prefix><config hash>` -> the finished run reused
# On the child that lists a reused point under a sweep's parent (sweep_parent.job_reused): the run it
# stands for, which the parent's REUSED_TAG_PREFIX tag names too (so it is counted once).
REUSED_FROM_TAG = "memeval.reused_from"


def finish_parent(
    uri: str, parent_run_id: str, *, status: str, objective: str, summary: str = ""
) -> dict[str, Any]:
    """End a parent run with what a reader wants on its row: the best child by `objective` (its value as
    `best.<metric>`, its name and id as a tag), how many children finished, the suite dataset the
    children were scored on, a `summary` (e.g. the Holm-corrected comparison's headline) appended to its
    note, and an end time that is its last child's (so a re-run that reused every child does not
    stretch its Duration to the time between the two runs). Returns the best child's
    {name, run_id, value} ({} when no child has the metric)."""
    import mlflow
    from mlflow.entities import Metric

    client = mlflow.MlflowClient(tracking_uri=uri)
    parent = client.get_run(parent_run_id)
    children = list(
        client.search_runs(
            [parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent_run_id}'", max_results=5000
        )
    )
    # A re-run's job that a finished run answered is not a new child: the parent names it in a tag (its row
    # under the parent, REUSED_FROM_TAG, stands for that run and is not counted again).
    children = [c for c in children if REUSED_FROM_TAG not in c.data.tags]
    reused = [v for k, v in parent.data.tags.items() if k.startswith(REUSED_TAG_PREFIX)]
    known = {c.info.run_id for c in children}
    children += [client.get_run(run_id) for run_id in dict.fromkeys(reused) if run_id not in known]
    finished = [c for c in children if c.info.status == "FINISHED"]
    key = _relevance_key(objective)
    scored = [c for c in finished if key in c.data.metrics]
    best: dict[str, Any] = {}
    now = _now_ms()
    metrics = [Metric("children_finished", float(len(finished)), now, 0)]
    if scored:
        top = max(scored, key=lambda c: c.data.metrics[key])
        best = {"name": top.info.run_name, "run_id": top.info.run_id, "value": top.data.metrics[key]}
        metrics.insert(0, Metric(f"best.{key}", best["value"], now, 0))
        client.set_tag(parent_run_id, BEST_CHILD_TAG, f"{best['name']} ({best['run_id']})")
        if not parent.inputs.dataset_inputs and top.inputs.dataset_inputs:
            log_dataset(client, parent_run_id, top.inputs.dataset_inputs[0])
    client.log_batch(parent_run_id, metrics=metrics)
    note = parent.data.tags.get("mlflow.note.content", "")
    if best:
        headline = f"Best by {objective}: {best['name']} ({best['value']:.4f})."
        summary = f"{headline} {summary}".strip()
    if summary:
        marker = "\n\n**Summary:** "
        note = note.split(marker)[0] + marker + summary if note else summary
        client.set_tag(parent_run_id, "mlflow.note.content", note[:MAX_TAG_VALUE_CHARS])
    ends = [c.info.end_time for c in children if c.info.end_time]
    # Never before its own start: every child may be a finished run of an earlier sweep (reused).
    end = max([*ends, parent.info.start_time or 0]) if ends else None
    client.set_terminated(parent_run_id, status, end_time=end)
    return best


# Keys as a config or a suite may hold them, shown with the MLflow key `safe_key` makes of each.
_KEY_EXAMPLES: dict[str, Any] = {
    "stage": {"bm25": {"k1": 1.2}},
    "system": {"adapter": {"endpoints": {"search": {"body": {"where": {"$contains": "{text}"}}}}}},
    "headers": {"X-Api-Key": "{env:KEY}"},
    "metadata": {"a/b": 1, "user name": "x", "a.b": 2, "a": {"b": 3}},
    ".hidden": 1,
}


def key_table() -> str:
    """The key rule as a Markdown table (docs/sweeps.md; tests/track/test_mlflow_keys.py keeps it)."""
    rows = ["| key (config, label) | MLflow key | why |", "|---|---|---|"]
    keys = [k for k, _ in _flat_items(_KEY_EXAMPLES)]
    for key, safe in zip(keys, mlflow_params(_KEY_EXAMPLES), strict=True):
        if safe == key:
            why = "only `[A-Za-z0-9_.-]`: kept"
        elif _UNSAFE.sub("_", key) == key and not key.startswith("."):
            why = "meets an earlier key (here `a.b` and `a: {b}`): a hash of the key follows"
        elif key.startswith("."):
            why = "a leading `.`: `_` before it"
        else:
            why = "characters outside `[A-Za-z0-9_.-]` become `_`"
        rows.append(f"| `{key}` | `{safe}` | {why} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(key_table())
