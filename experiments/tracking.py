"""MLflow tracking: one MLflow run per harness run, with params, metrics, tags and files.

Store: `MLFLOW_TRACKING_URI` when set (a team's `mlflow server`), else the config's `uri`, else a
local SQLite store `./mlflow.db` (artifacts in `./mlruns`), which needs no server. Results are
always on disk in the run directory first, so a store that is down loses nothing: the error names
the store and the directory that holds the results.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.metrics import metric_name_for_mlflow

MAX_PARAM_CHARS = 500  # long values are truncated in params; the full config is an artifact


class TrackingError(RuntimeError):
    pass


def resolve_uri(uri: str | None = None) -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or uri or f"sqlite:///{Path.cwd() / 'mlflow.db'}"


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{name}."))
        else:
            text = str(value)
            out[name] = text if len(text) <= MAX_PARAM_CHARS else text[: MAX_PARAM_CHARS - 3] + "..."
    return out


def mlflow_metrics(summary: Mapping[str, Any]) -> dict[str, float]:
    """metrics.json -> flat MLflow metric keys: `R_at_10`, `ability.knowledge_update.R_at_10`..."""

    def key(name: str) -> str:
        try:
            return metric_name_for_mlflow(name)
        except ValueError:  # not a relevance metric (latency, counts): keep as is
            return name.replace("@", "_at_")

    out = {
        key(k): float(v)
        for k, v in summary["overall"].items()
        if isinstance(v, (int, float)) and v is not None
    }
    for label, values in summary.get("by_label", {}).items():
        for value, stats in values.items():
            for name, v in stats.items():
                if isinstance(v, (int, float)) and v is not None:
                    out[f"{label}.{value}.{key(name)}".replace(" ", "_")] = float(v)
    out["scope_leaks"] = float(summary.get("scope_leaks", 0))
    return out


def git_commit() -> str:
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
    ) -> str:
        import mlflow

        uri = resolve_uri(self.uri)
        try:
            mlflow.set_tracking_uri(uri)
            experiment_id = self.experiment_id or _experiment_id(self.experiment)
            client = mlflow.MlflowClient()
            run_tags = dict(tags)
            if self.parent_run_id:
                run_tags["mlflow.parentRunId"] = self.parent_run_id
            run = client.create_run(experiment_id, run_name=run_name, tags=run_tags)
            run_id = run.info.run_id
            try:
                from mlflow.entities import Metric, Param

                client.log_batch(run_id, params=[Param(k, v) for k, v in params.items()])
                ts = _now_ms()
                metric_items = [Metric(k, v, ts, 0) for k, v in metrics.items()]
                for start in range(0, len(metric_items), 900):  # the REST API caps a batch at 1000
                    client.log_batch(run_id, metrics=metric_items[start : start + 900])
                client.log_text(run_id, config_text, "config.yaml")
                for path in sorted(run_dir.iterdir()):
                    if path.is_file():
                        client.log_artifact(run_id, str(path))
                client.set_terminated(run_id, "FINISHED")
            except BaseException:
                client.set_terminated(run_id, "FAILED")
                raise
            return run_id
        except Exception as err:
            raise TrackingError(
                f"could not log to the MLflow store {uri}: {err}\nThe results are safe on disk in {run_dir}"
            ) from err


def _experiment_id(name: str) -> str:
    import mlflow

    experiment = mlflow.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    try:
        return mlflow.create_experiment(name)
    except Exception:  # created meanwhile by another process
        experiment = mlflow.get_experiment_by_name(name)
        if experiment is None:
            raise
        return experiment.experiment_id


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)
