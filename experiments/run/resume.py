"""Skip and resume for sweeps: the config hash, and where a job looks for its finished run.

Sits between the runner's settings and its work as one object, `Resume`: `experiments.run` asks it
once before it runs anything (`Resume.ask`: the finished run that answers the job, if any) and once
after (`Resume.record`: the run's files, then its MLflow run, recorded as finished).

A job is "finished" when a run with the same config hash, the same suite content hash and the same
run version exists, completed, and its files are whole. The run version (`run_version(pipeline)`,
KEY_RULES["finished_runs"] in retrieval/code_version.py) covers the `retrieval` and `experiments`
sources, the versions of the libraries a run computes with, and every stage's fingerprint, which carries
the content of every model the pipeline loads and, for a live system recorded or replayed, its cassette's
content digest (not only its path: a replay of a cassette rewritten in place is run again). A code,
library, model or cassette change therefore re-runs the job: a finished run of other code, libraries,
model files or exchanges never answers for this one. When a run finishes, `record_finished` writes the
sha256 of each of its files to `checksums.json` in its folder; before a run answers for a job, its files
are checked against it, and a damaged run (a file deleted, truncated or changed) is reported with a
`CacheWarning` and run again, as is one that fails the run folder check (experiments/run_folder/check.py:
its files cover per_query.csv's queries and give its per-query values) or is a partial merge. Two places
know a finished run,
and agree by construction:

- MLflow (when tracking is on and the store answers): a run in the experiment tagged
  `memeval.config_hash`, `suite_hash` and `memeval.code_version`, with status FINISHED. A job killed
  by SIGKILL leaves its run RUNNING, a job that raised leaves it FAILED; neither counts, so a re-run
  does that job again.
- The disk (the source of truth when the store is down or tracking is off): a small checksummed
  index entry `<cache_dir>/finished/<config_hash>-<suite_hash>-<run version>.json` naming the run
  directory, whose `metrics.json` (written last and atomically by the runner) must exist and carry
  the same hashes, and whose files must match their checksums. A corrupt entry is reported and deleted
  (retrieval/cache_io.py); an unwritable cache folder only warns.

When the store answers, it decides (a run on disk but missing from MLflow is re-run, so it gets
logged); when it does not, the disk decides.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.configure.settings import RunSettings
from experiments.run_folder import CODE_VERSION_TAG, CONFIG_HASH_TAG, PARTIAL_TAG, RUN_DIR_TAG, resume_enabled
from experiments.track import sqlite_run
from experiments.track.mlflow_tracker import (
    REUSED_TAG_PREFIX,  # noqa: F401 (imported from here too)
    overall_from_mlflow,
    overall_from_stored,
    resolve_uri,
    sqlite_path,
)
from experiments.track.run_params import VOLATILE_KEYS
from retrieval import cache_io
from retrieval.cache_io import CacheWarning
from retrieval.code_version import KEY_RULES
from retrieval.pipeline import Pipeline
from retrieval.progress import PhaseCallback


@dataclass(frozen=True)
class FinishedRun:
    """A run that already answered this job: where it is and its overall metrics."""

    source: str  # "mlflow" | "disk"
    overall: Mapping[str, Any]
    run_dir: str | None = None
    mlflow_run_id: str | None = None


def _strip(node: Any) -> Any:
    if isinstance(node, Mapping):
        return {k: _strip(v) for k, v in node.items() if k not in VOLATILE_KEYS}
    if isinstance(node, list):
        return [_strip(v) for v in node]
    if isinstance(node, float) and node.is_integer():
        return int(node)  # k1=1 and k1=1.0 are one config (as in stage fingerprints, retrieval.stage)
    return node


def config_hash(resolved: Mapping[str, Any]) -> str:
    """sha256 (16 hex) of the resolved config minus volatile keys, independent of key order and of how an
    integral number is written (1 or 1.0)."""
    container = dict(resolved)
    text = json.dumps(_strip(container), sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_version(pipeline: Pipeline) -> str:
    """What a run's numbers come from beyond its config and suite (KEY_RULES["finished_runs"]): the
    `retrieval` and `experiments` sources, the libraries' versions, and every stage's fingerprint (the
    content of every model included)."""
    return KEY_RULES["finished_runs"].key(stages=pipeline.fingerprint())[:16]


def code_version() -> str:
    """The code and libraries a run's numbers come from, whatever its pipeline (cached per process)."""
    return KEY_RULES["finished_runs"].key(stages="")[:16]


CHECKSUMS = "checksums.json"  # in a finished run's folder: sha256 of each of its files


