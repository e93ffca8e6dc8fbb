"""The runner end to end on real BEAM 100K: files on disk, a real MLflow store, re-checkable numbers."""

from __future__ import annotations

import json
import subprocess
import sys

import ir_measures
import mlflow
import pandas as pd
import pytest

from experiments.suites.beam import ABILITIES
from tests.support import CACHE_DIR


@pytest.fixture(scope="module")
def hybrid_run(tmp_path_factory, beam_100k):
    tmp = tmp_path_factory.mktemp("e2e")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.run",
            "suite=beam",
            f"suite.path={beam_100k}",
            "variant=hybrid",
            f"tracking.tracker.uri={uri}",
            "tracking.tracker.experiment=e2e",
            f"hydra.run.dir={tmp / 'run'}",
            # A fresh candidate cache, so this run measures its latency (a prefix-cache hit would leave it
            # unmeasured: null); the shared embedding cache keeps the 100K document vectors warm.
            f"cache_dir={tmp / 'cache'}",
            f"encoder.cache_dir={CACHE_DIR / 'embeddings'}",
            "progress=false",
        ],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=1200,
        env={**__import__("os").environ, "MLFLOW_TRACKING_URI": ""},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp / "run", uri, proc.stdout


def test_run_writes_every_file_with_all_ten_abilities(hybrid_run):
    run_dir, _, stdout = hybrid_run
    for name in (
        "metrics.json",
        "per_query.csv",
        "run.trec",
        "ranking.csv",
        "qrels.tsv",
        "config.yaml",
        "tags.json",
    ):
        assert (run_dir / name).is_file(), name
    metrics = json.loads((run_dir / "metrics.json").read_text())
    tags = json.loads((run_dir / "tags.json").read_text())
    assert tags["suite_hash"] == metrics["suite"]["content_hash"] and tags["variant"] == "hybrid"
    assert metrics["n_queries"] == 199
    assert set(metrics["by_label"]["ability"]) == set(ABILITIES)
    assert metrics["by_label"]["ability"]["abstention"]["abstention_n"] == 20
    assert metrics["scope_leaks"] == 0
    assert metrics["overall"]["latency_ms_p95"] >= metrics["overall"]["latency_ms_p50"] > 0
    assert 0 < metrics["overall"]["R@10"] < 1
    low, high = metrics["overall_ci95"]["R@10"]
    assert low <= metrics["overall"]["R@10"] <= high
    per_query = pd.read_csv(run_dir / "per_query.csv")
    assert len(per_query) == 199 and {"label.ability", "R@10", "latency_ms"} <= set(per_query.columns)
    assert "instruction_following" in stdout and "results in" in stdout


def test_numbers_agree_with_ir_measures_on_the_written_files(hybrid_run):
    run_dir, _, _ = hybrid_run
    metrics = json.loads((run_dir / "metrics.json").read_text())["overall"]
    qrels = list(ir_measures.read_trec_qrels(str(run_dir / "qrels.tsv")))
    run = list(ir_measures.read_trec_run(str(run_dir / "run.trec")))
    measures = {
        "R@10": ir_measures.R @ 10,
        "nDCG@10": ir_measures.nDCG @ 10,
        "P@5": ir_measures.P @ 5,
        "AP": ir_measures.AP,
        "RR": ir_measures.RR,
    }
    theirs = ir_measures.calc_aggregate(list(measures.values()), qrels, run)
    for name, measure in measures.items():
        assert metrics[name] == pytest.approx(theirs[measure], abs=1e-9), name


def test_the_mlflow_store_holds_the_run_with_metrics_params_tags_and_files(hybrid_run):
    run_dir, uri, _ = hybrid_run
    client = mlflow.MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("e2e")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1
    run = runs[0]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert run.info.status == "FINISHED"
    assert run.data.metrics["R_at_10"] == pytest.approx(metrics["overall"]["R@10"])
    assert run.data.metrics["ability.instruction_following.R_at_10"] == pytest.approx(
        metrics["by_label"]["ability"]["instruction_following"]["R@10"]
    )
    assert run.data.params["stage.fusion.k"] == "60"
    assert run.data.tags["suite_hash"] == metrics["suite"]["content_hash"]
    assert "all-MiniLM-L6-v2@" in run.data.tags["model_revisions"]
    files = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"metrics.json", "per_query.csv", "run.trec", "ranking.csv", "qrels.tsv", "config.yaml"} <= files
