"""MLflow parent run for a Hydra multirun, created once in the launching process.

Wired in conf/config.yaml (`hydra.callbacks.mlflow_sweep`). On multirun start, before any job runs
(and before the launcher starts any worker), the callback creates the store if it is new, gets or
creates the experiment, and starts the parent run: workers never race on set-up (several processes
creating a new SQLite store crash; concurrent `set_experiment(new)` can log to Default, mlflow#12259).
It writes `<sweep dir>/mlflow_parent.json` with the store URI, experiment id and parent run id; each
job (in-process, joblib worker, submitit/SLURM job on a shared file system) reads it and logs its run
as a child. On multirun end the parent is marked FINISHED, or FAILED when a job failed.

Failures: a sweep that cannot start its parent (store down or half-made) or that gives an override key
twice stops before any job, with exit 2 (Hydra 1.3 only warns about an Exception from a callback, so
the callback raises SystemExit). A job that fails records it (`job_failed`: failed.json in its
directory, a FAILED child run with the error, the parent marked FAILED) and raises `JobFailed`, so
Hydra runs the remaining jobs and the sweep exits non-zero: 2 when the failed job's input was bad
(`JobBadInput`), as the run alone would, else 1.

Resume: with `resume` on (auto/true), re-running the same sweep (same config name and command-line
overrides) reopens that sweep's parent run instead of starting a new one, so the jobs that were
missing join the children that finished before the interruption. A job that a finished run of another
sweep (or a single run) answered is listed under this sweep's parent all the same (`job_reused`): a
FINISHED child tagged `memeval.reused_from` with that run's id, its params and metrics copied, so the
parent's table and charts show every point of the sweep.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from hydra.utils import instantiate
from omegaconf import DictConfig

from experiments.run_folder import (
    CODE_VERSION_TAG,
    CONFIG_HASH_TAG,
    PARTIAL_TAG,
    RUN_DIR_TAG,
    resume_enabled,
)
from experiments.track.mlflow_tracker import (
    REUSED_FROM_TAG,
    REUSED_TAG_PREFIX,
    finish_parent,
    log_dataset,
    open_parent_run,
    resolve_uri,
)
from experiments.track.run_params import override_values, sweep_axes, sweep_run_name

PARENT_FILE = "mlflow_parent.json"
FAILED_FILE = "failed.json"  # in a job's directory: that job failed (error, its FAILED child run)
ERROR_TAG = "memeval.error"
SWEEP_KEY_TAG = "memeval.sweep_key"
VARYING_KEY = "varying"  # in the parent file: the swept keys, which name each child


def sweep_key(config_name: str, overrides: list[str]) -> str:
    """Identity of a sweep command: the config name and its overrides (order-free)."""
    text = json.dumps([config_name, sorted(overrides)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def read_parent(sweep_dir: str | Path) -> dict[str, str]:
    """Tracker fields (uri, experiment_id, parent_run_id) for a job of this sweep; {} outside one."""
    path = Path(sweep_dir) / PARENT_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


class JobFailed(RuntimeError):
    """A sweep job failed with a clear error (results that could not be kept): Hydra records it, runs the
    remaining jobs, and re-raises it after them; the sweep then exits `exit_code` (experiments/exit_codes.py
    reads it, whichever launcher ran the job: the class travels back from a worker by name)."""

    exit_code = 1


class JobBadInput(JobFailed):
    """A sweep job refused its input (a missing suite, a bad key, a live system unreachable at start): the
    sweep exits 2, the project's code for bad input, as the same run alone would."""

    exit_code = 2