def _run_files(run_dir: Path) -> list[Path]:
    """The files a finished run wrote: every regular, non-hidden file of its folder but logs (Hydra's log
    is still written to), a skip note, and the checksums themselves."""
    return sorted(
        p
        for p in run_dir.iterdir()
        if p.is_file()
        and not p.name.startswith(".")
        and p.suffix != ".log"
        and p.name not in (CHECKSUMS, "skipped.json")
    )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_checksums(run_dir: Path) -> None:
    """Record the sha256 of every file of a finished run (`checksums.json`, written atomically)."""
    files = {p.name: _sha256(p) for p in _run_files(run_dir)}
    tmp = run_dir / f".{CHECKSUMS}.tmp"
    tmp.write_text(json.dumps({"sha256": files}, indent=2, sort_keys=True))
    tmp.replace(run_dir / CHECKSUMS)


def run_damage(run_dir: str | Path) -> str | None:
    """What is wrong with a finished run's files (None when each matches its recorded checksum)."""
    run_dir = Path(run_dir)
    try:
        recorded = json.loads((run_dir / CHECKSUMS).read_text())["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"no readable {CHECKSUMS}"
    if not isinstance(recorded, dict) or "metrics.json" not in recorded:
        return f"{CHECKSUMS} lists no metrics.json"
    for name, expected in sorted(recorded.items()):
        path = run_dir / name
        if not path.is_file():
            return f"{name} is missing"
        if _sha256(path) != expected:
            return f"{name} does not match its checksum (truncated or changed)"
    return None


def _whole(run_dir: str | Path) -> bool:
    """A finished run may answer for a job only when its files are whole and pass the run folder check,
    and it is not a partial merge; a damaged one is reported."""
    from experiments.run_folder.check import RunFolderError, check_run_folder  # pandas: only when resuming

    damage = run_damage(run_dir)
    if damage is None:
        try:
            checked = check_run_folder(run_dir)
        except RunFolderError as err:
            damage = f"it fails the run folder check: {err}"
        else:
            damage = None if checked.partial is None else "it is a partial merge of some shards"
    if damage is not None:
        warnings.warn(
            f"finished run {run_dir} is damaged ({damage}): running it again", CacheWarning, stacklevel=3
        )
    return damage is None


def _index_path(cache_dir: str | Path, cfg_hash: str, suite_hash: str, code: str) -> Path:
    return Path(cache_dir) / "finished" / f"{cfg_hash}-{suite_hash[:16]}-{code}.json"


def record_finished(
    cache_dir: str | Path | None,
    cfg_hash: str,
    suite_hash: str,
    run_dir: Path,
    mlflow_run_id: str | None,
    code: str | None = None,
) -> None:
    """Record the checksums of a finished run's files (its folder's `checksums.json`), and point the disk
    index at the run directory (atomic, checksummed).

    `code`: the run version (`run_version(pipeline)`; default this process's `code_version()`). An
    unwritable cache warns once, loses nothing.
    """
    write_checksums(Path(run_dir))
    if not cache_dir:
        return
    code = code or code_version()
    entry = {
        "config_hash": cfg_hash,
        "suite_hash": suite_hash,
        "code_version": code,
        "run_dir": str(Path(run_dir).resolve()),
        "mlflow_run_id": mlflow_run_id,
    }
    cache_io.write_verified(_index_path(cache_dir, cfg_hash, suite_hash, code), json.dumps(entry).encode())


def finished_on_disk(
    cache_dir: str | Path | None, cfg_hash: str, suite_hash: str, code: str | None = None
) -> FinishedRun | None:
    if not cache_dir:
        return None
    code = code or code_version()
    path = _index_path(cache_dir, cfg_hash, suite_hash, code)
    payload = cache_io.read_verified(path)  # None: no entry, or a corrupt one (warned and deleted)
    if payload is None:
        return None
    try:
        entry = json.loads(payload)
        metrics = json.loads((Path(entry["run_dir"]) / "metrics.json").read_text())
    except (OSError, ValueError, KeyError):
        return None  # its run directory is gone or half-written: not finished
    if metrics.get("config_hash") != cfg_hash or metrics.get("suite", {}).get("content_hash") != suite_hash:
        return None
    if entry.get("code_version") != code or not _whole(entry["run_dir"]):
        return None
    return FinishedRun("disk", metrics["overall"], entry["run_dir"], entry.get("mlflow_run_id"))


def finished_in_mlflow(
    uri: str,
    experiment: str,
    experiment_id: str | None,
    cfg_hash: str,
    suite_hash: str,
    names: list[str],
    code: str | None = None,
) -> FinishedRun | None:
    """The newest FINISHED run with these hashes and this code; raises if the store cannot be asked."""
    wanted = {CONFIG_HASH_TAG: cfg_hash, "suite_hash": suite_hash, CODE_VERSION_TAG: code or code_version()}
    path = sqlite_path(uri)
    if path is not None and sqlite_run.at_head(path):  # a local store: read without importing MLflow
        stored = sqlite_run.newest_finished(path, experiment_id, experiment, wanted, PARTIAL_TAG)
        if stored is None:
            return None
        overall = overall_from_stored(stored, names)
        if overall is not None:
            run_dir = _run_dir_of(stored.tags, cfg_hash, suite_hash)
            return FinishedRun("mlflow", overall, run_dir, stored.run_id)
    import mlflow  # ~1 s to import: only when a store is asked

    client = mlflow.MlflowClient(tracking_uri=uri)
    if experiment_id is None:
        found = client.get_experiment_by_name(experiment)
        if found is None:
            return None
        experiment_id = found.experiment_id
    runs = client.search_runs(
        [experiment_id],
        filter_string=" and ".join(
            [*(f"tags.`{k}` = '{v}'" for k, v in wanted.items()), "attributes.status = 'FINISHED'"]
        ),
        order_by=["attributes.start_time DESC"],
        max_results=20,
    )
    runs = [r for r in runs if PARTIAL_TAG not in r.data.tags]  # a partial merge answers for no job
    if not runs:
        return None
    run = runs[0]
    # metrics.json names (`nDCG@10`) through the run's recorded key mapping, so a sweeper reads its objective.
    overall = overall_from_mlflow(client, run, names)
    return FinishedRun("mlflow", overall, _run_dir_of(run.data.tags, cfg_hash, suite_hash), run.info.run_id)


def _run_dir_of(tags: Mapping[str, str], cfg_hash: str, suite_hash: str) -> str | None:
    """The run directory an MLflow run was made from (its `memeval.run_dir` tag), if it is still whole."""
    path = tags.get(RUN_DIR_TAG)
    if not path:
        return None
    try:
        metrics = json.loads((Path(path) / "metrics.json").read_text())
    except (OSError, ValueError):
        return None
    suite = metrics.get("suite", {}).get("content_hash")
    same = metrics.get("config_hash") == cfg_hash and suite == suite_hash
    return path if same else None


def find_finished(
    *,
    cache_dir: str | Path | None,
    cfg_hash: str,
    suite_hash: str,
    tracker: Any | None,
    names: list[str],
    code: str | None = None,
) -> FinishedRun | None:
    """MLflow decides when tracking is on and the store answers; otherwise the disk index does. `code`:
    the run version (`run_version(pipeline)`). A run whose folder is damaged answers for nothing."""
    if tracker is not None:
        uri = resolve_uri(tracker.uri)
        try:
            found = finished_in_mlflow(
                uri, tracker.experiment, tracker.experiment_id, cfg_hash, suite_hash, names, code
            )
        except Exception as err:  # store down: the on-disk results are the source of truth
            print(f"warning: cannot ask the MLflow store {uri} for finished runs ({err}); using the disk")
        else:
            if found is not None and found.run_dir is not None and not _whole(found.run_dir):
                return None
            if found is not None and found.run_dir is None:  # point at the run directory too, if whole
                on_disk = finished_on_disk(cache_dir, cfg_hash, suite_hash, code)
                if on_disk is not None:
                    found = FinishedRun("mlflow", found.overall, on_disk.run_dir, found.mlflow_run_id)
            return found
    return finished_on_disk(cache_dir, cfg_hash, suite_hash, code)


@dataclass(frozen=True)
class Resume:
    """One job's resume: what it asked before the run (`finished`: the run that answers it, None when none
    does or resume is off) and what it records after (`record`)."""

    cache_dir: str | None
    cfg_hash: str
    suite_hash: str
    finished: FinishedRun | None

    @classmethod
    def ask(
        cls,
        settings: RunSettings,
        suite_hash: str,
        pipeline: Pipeline,
        tracker: Any | None,
        multirun: bool,
        told: PhaseCallback,
    ) -> Resume:
        """Before any work: the config's hash, and the finished run that answers this job, if resume is on
        (`resume`: auto = in a multirun). The run version covers code, libraries and model files: a change
        to any re-runs the job."""
        cfg_hash = config_hash(settings.config)
        finished = None
        if resume_enabled(settings.resume, multirun):
            told("look up a finished run")
            finished = find_finished(
                cache_dir=settings.cache_dir,
                cfg_hash=cfg_hash,
                suite_hash=suite_hash,
                tracker=tracker,
                names=list(dict.fromkeys([*settings.metrics, settings.objective])),
                code=run_version(pipeline),
            )
        return cls(settings.cache_dir, cfg_hash, suite_hash, finished)

    def record(self, run_dir: Path, version: str, log: Callable[[], str] | None = None) -> None:
        """After the run folder is written: its checksums and the disk index (before `log`, the MLflow log,
        which uploads the folder), then the index pointed at the MLflow run `log` returns. A log that
        raises leaves the run recorded on disk."""
        record_finished(self.cache_dir, self.cfg_hash, self.suite_hash, run_dir, None, code=version)
        if log is not None:
            run_id = log()
            record_finished(self.cache_dir, self.cfg_hash, self.suite_hash, run_dir, run_id, code=version)
