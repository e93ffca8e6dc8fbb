"""MLflow parent run for a Hydra multirun, created once in the launching process.

Wired in conf/config.yaml (`hydra.callbacks.mlflow_sweep`). On multirun start, before any job runs
(and before the launcher starts any worker), the callback creates the store if it is new, gets or
creates the experiment, and starts the parent run: workers never race on set-up (several processes
creating a new SQLite store crash; concurrent `set_experiment(new)` can log to Default, mlflow#12259).
It writes `<sweep dir>/mlflow_parent.json` with the store URI, experiment id and parent run id; each
job (in-process, joblib worker, submitit/SLURM job on a shared file system) reads it and logs its run
as a child. On multirun end the parent is marked FINISHED.

Resume: with `resume` on (auto/true), re-running the same sweep (same config name and command-line
overrides) reopens that sweep's parent run instead of starting a new one, so the jobs that were
missing join the children that finished before the interruption.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from experiments.sweeps import resume_enabled

PARENT_FILE = "mlflow_parent.json"
SWEEP_KEY_TAG = "memeval.sweep_key"


def sweep_key(config_name: str, overrides: list[str]) -> str:
    """Identity of a sweep command: the config name and its overrides (order-free)."""
    text = json.dumps([config_name, sorted(overrides)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def read_parent(sweep_dir: str | Path) -> dict[str, str]:
    """Tracker fields (uri, experiment_id, parent_run_id) for a job of this sweep; {} outside one."""
    path = Path(sweep_dir) / PARENT_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


class MlflowSweepCallback(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if not config.get("tracking", {}).get("enabled", False):
            return
        from experiments.tracking import TrackingError, resolve_uri

        try:
            self._start(config)
        except Exception as err:  # fail before any job runs, saying which store and why
            uri = resolve_uri(config.tracking.tracker.get("uri"))
            raise TrackingError(
                f"cannot start the sweep's parent run in the MLflow store {uri}: {err}\n"
                "Start the store (or fix MLFLOW_TRACKING_URI), or run with tracking=none; no job has run."
            ) from err

    def _start(self, config: DictConfig) -> None:
        import mlflow
        from hydra.utils import instantiate
        from mlflow.entities import Param

        from experiments.tracking import _experiment_id, resolve_uri

        tracker = instantiate(config.tracking.tracker)
        uri = resolve_uri(tracker.uri)
        mlflow.set_tracking_uri(uri)  # a new SQLite store is created here, once
        experiment_id = tracker.experiment_id or _experiment_id(tracker.experiment)
        client = mlflow.MlflowClient(tracking_uri=uri)
        overrides = [str(o) for o in config.hydra.overrides.task]
        key = sweep_key(str(config.hydra.job.config_name), overrides)
        parent_id = None
        if resume_enabled(config.get("resume", "auto"), multirun=True):
            previous = client.search_runs(
                [experiment_id],
                filter_string=f"tags.`{SWEEP_KEY_TAG}` = '{key}'",
                order_by=["attributes.start_time DESC"],
                max_results=1,
            )
            if previous:
                parent_id = previous[0].info.run_id
                client.update_run(parent_id, status="RUNNING")
        if parent_id is None:
            name = "sweep " + " ".join(overrides)
            parent = client.create_run(
                experiment_id,
                run_name=name[:250],
                tags={SWEEP_KEY_TAG: key, "memeval.sweep_dir": str(config.hydra.sweep.dir)},
            )
            parent_id = parent.info.run_id
            # `+sweep=...`, `~key`: MLflow rejects '+' and '~' in param keys; the bare key is the name.
            pairs = (o.split("=", 1) for o in overrides if "=" in o)
            params = [Param(key.lstrip("+~"), value[:500]) for key, value in pairs]
            if params:
                client.log_batch(parent_id, params=params)
        sweep_dir = Path(str(config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        info = {"uri": uri, "experiment_id": experiment_id, "parent_run_id": parent_id}
        (sweep_dir / PARENT_FILE).write_text(json.dumps(info, indent=2))
        print(f"MLflow parent run {parent_id} (experiment {experiment_id}) for sweep {sweep_dir}")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        info = read_parent(str(config.hydra.sweep.dir))
        if not info:
            return
        import mlflow

        try:
            mlflow.MlflowClient(tracking_uri=info["uri"]).set_terminated(info["parent_run_id"], "FINISHED")
        except Exception as err:  # the children are logged (or on disk); only the parent's status is stale
            print(f"warning: could not mark the sweep's parent run {info['parent_run_id']} FINISHED: {err}")
