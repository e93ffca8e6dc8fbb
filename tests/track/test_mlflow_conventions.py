"""A run logged to MLflow follows MLflow's own conventions, so the UI's columns mean something: the
Source/Version columns (mlflow.source.* tags with the git commit), the Dataset column (the suite as a
run input with its content digest) and Duration (the run starts when the work started, not when the
logging did)."""

from __future__ import annotations

import time

import pytest

from experiments.configure.compose import compose_config
from experiments.run.app import run_experiment
from tests.support import CACHE_DIR

pytestmark = pytest.mark.slow  # a new SQLite store takes ~10 s to create


def test_a_logged_run_has_source_tags_its_suite_as_dataset_input_and_a_true_duration(tmp_path, monkeypatch):
    import mlflow

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # the store named below, not the environment's

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = compose_config(
        [
            "suite=spark25",
            "variant=bm25",
            "progress=false",
            f"cache_dir={tmp_path / 'cache'}",
            f"encoder.cache_dir={CACHE_DIR / 'embeddings'}",
            f"tracking.tracker.uri={uri}",
        ]
    )
    before_ms = int(time.time() * 1000)
    metrics = run_experiment(cfg, tmp_path / "run")
    client = mlflow.MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("memeval").experiment_id])
    tags = run.data.tags
    assert tags["mlflow.source.name"] == "memeval-run"
    assert tags.get("mlflow.source.git.commit", tags["git_commit"]) == tags["git_commit"]
    (dataset_input,) = run.inputs.dataset_inputs
    assert dataset_input.dataset.name == "spark25"
    assert metrics["suite"]["content_hash"].startswith(dataset_input.dataset.digest)
    assert {t.key: t.value for t in dataset_input.tags}["mlflow.data.context"] == "evaluation"
    # Duration covers the work: the run started before evaluation, within this test's window.
    wall_ms = metrics["wall_s"] * 1000
    assert before_ms <= run.info.start_time <= run.info.end_time - wall_ms + 1
