"""Sweeps against a real MLflow SQLite store: one parent per multirun with its children linked, resume
skips finished jobs (and never counts a RUNNING or FAILED run), a SIGKILLed sweep completes on re-run,
joblib workers share one store without lock errors, and submitit's local executor runs a sweep.

Slow: each sweep is a subprocess (~10 s of imports) and a new SQLite store costs ~20 s of migrations,
so the tests copy one store made per session.
"""

from __future__ import annotations

import json
import os
import signal
import time

import mlflow
import pytest

from experiments.run.resume import CODE_VERSION_TAG, CONFIG_HASH_TAG, finished_in_mlflow
from tests.sweep_support import copy_store, job_dirs, parents_and_children, runs, sweep, write_tiny_suite

pytestmark = [pytest.mark.slow, pytest.mark.integration]


@pytest.fixture(scope="session")
def store_template(tmp_path_factory):
    folder = tmp_path_factory.mktemp("store_template")
    mlflow.MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlflow.db'}").search_experiments()
    return folder / "mlflow.db"


@pytest.fixture(scope="module")
def tracked(tmp_path_factory, store_template):
    tmp = tmp_path_factory.mktemp("tracked")
    suite = write_tiny_suite(tmp)
    uri = copy_store(store_template, tmp / "store")
    first = sweep(tmp, suite, tmp / "first", "stage.bm25.k1=1.2,1.5,1.8", uri=uri)
    return tmp, suite, uri, first


def test_a_multirun_logs_one_parent_and_a_linked_child_per_job(tracked):
    tmp, _, uri, _ = tracked
    parents, children = parents_and_children(uri)
    assert len(parents) == 1 and len(children) == 3
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parent.info.run_id}
    assert all(c.info.status == "FINISHED" for c in children)
    assert len({c.data.tags[CONFIG_HASH_TAG] for c in children}) == 3
    assert sorted(c.data.params["stage.bm25.k1"] for c in children) == ["1.2", "1.5", "1.8"]
    info = json.loads((tmp / "first" / "mlflow_parent.json").read_text())
    assert info["parent_run_id"] == parent.info.run_id
    assert all(r.info.experiment_id == info["experiment_id"] for r in runs(uri))


def test_rerunning_the_same_sweep_logs_nothing_new_and_reuses_its_parent(tracked):
    tmp, suite, uri, _ = tracked
    before = {r.info.run_id for r in runs(uri)}
    again = sweep(tmp, suite, tmp / "again", "stage.bm25.k1=1.2,1.5,1.8", uri=uri)
    assert {r.info.run_id for r in runs(uri)} == before
    assert again.stdout.count("skipped: config") == 3
    assert all(
        (j / "skipped.json").is_file() and not (j / "metrics.json").exists() for j in job_dirs(tmp / "again")
    )
    parents, _ = parents_and_children(uri)
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"


def test_a_running_or_failed_run_does_not_count_as_finished(tracked):
    _, _, uri, _ = tracked
    _, children = parents_and_children(uri)
    child = children[0]
    names = ["nDCG@10"]
    args = (uri, "sweeps", None, child.data.tags[CONFIG_HASH_TAG], child.data.tags["suite_hash"], names)
    # The run's version (code, libraries, every stage's fingerprint) is part of what "finished" means.
    args = (*args, child.data.tags[CODE_VERSION_TAG])
    found = finished_in_mlflow(*args)
    assert found is not None and found.mlflow_run_id == child.info.run_id
    assert found.overall["nDCG@10"] == child.data.metrics["nDCG_at_10"]
    client = mlflow.MlflowClient(tracking_uri=uri)
    for status in ("RUNNING", "FAILED"):
        client.update_run(child.info.run_id, status=status)
        assert finished_in_mlflow(*args) is None, status
    client.update_run(child.info.run_id, status="FINISHED")


def test_a_sigkilled_sweep_completes_on_rerun_without_duplicates(tmp_path, store_template):
    suite = write_tiny_suite(tmp_path)
    uri = copy_store(store_template, tmp_path / "store")
    points = "stage.bm25.k1=1.0,1.1,1.2,1.3,1.4,1.5"
    proc = sweep(tmp_path, suite, tmp_path / "killed", points, uri=uri, popen=True)
    deadline = time.monotonic() + 300
    while not (tmp_path / "killed" / "2").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the test's own process group: the sweep and nothing else
    proc.wait()
    finished_before = {
        r.data.tags[CONFIG_HASH_TAG]
        for r in runs(uri)
        if r.info.status == "FINISHED" and CONFIG_HASH_TAG in r.data.tags
    }
    assert len(finished_before) < 6, "the sweep finished before it was killed; nothing was tested"
    sweep(tmp_path, suite, tmp_path / "resumed", points, uri=uri)
    children = [r for r in runs(uri) if CONFIG_HASH_TAG in r.data.tags]
    finished = [r for r in children if r.info.status == "FINISHED"]
    assert len({r.data.tags[CONFIG_HASH_TAG] for r in finished}) == len(finished) == 6
    skipped = [j for j in job_dirs(tmp_path / "resumed") if (j / "skipped.json").is_file()]
    assert len(skipped) == len(finished_before)
    parents, _ = parents_and_children(uri)
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parents[0].info.run_id}