def duplicate_override_keys(overrides: list[str]) -> list[str]:
    """Keys given more than once on the command line (`k=1,2 k=3`): Hydra would apply the last silently."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    keys = [o.key_or_group + (f"@{o.package}" if o.package else "") for o in parsed]
    return sorted({k for k in keys if keys.count(k) > 1})


def _stop_sweep(message: str) -> None:
    """Stop the multirun before any job runs, with exit code 2.

    Hydra 1.3 turns an Exception raised by a callback into a warning and goes on launching the jobs
    (hydra/_internal/callbacks.py `_notify` catches Exception), so the callback raises SystemExit,
    which it does not catch.
    """
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


class MlflowSweepCallback(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        overrides = [str(o) for o in config.hydra.overrides.task]
        duplicates = duplicate_override_keys(overrides)
        if duplicates:
            _stop_sweep(
                f"the sweep gives {', '.join(duplicates)} more than once ({' '.join(overrides)}); "
                "give each key once, with all its values (key=a,b,c). No job has run."
            )
        if not config.get("tracking", {}).get("enabled", False):
            return
        sweep_dir = Path(str(config.hydra.sweep.dir))
        (sweep_dir / PARENT_FILE).unlink(missing_ok=True)  # a job must never join an earlier attempt's parent
        try:
            self._start(config)
        except Exception as err:  # fail before any job runs, saying which store and why
            uri = resolve_uri(config.tracking.tracker.get("uri"))
            _stop_sweep(
                f"cannot start the sweep's parent run in the MLflow store {uri}: {err}\n"
                "Start the store (or fix MLFLOW_TRACKING_URI), or run with tracking=none; no job has run."
            )

    def _start(self, config: DictConfig) -> None:
        overrides = [str(o) for o in config.hydra.overrides.task]
        axes = {**sweep_axes(overrides), **_sweeper_params(config)}
        # The sweep's values under `sweep.<key>`, never under the children's own key (whose column must
        # hold one number a row); the settings every job shares under their own. `+key`, `~key`: MLflow
        # rejects '+' and '~' in param keys; the bare key is the name.
        params = {key: value for key, value in override_values(overrides).items() if key not in axes}
        params.update({f"sweep.{key}": values for key, values in axes.items()})
        command = " ".join(["memeval-run -m", *overrides])
        swept = "; ".join(f"{key} over {values}" for key, values in axes.items()) or "no swept setting"
        info = open_parent_run(
            instantiate(config.tracking.tracker),
            key_tag=SWEEP_KEY_TAG,
            key=sweep_key(str(config.hydra.job.config_name), overrides),
            run_name=sweep_run_name(overrides, axes, config.hydra.runtime.choices.get("variant")),
            tags={"memeval.sweep_dir": str(config.hydra.sweep.dir)},
            params=params,
            source="memeval-run",
            description=f"A sweep of {swept}.\n\n`{command}`",
            reopen=resume_enabled(config.get("resume", "auto"), multirun=True),
        )
        parent_id, experiment_id = info["parent_run_id"], info["experiment_id"]
        sweep_dir = Path(str(config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        info[VARYING_KEY] = list(
            axes
        )  # each child is named by its value of these (run_params.child_run_name)
        (sweep_dir / PARENT_FILE).write_text(json.dumps(info, indent=2))
        print(f"MLflow parent run {parent_id} (experiment {experiment_id}) for sweep {sweep_dir}")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """The parent ends FAILED if a job of this sweep failed, else FINISHED, with its summary (the
        best child by the run's objective).

        Hydra's sweepers re-raise a failed job's error after the batch and skip this hook; the failed job
        has then marked the parent FAILED itself (`job_failed`)."""
        sweep_dir = Path(str(config.hydra.sweep.dir))
        info = read_parent(sweep_dir)
        if not info:
            return
        failed = failed_jobs(sweep_dir)
        status = "FAILED" if failed else "FINISHED"
        try:
            finish_parent(
                info["uri"], info["parent_run_id"], status=status, objective=str(config.get("objective"))
            )
        except Exception as err:  # the children are logged (or on disk); only the parent's status is stale
            print(f"warning: could not mark the sweep's parent run {info['parent_run_id']} {status}: {err}")


def _sweeper_params(config: DictConfig) -> dict[str, str]:
    """A sweep stated in config (`hydra.sweeper.params`, e.g. conf/sweep/*.yaml): key -> its values."""
    params = config.hydra.get("sweeper", {}).get("params") or {}
    return {str(k).lstrip("+~"): str(v) for k, v in params.items()}


def tracker_fields(parent: dict[str, Any]) -> dict[str, str]:
    """What a child's MlflowTracker takes from the sweep's parent file (the rest is for naming)."""
    return {k: v for k, v in parent.items() if k in ("uri", "experiment_id", "parent_run_id")}


def failed_jobs(sweep_dir: str | Path) -> list[Path]:
    """Job directories of this sweep whose job failed (they hold failed.json)."""
    root = Path(sweep_dir)
    return sorted(p.parent for p in root.rglob(FAILED_FILE)) if root.is_dir() else []


def job_started(job_dir: Path) -> None:
    """A job (re)starts: a failure recorded by an earlier attempt in this directory no longer holds."""
    (job_dir / FAILED_FILE).unlink(missing_ok=True)


def job_failed(
    job_dir: Path, parent: dict[str, str], error: BaseException, *, run_name: str, tags: dict[str, str]
) -> str | None:
    """Record a failed job: failed.json in its directory and, in a tracked sweep, a FAILED child run
    holding the error, and the parent marked FAILED (the remaining jobs still run). Returns the child's id.
    """
    message = f"{type(error).__name__}: {error}"
    job_dir.mkdir(parents=True, exist_ok=True)
    note: dict[str, Any] = {"error": message, "mlflow_run_id": None}
    if parent:
        import mlflow  # ~1 s to import: only when a store is asked

        try:
            client = mlflow.MlflowClient(tracking_uri=parent["uri"])
            child = client.create_run(
                parent["experiment_id"],
                run_name=run_name,
                tags={**tags, "mlflow.parentRunId": parent["parent_run_id"], ERROR_TAG: message[:4000]},
            )
            client.log_text(child.info.run_id, message, "error.txt")
            client.set_terminated(child.info.run_id, "FAILED")
            client.set_terminated(parent["parent_run_id"], "FAILED")
            note["mlflow_run_id"] = child.info.run_id
        except Exception as err:  # the store is down too: the job directory still says it failed
            where = parent["uri"]
            print(f"warning: could not record the failed job in MLflow {where}: {err}", file=sys.stderr)
    (job_dir / FAILED_FILE).write_text(json.dumps(note, indent=2))
    return note["mlflow_run_id"]


_BATCH = 100  # params or metrics per log_batch call (MLflow takes at most 100 params in one)
_IDENTITY_TAGS = (CONFIG_HASH_TAG, CODE_VERSION_TAG, "suite_hash", RUN_DIR_TAG, PARTIAL_TAG)


def job_reused(uri: str, parent_run_id: str, cfg_hash: str, run_id: str) -> None:
    """A job that the finished run `run_id` answered (resume): the parent names it in a tag (the run's
    results are read from there: experiments/track/finished_runs.py) and, unless `run_id` is already this
    sweep's own child (a re-run of the same sweep) or already listed, it is listed under the parent as a
    FINISHED child that says which run it reuses, with that run's name, params and metrics, so an MLflow
    user browsing the parent sees every point of the sweep."""
    import mlflow  # ~1 s to import: only a tracked sweep's skipped job needs it
    from mlflow.entities import Metric, Param

    client = mlflow.MlflowClient(tracking_uri=uri)
    client.set_tag(parent_run_id, f"{REUSED_TAG_PREFIX}{cfg_hash}", run_id)
    original = client.get_run(run_id)
    above = original.data.tags.get("mlflow.parentRunId")
    if above == parent_run_id:
        return
    if above and client.get_run(above).data.tags.get("mlflow.parentRunId") == parent_run_id:
        return  # a shard below this sweep's merged child
    experiment_id = client.get_run(parent_run_id).info.experiment_id
    listed = client.search_runs(
        [experiment_id],
        f"tags.`mlflow.parentRunId` = '{parent_run_id}' and tags.`{REUSED_FROM_TAG}` = '{run_id}'",
        max_results=1,
    )
    if listed:
        return
    note = (
        f"Reused: resume found this point's finished run {run_id} ({original.info.run_name}), so this sweep "
        "did not run it again. Its params and metrics are copied here so the sweep lists every point; its "
        "files (per_query.csv, config.yaml) are on that run."
    )
    # Its tags as the other rows have them (variant, suite, latency's scope), but none that would make a
    # reader take this row for the run itself: the identity resume looks up, the folder it was logged from.
    tags = {
        k: v for k, v in original.data.tags.items() if not k.startswith("mlflow.") and k not in _IDENTITY_TAGS
    }
    tags.update({"mlflow.parentRunId": parent_run_id, REUSED_FROM_TAG: run_id, "mlflow.note.content": note})
    child = client.create_run(experiment_id, run_name=original.info.run_name, tags=tags)
    child_id = child.info.run_id
    if original.inputs.dataset_inputs:  # the suite it was scored on, as on every other row
        log_dataset(client, child_id, original.inputs.dataset_inputs[0])
    params = [Param(k, v) for k, v in original.data.params.items()]
    now = int(time.time() * 1000)
    metrics = [Metric(k, v, now, 0) for k, v in original.data.metrics.items()]
    for start in range(0, max(len(params), len(metrics)), _BATCH):
        client.log_batch(
            child_id, params=params[start : start + _BATCH], metrics=metrics[start : start + _BATCH]
        )
    client.set_terminated(child_id, "FINISHED")
