"""A merged run (experiments/merge.py) logged to MLflow: one run, the shards' runs re-parented below it.

The shards' runs are found by the folder each was logged from (`memeval.run_dir`); their params, less
the shard, are the merged run's (so MLflow's compare view lines it up with an unsharded run of the same
config). In a sweep the merged run is a child of the sweep's parent: parent -> merged run -> shards.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import mlflow
import pandas as pd
from hydra.utils import instantiate

from experiments.track.mlflow_tracker import (
    REUSED_FROM_TAG,
    REUSED_TAG_PREFIX,
    SuiteDataset,
    dataset_name,
    ensure_store,
    latency_for_mlflow,
    mlflow_metric_names,
    mlflow_metrics,
    resolve_uri,
)
from experiments.track.run_params import param_text, run_params
from experiments.track.sweep_parent import tracker_fields

PARENT_TAG = "mlflow.parentRunId"
RUN_DIR_TAG = "memeval.run_dir"  # set on every run by MlflowTracker.log


def shard_run_ids(client: Any, folders: Sequence[Path]) -> dict[Path, str]:
    """The MLflow run each shard folder was logged as (the newest, if logged twice); folders of untracked
    shards are absent."""
    experiments = [e.experiment_id for e in client.search_experiments()]
    found: dict[Path, str] = {}
    for folder in folders:
        runs = client.search_runs(
            experiments,
            filter_string=f"tags.`{RUN_DIR_TAG}` = '{folder.resolve()}'",
            order_by=["attributes.start_time DESC"],
            max_results=1,
        )
        if runs:
            found[folder] = runs[0].info.run_id
    return found


def log_merged(
    target: Path,
    runs: Sequence[Any],
    whole: Mapping[str, Any],
    metrics: Mapping[str, Any],
    frame: pd.DataFrame,
    tags: Mapping[str, str],
    *,
    parent: Mapping[str, str] | None = None,
    run_name: str | None = None,
) -> str:
    """Log the merged folder `target` as one run (a child of a sweep's `parent` when given), and make each
    tracked shard's run its child. Returns the merged run's id; merged.json names the shards' runs."""
    tracker = instantiate(whole["tracking"]["tracker"], **tracker_fields(dict(parent or {})))
    uri = resolve_uri(tracker.uri)
    ensure_store(uri)
    client = mlflow.MlflowClient(tracking_uri=uri)
    shard_ids = shard_run_ids(client, [r.folder for r in runs])
    shard_runs = [client.get_run(i) for i in shard_ids.values()]
    if shard_runs:  # the shards' own params (each setting once, as the runner chose), less the shard
        params = dict(shard_runs[0].data.params)
        params.pop("shards", None)
        params["shard"] = param_text(None)
    else:
        params = run_params(whole)  # resolved: no setting only refers to another
    latency, latency_note = latency_for_mlflow(metrics, frame)
    suite = metrics["suite"]
    suite_path = (whole.get("suite") or {}).get("path")
    run_id = tracker.log(
        run_name=run_name or f"{suite['name']}-{metrics.get('variant')}",
        params=params,
        metrics={**mlflow_metrics(metrics), **latency},
        metric_names=mlflow_metric_names(metrics),
        tags={**tags, **latency_note},
        run_dir=target,
        config_text=(target / "config.yaml").read_text(),
        started_ms=min((r.info.start_time for r in shard_runs if r.info.start_time), default=None),
        dataset=SuiteDataset(
            name=dataset_name(suite["name"], suite_path),
            digest=suite["content_hash"],
            source=str(Path(suite_path).resolve()) if suite_path else suite["name"],
            profile={k: v for k, v in suite.items() if k not in ("labels", "notes")},
        ),
    )
    for shard_id in shard_ids.values():
        client.set_tag(shard_id, PARENT_TAG, run_id)
    note_path = target / "merged.json"
    note = json.loads(note_path.read_text())
    note["mlflow_run_id"] = run_id
    for entry, run in zip(note["shards"], runs, strict=True):
        entry["mlflow_run_id"] = shard_ids.get(run.folder)
    note_path.write_text(json.dumps(note, indent=2))
    return run_id


def forget_reused_shards(parent: Mapping[str, str], folders: Sequence[Path]) -> None:
    """A re-run sweep's skipped shard jobs tag its parent with the shard runs they reused
    (`memeval.reused.<config hash>`); the merged run stands for those shards, so the tags go: a report of
    the sweep's runs reads the merged runs, never a shard (of another suite: the report would refuse)."""
    client = mlflow.MlflowClient(tracking_uri=parent["uri"])
    shards = set(shard_run_ids(client, folders).values())
    for key, value in client.get_run(parent["parent_run_id"]).data.tags.items():
        if key.startswith(REUSED_TAG_PREFIX) and value in shards:
            client.delete_tag(parent["parent_run_id"], key)
    # ...and so do the rows that listed them under the parent (sweep_parent.job_reused)
    listed = client.search_runs(
        [parent["experiment_id"]], f"tags.`{PARENT_TAG}` = '{parent['parent_run_id']}'", max_results=5000
    )
    for row in listed:
        if row.data.tags.get(REUSED_FROM_TAG) in shards:
            client.delete_run(row.info.run_id)