def test_joblib_workers_share_one_new_sqlite_store_without_lock_errors(tmp_path):
    suite = write_tiny_suite(tmp_path)
    uri = f"sqlite:///{tmp_path / 'fresh' / 'mlflow.db'}"  # new: the parent creates it, once
    (tmp_path / "fresh").mkdir()
    points = "stage.bm25.k1=1.0,1.1,1.2,1.3,1.4,1.5"
    sweep(
        tmp_path,
        suite,
        tmp_path / "joblib",
        points,
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        uri=uri,
    )
    parents, children = parents_and_children(uri)
    assert len(parents) == 1 and len(children) == 6
    assert all(c.info.status == "FINISHED" for c in children)
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parents[0].info.run_id}
    assert all(c.data.metrics for c in children)
    client = mlflow.MlflowClient(tracking_uri=uri)
    default = client.search_runs(["0"])  # mlflow#12259: a race can send runs to Default
    assert default == []


def test_submitit_local_launcher_runs_a_tracked_sweep(tmp_path, store_template):
    suite = write_tiny_suite(tmp_path)
    uri = copy_store(store_template, tmp_path / "store")
    sweep(
        tmp_path,
        suite,
        tmp_path / "submitit",
        "stage.bm25.k1=1.2,1.5",
        "hydra/launcher=submitit_local",
        "hydra.launcher.timeout_min=10",
        uri=uri,
    )
    parents, children = parents_and_children(uri)
    assert len(parents) == 1 and len(children) == 2
    assert all(c.info.status == "FINISHED" for c in children)
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parents[0].info.run_id}
    assert list((tmp_path / "submitit" / ".submitit").iterdir())  # submitit's own job logs


def test_a_partial_merge_logged_to_mlflow_answers_for_no_job(tmp_path, store_template):
    # memeval-merge --allow-partial logs its run FINISHED with the whole config's hashes (and the shards'
    # code version): the store must not offer it as that config's finished run.
    from experiments.merge import merge
    from experiments.run_folder import PARTIAL_TAG

    suite = write_tiny_suite(tmp_path)
    uri = copy_store(store_template, tmp_path / "store")
    sweep(tmp_path, suite, tmp_path / "shards", "shard=0/2", uri=uri)  # shard 1/2 never ran
    partial = merge([job_dirs(tmp_path / "shards")[0]], tmp_path / "partial", allow_partial=True)
    tags = json.loads((partial / "tags.json").read_text())
    (logged,) = [r for r in runs(uri) if PARTIAL_TAG in r.data.tags]
    assert logged.info.status == "FINISHED" and logged.data.tags[CONFIG_HASH_TAG] == tags[CONFIG_HASH_TAG]
    found = finished_in_mlflow(
        uri, "sweeps", None, tags[CONFIG_HASH_TAG], tags["suite_hash"], [], tags[CODE_VERSION_TAG]
    )
    assert found is None


def test_a_point_reused_from_an_earlier_sweep_is_listed_under_the_new_sweeps_parent(tmp_path, store_template):
    # A 2-point sweep, then a 3-point sweep sharing 2 points: the second parent shows all 3 points as its
    # children (issue 41), the 2 reused ones as rows tagged with the run they reuse, that run's metrics and
    # params on them, and counted once.
    from experiments.track.sweep_parent import REUSED_FROM_TAG

    suite = write_tiny_suite(tmp_path)
    uri = copy_store(store_template, tmp_path / "store")
    sweep(tmp_path, suite, tmp_path / "two", "stage.bm25.k1=1.2,1.5", uri=uri)
    earlier = {r.data.params["stage.bm25.k1"]: r for r in parents_and_children(uri)[1]}
    sweep(tmp_path, suite, tmp_path / "three", "stage.bm25.k1=1.2,1.5,1.8", uri=uri)
    parent_id = json.loads((tmp_path / "three" / "mlflow_parent.json").read_text())["parent_run_id"]
    client = mlflow.MlflowClient(tracking_uri=uri)

    def children() -> dict:
        rows = [r for r in runs(uri) if r.data.tags.get("mlflow.parentRunId") == parent_id]
        assert sorted(r.data.params["stage.bm25.k1"] for r in rows) == ["1.2", "1.5", "1.8"]  # each once
        return {r.data.params["stage.bm25.k1"]: r for r in rows}

    listed = children()
    assert REUSED_FROM_TAG not in listed["1.8"].data.tags  # run here
    for k1 in ("1.2", "1.5"):
        row, original = listed[k1], earlier[k1]
        assert row.info.run_id != original.info.run_id and row.info.status == "FINISHED"
        assert row.data.tags[REUSED_FROM_TAG] == original.info.run_id
        assert original.info.run_id in row.data.tags["mlflow.note.content"]
        assert row.data.metrics == original.data.metrics and row.data.params == original.data.params
        assert row.info.run_name == original.info.run_name
        assert CONFIG_HASH_TAG not in row.data.tags  # never taken for a finished run by resume
        assert row.data.tags["variant"] == original.data.tags["variant"]  # the other rows' tags
        assert [d.dataset.digest for d in row.inputs.dataset_inputs] == [
            d.dataset.digest for d in original.inputs.dataset_inputs
        ]
    assert client.get_run(parent_id).data.metrics["children_finished"] == 3  # each point once
    # Running the 3-point sweep again reopens its parent: nothing new is listed twice.
    before = {r.info.run_id for r in runs(uri)}
    sweep(tmp_path, suite, tmp_path / "three_again", "stage.bm25.k1=1.2,1.5,1.8", uri=uri)
    assert {r.info.run_id for r in runs(uri)} == before
    children()
