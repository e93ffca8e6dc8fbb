"""Faults lose nothing: a sweep killed with SIGKILL mid-job, and an MLflow server that is down.

- SIGKILL in the middle of a sweep: every job that finished before the kill keeps its metrics.json
  byte for byte and its FINISHED MLflow run; the killed job has no FINISHED run; a re-run of the same
  command runs only the jobs that are missing (experiments.run.resume' resume) and leaves one FINISHED run
  per configuration. (tests/track/test_sweeps_mlflow.py checks resume's bookkeeping; this checks integrity.)
- A store that does not answer (http://127.0.0.1:<closed port>): the run exits non-zero with an error
  naming the store and the run directory, and the results are on disk there. mlflow's HTTP client
  retries a refused connection 7 times with exponential backoff (minutes) by default; users (and this
  test) bound it with MLFLOW_HTTP_REQUEST_MAX_RETRIES and MLFLOW_HTTP_REQUEST_TIMEOUT.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest

from experiments.run.resume import CONFIG_HASH_TAG
from tests.support import REPO
from tests.sweep_support import copy_store, job_dirs, runs, sweep, write_tiny_suite

pytestmark = pytest.mark.slow  # subprocess sweeps: ~10 s of imports each, minutes on a shared box

POINTS = "stage.bm25.k1=" + ",".join(f"{1.0 + i / 10:.1f}" for i in range(8))


@pytest.fixture(scope="module")
def store_template(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("store_template")
    mlflow.MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlflow.db'}").search_experiments()
    return folder / "mlflow.db"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _finished_by_hash(uri: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for r in runs(uri):
        if CONFIG_HASH_TAG in r.data.tags and r.info.status == "FINISHED":
            out.setdefault(r.data.tags[CONFIG_HASH_TAG], []).append(r)
    return out


def test_sigkill_mid_sweep_keeps_finished_runs_intact_and_rerun_completes_only_the_rest(
    tmp_path, store_template
):
    suite = write_tiny_suite(tmp_path)
    uri = copy_store(store_template, tmp_path / "store")
    killed_dir = tmp_path / "killed"
    proc = sweep(tmp_path, suite, killed_dir, POINTS, uri=uri, popen=True)
    deadline = time.monotonic() + 600
    # Kill while job 3 is running: jobs 0-2 have finished (job 3's directory exists once it started).
    while not (killed_dir / "3").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the sweep ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)  # the sweep's own process group (start_new_session): nothing else
    proc.wait()

    finished_jobs = [j for j in job_dirs(killed_dir) if (j / "metrics.json").exists()]
    done = {j.name: _digest(j / "metrics.json") for j in finished_jobs}
    hashes = {j.name: json.loads((j / "metrics.json").read_text())["config_hash"] for j in finished_jobs}
    finished = _finished_by_hash(uri)
    assert 3 <= len(done) < 8, f"{len(done)} jobs finished before the kill: nothing was interrupted"
    # A job is finished when both its files and its MLflow run are: killed after writing metrics.json
    # but before logging, a job has files and no FINISHED run (and resume re-runs it).
    assert set(finished) <= set(hashes.values())
    assert len(finished) >= len(done) - 1
    assert all(len(v) == 1 for v in finished.values())
    before = {h: (rs[0].info.run_id, dict(rs[0].data.metrics)) for h, rs in finished.items()}
    unfinished_runs = [r for r in runs(uri) if CONFIG_HASH_TAG in r.data.tags and r.info.status != "FINISHED"]
    assert all(r.data.tags[CONFIG_HASH_TAG] not in finished for r in unfinished_runs)

    resumed = sweep(tmp_path, suite, tmp_path / "resumed", POINTS, uri=uri)

    # every finished run intact: files byte for byte, MLflow run and metrics unchanged
    assert {j: _digest(killed_dir / j / "metrics.json") for j in done} == done
    after = _finished_by_hash(uri)
    for h, (run_id, metrics) in before.items():
        assert [r.info.run_id for r in after[h]] == [run_id]
        assert dict(after[h][0].data.metrics) == metrics
    # the re-run did only what was missing, and now every configuration has exactly one FINISHED run
    resumed_jobs = job_dirs(tmp_path / "resumed")
    skipped = [j for j in resumed_jobs if (j / "skipped.json").is_file()]
    ran = [j for j in resumed_jobs if (j / "metrics.json").is_file()]
    assert len(skipped) == len(before) and len(ran) == 8 - len(before)
    assert resumed.stdout.count("skipped: config") == len(before)
    assert len(after) == 8 and all(len(v) == 1 for v in after.values())


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the socket is: nothing listens there


def test_a_store_that_is_down_gives_a_clear_error_naming_store_and_run_dir_and_results_stay_on_disk(
    tmp_path,
):
    suite = write_tiny_suite(tmp_path)
    uri = f"http://127.0.0.1:{_closed_port()}"
    run_dir = tmp_path / "run"
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": uri,
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
        "MLFLOW_HTTP_REQUEST_TIMEOUT": "5",
        "HF_HUB_OFFLINE": "1",
    }
    started = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.run",
            "suite=jsonl",
            f"suite.path={suite}",
            "variant=bm25",
            "progress=false",
            f"cache_dir={tmp_path / 'cache'}",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0
    assert f"MLflow store {uri}" in proc.stderr, proc.stderr[-2000:]
    assert str(run_dir) in proc.stderr
    assert "Traceback" not in proc.stderr
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["overall"]["n_queries"] == 4 and metrics["scope_leaks"] == 0
    assert (run_dir / "run.trec").stat().st_size > 0 and (run_dir / "per_query.csv").is_file()
    assert time.monotonic() - started < 120  # bounded by the retry settings, not mlflow's minutes
