"""What a researcher sees in MLflow after a sweep and a study (issue: "MLflow runs you can compare at a
glance"), asserted through MLflow's own client on a fresh SQLite store: the experiment opens on its runs
table, children are named by what varies, parents carry a description, summary metrics, source and git
tags and no list under a child's param key, every child has latency and says what it covers, CI bounds
are metrics, each setting is logged once and housekeeping not at all."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from experiments.study.experiment import ROW_TAG, run_plan
from experiments.study.plan import load_plan
from experiments.track.mlflow_tracker import (
    BEST_CHILD_TAG,
    EXPERIMENT_KIND,
    EXPERIMENT_KIND_TAG,
    LATENCY_TAG,
    TRACKING_STORE_TAG,
)
from tests.support import CACHE_DIR

pytestmark = pytest.mark.slow  # a new SQLite store takes ~10 s to create; three spark25 runs


def _children(client, parent_id):
    parent = client.get_run(parent_id)
    return client.search_runs(
        [parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent_id}'", max_results=100
    )


def _assert_parent_and_children(client, parent, children, *, names, source):
    tags = parent.data.tags
    assert tags["mlflow.note.content"].strip()  # a description
    assert tags["mlflow.source.name"] == source and tags["mlflow.source.git.commit"] == tags["git_commit"]
    assert tags["mlflow.user"] and tags[TRACKING_STORE_TAG].startswith("sqlite:///")
    assert "best.nDCG_at_10" in parent.data.metrics and parent.data.metrics["children_finished"] == 3
    best = max(children, key=lambda c: c.data.metrics["nDCG_at_10"])
    assert tags[BEST_CHILD_TAG].startswith(best.info.run_name)
    assert parent.data.metrics["best.nDCG_at_10"] == best.data.metrics["nDCG_at_10"]
    assert parent.inputs.dataset_inputs, "the parent shows the suite its children were scored on"
    # No list under a child's param key: the weight column holds one number a row.
    assert "stage.instruction_boost.weight" not in parent.data.params
    # Duration is the children's, not the time to a later re-run.
    assert parent.info.end_time == max(c.info.end_time for c in children)
    assert sorted(c.info.run_name for c in children) == sorted(names)
    for child in children:
        params, metrics, ctags = child.data.params, child.data.metrics, child.data.tags
        assert {"latency_ms_p50", "latency_ms_mean"} <= set(metrics), child.info.run_name
        assert ctags[LATENCY_TAG]
        assert metrics["nDCG_at_10_ci_lo"] <= metrics["nDCG_at_10"] <= metrics["nDCG_at_10_ci_hi"]
        assert "encoder.model" in params and not any(k.startswith("stage.dense.encoder.") for k in params)
        assert not any(k.endswith(("_target_", "_partial_")) for k in params)
        assert not any(k.split(".")[0] in ("progress", "resume", "cache_dir", "tracking") for k in params)
        assert ctags["mlflow.user"] == tags["mlflow.user"]
        # metrics first, counts after: MLflow's compare page plots the first metric logged by default
        (dataset,) = child.inputs.dataset_inputs
        assert len(dataset.dataset.digest) == 8


def test_a_sweep_and_a_study_read_at_a_glance_in_mlflow(tmp_path, monkeypatch):
    import mlflow

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    common = [
        "variant=exp05",
        "progress=false",
        f"cache_dir={tmp_path / 'cache'}",
        f"encoder.cache_dir={CACHE_DIR / 'embeddings'}",
        f"tracking.tracker.uri={uri}",
    ]
    # The sweep, as a user runs it (the console script's module, from another folder).
    script = Path(sys.executable).parent / "memeval-run"
    sweep = subprocess.run(
        [str(script), "-m", "stage.instruction_boost.weight=0,0.2,0.35", *common,
         f"hydra.sweep.dir={tmp_path / 'sweep'}"],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    client = mlflow.MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("memeval")
    assert experiment.tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND  # model development, not GenAI
    (parent,) = client.search_runs([experiment.experiment_id], "tags.`memeval.sweep_key` != ''")
    assert parent.data.params["sweep.stage.instruction_boost.weight"] == "0,0.2,0.35"
    children = _children(client, parent.info.run_id)
    names = ["exp05 weight=0", "exp05 weight=0.2", "exp05 weight=0.35"]
    _assert_parent_and_children(client, parent, children, names=names, source="memeval-run")
    weights = sorted(c.data.params["stage.instruction_boost.weight"] for c in children)
    assert weights == ["0", "0.2", "0.35"]

    # The study of the same weights: rows named as its report names them, children as the sweep's.
    plan = load_plan(
        {
            "title": "Boost weight on spark25",
            "description": "Three weights against weight 0.",
            "suite": {"name": "spark25"},
            "variant": "exp05",
            "sweep": {"stage.instruction_boost.weight": [0.0, 0.2, 0.35]},
            "baseline": "stage.instruction_boost.weight=0.0",
            "metrics": ["nDCG@10", "P@5"],
            "primary": "nDCG@10",
        },
        name="glance",
    )
    tracking = {"enabled": True, "tracker": {"_target_": "experiments.track.mlflow_tracker.MlflowTracker",
                                            "experiment": "memeval-study", "uri": uri}}  # fmt: skip
    monkeypatch.chdir(tmp_path)
    # Its own experiment and cache: the sweep's finished runs would answer its rows otherwise.
    result = run_plan(
        plan, runs_dir=tmp_path / "study", tracking=tracking, cache_dir=str(tmp_path / "cache2")
    )
    study_parent = client.get_run(result.parent_run_id)
    assert "Boost weight on spark25" in study_parent.data.tags["mlflow.note.content"]
    assert "Holm" in study_parent.data.tags["mlflow.note.content"]
    study_children = _children(client, result.parent_run_id)
    _assert_parent_and_children(client, study_parent, study_children, names=names, source="memeval-study")
    assert sorted(c.data.tags[ROW_TAG] for c in study_children) == sorted(r.name for r in plan.rows)
    # One value, one spelling: the study's 0.0 is the sweep's 0.
    assert sorted(c.data.params["stage.instruction_boost.weight"] for c in study_children) == weights
