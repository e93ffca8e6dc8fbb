"""A finished run logged to MLflow: its params (from the resolved config), metrics (a latency only when
measured), tags, the suite as its dataset, and its run folder's files as artifacts."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments.suites.suite import Suite
from experiments.track.mlflow_tracker import (
    MlflowTracker,
    SuiteDataset,
    dataset_name,
    latency_for_mlflow,
    mlflow_metric_names,
    mlflow_metrics,
)
from experiments.track.run_params import run_params

if TYPE_CHECKING:  # pandas and scipy: imported when a run evaluates (tests/project/test_entry_points.py)
    from experiments.evaluate.table import Evaluation


def log_run(
    tracker: MlflowTracker,
    config: Mapping[str, Any],
    references: AbstractSet[str],
    suite: Suite,
    evaluation: Evaluation,
    *,
    run_name: str,
    tags: Mapping[str, str],
    run_tags: Mapping[str, str],
    run_dir: Path,
    config_text: str,
    started_ms: int,
) -> str:
    """Log the run; its MLflow run id. `config`: the run's config resolved, `references` the keys in it
    that only refer to another (experiments/configure/settings.py `RunSettings`); `run_tags` (the caller's
    own) go last, over `tags`."""
    latency, latency_note = latency_for_mlflow(evaluation.metrics, evaluation.per_query)
    suite_path = (config.get("suite") or {}).get("path")
    return tracker.log(
        run_name=run_name,
        params=run_params(config, references),
        metrics={**mlflow_metrics(evaluation.metrics), **latency},
        metric_names=mlflow_metric_names(evaluation.metrics),
        tags={**tags, **latency_note, **run_tags},
        run_dir=run_dir,
        config_text=config_text,
        started_ms=started_ms,
        dataset=SuiteDataset(
            name=dataset_name(suite.name, suite_path),
            digest=suite.content_hash,
            source=str(Path(suite_path).resolve()) if suite_path else suite.name,
            profile={k: v for k, v in suite.summary().items() if k != "labels"},
        ),
    )
