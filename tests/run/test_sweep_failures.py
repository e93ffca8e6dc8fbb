"""Sweep-level failures, with real Hydra multiruns in subprocesses and a real SQLite MLflow store:
a store that cannot be used and duplicate override keys stop the sweep before any job; a job that fails
(exit-2 error) logs a FAILED child while the other jobs run, the parent ends FAILED and the sweep exits
non-zero; re-running the same sweep finishes only the rest; reports follow reused runs and say when runs
are missing.
"""

from __future__ import annotations

import json
import shutil
import socket
import sqlite3
import subprocess
import sys

import mlflow
import pytest

from experiments.run.resume import CONFIG_HASH_TAG
from tests.support import REPO
from tests.sweep_support import copy_store, job_dirs, parents_and_children, sweep, write_tiny_suite

pytestmark = [pytest.mark.slow, pytest.mark.integration]


@pytest.fixture(scope="session")
def store_template(tmp_path_factory):
    folder = tmp_path_factory.mktemp("store_template_failures")
    mlflow.MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlflow.db'}").search_experiments()
    return folder / "mlflow.db"


def failing_sweep(cwd, suite, sweep_dir, *overrides, uri=None):
    try:
        sweep(cwd, suite, sweep_dir, *overrides, uri=uri)
    except AssertionError as err:  # sweep() asserts exit 0; these sweeps must fail
        return str(err)
    pytest.fail("the sweep exited 0")


def multirun(cwd, sweep_dir, *overrides, uri, extra_env=None):
    """Like sweep_support.sweep, with the suite path among the swept overrides."""
    args = [sys.executable, "-m", "experiments.run", "-m", "suite=jsonl", "variant=bm25", "progress=false",
            f"cache_dir={cwd / 'cache'}", f"hydra.sweep.dir={sweep_dir}", f"tracking.tracker.uri={uri}",
            "tracking.tracker.experiment=sweeps", *overrides]  # fmt: skip
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO), "HOME": str(cwd)}
    env.update(extra_env or {})
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_duplicate_override_keys_stop_the_sweep_before_any_job(tmp_path):
    suite = write_tiny_suite(tmp_path)
    out = failing_sweep(tmp_path, suite, tmp_path / "dup", "stage.bm25.k1=1.2,1.5", "stage.bm25.k1=1.8")
    assert "stage.bm25.k1 more than once" in out and "No job has run" in out
    assert not (tmp_path / "dup").exists() or job_dirs(tmp_path / "dup") == []


def test_a_half_made_store_stops_the_sweep_before_any_job_with_exit_2(tmp_path):
    suite = write_tiny_suite(tmp_path)
    db = tmp_path / "store" / "mlflow.db"
    db.parent.mkdir()
    con = sqlite3.connect(db)
    con.execute("create table experiments (id integer)")  # what a creator killed mid-way leaves
    con.commit()
    con.close()
    args = [sys.executable, "-m", "experiments.run", "-m", "suite=jsonl", f"suite.path={suite}",
            "variant=bm25", "progress=false", f"cache_dir={tmp_path / 'cache'}",
            f"hydra.sweep.dir={tmp_path / 'down'}", f"tracking.tracker.uri=sqlite:///{db}",
            "stage.bm25.k1=1.2,1.5"]  # fmt: skip
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO), "HOME": str(tmp_path)}
    proc = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "cannot start the sweep's parent run" in proc.stderr and str(db) in proc.stderr
    assert "half-made" in proc.stderr and "no job has run" in proc.stderr
    assert not (tmp_path / "down").exists() or job_dirs(tmp_path / "down") == []


def test_a_store_server_that_is_down_stops_the_sweep_before_any_job(tmp_path):
    suite = write_tiny_suite(tmp_path)
    with socket.socket() as probe:  # a free port: nothing answers there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    uri = f"http://127.0.0.1:{port}"
    quick = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}
    proc = multirun(tmp_path, tmp_path / "down", f"suite.path={suite}", "stage.bm25.k1=1.2,1.5", uri=uri,
                    extra_env=quick)  # fmt: skip
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"cannot start the sweep's parent run in the MLflow store {uri}" in proc.stderr
    assert "no job has run" in proc.stderr and "Launching" not in proc.stdout + proc.stderr
    assert not (tmp_path / "down").exists() or job_dirs(tmp_path / "down") == []


def test_a_failed_job_is_a_failed_child_the_others_run_and_a_rerun_finishes_only_the_rest(
    tmp_path, store_template, monkeypatch
):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # reports read the given store
    suite = write_tiny_suite(tmp_path)
    later = tmp_path / "later_suite"  # does not exist yet: its job fails with a suite error (exit 2)
    uri = copy_store(store_template, tmp_path / "store")
    points = (f"suite.path={suite},{later}", "stage.bm25.k1=1.2,1.5")
    proc = multirun(tmp_path, tmp_path / "first", *points, uri=uri)
    assert proc.returncode != 0 and "later_suite does not exist" in proc.stderr, proc.stderr[-3000:]
    parents, children = parents_and_children(uri)
    assert len(parents) == 1 and parents[0].info.status == "FAILED"
    statuses = sorted(c.info.status for c in children)
    assert statuses == ["FAILED", "FAILED", "FINISHED", "FINISHED"]  # every job ran
    failed = [c for c in children if c.info.status == "FAILED"]
    assert all("later_suite does not exist" in c.data.tags["memeval.error"] for c in failed)
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parents[0].info.run_id}
    failed_dirs = [j for j in job_dirs(tmp_path / "first") if (j / "failed.json").is_file()]
    assert len(failed_dirs) == 2

    # a report over this sweep says two runs are missing and exits 1
    from experiments.compare.cli import main as report

    argv = ["--name", "r", "--out-root", str(tmp_path / "reports"), "--run-dir", str(tmp_path / "first")]
    assert report(argv) == 1
    markdown = (tmp_path / "reports" / "r" / "report.md").read_text()
    assert "Incomplete: 2 run(s)" in markdown and "later_suite does not exist" in markdown
    argv = ["--name", "p", "--out-root", str(tmp_path / "reports"), "--parent", parents[0].info.run_id,
            "--tracking-uri", uri]  # fmt: skip
    assert report(argv) == 1

    shutil.copytree(suite, later)  # the data arrives: the same command resumes the sweep
    again = multirun(tmp_path, tmp_path / "again", *points, uri=uri)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert again.stdout.count("skipped: config") == 2
    parents, children = parents_and_children(uri)
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    finished = [c for c in children if c.info.status == "FINISHED"]
    assert len(finished) == 4 and len({c.data.tags[CONFIG_HASH_TAG] for c in finished}) == 4


def test_a_report_follows_jobs_that_reused_runs_whose_directories_are_gone(
    tmp_path, store_template, monkeypatch
):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # reports read the given store
    suite = write_tiny_suite(tmp_path)
    uri = copy_store(store_template, tmp_path / "store")
    sweep(tmp_path, suite, tmp_path / "first", "stage.bm25.k1=1.2,1.5", uri=uri)
    shutil.rmtree(tmp_path / "first")  # the run directories are gone; MLflow holds the runs
    shutil.rmtree(tmp_path / "cache" / "finished")
    sweep(tmp_path, suite, tmp_path / "second", "stage.bm25.k1=1.2,1.5,1.8", uri=uri)
    notes = [json.loads((j / "skipped.json").read_text()) for j in job_dirs(tmp_path / "second")[:2]]
    assert all(n["run_dir"] is None and n["mlflow_run_id"] and n["mlflow_uri"] == uri for n in notes)

    from experiments.compare.cli import main as report
    from experiments.gate import load_run_dir  # the gate reads runs the same way

    assert load_run_dir(job_dirs(tmp_path / "second")[0]).source == f"mlflow:{notes[0]['mlflow_run_id']}"
    argv = ["--name", "r", "--out-root", str(tmp_path / "reports"), "--run-dir", str(tmp_path / "second"),
            "--metrics", "RR"]  # fmt: skip
    assert report(argv) == 0
    markdown = (tmp_path / "reports" / "r" / "report.md").read_text()
    assert "from 3 runs" in markdown
    assert all(f"k1={k1}" in markdown for k1 in ("1.2", "1.5", "1.8"))
