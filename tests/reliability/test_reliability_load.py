"""Load on a real MLflow server: parallel joblib workers log 40+ runs and every run and metric arrives;
a server that goes away mid-sweep costs no results.

Starts `mlflow server --backend-store-uri sqlite:///... --artifacts-destination DIR --host 127.0.0.1
--port N --workers 2` on a free port (it answers after ~10 s; stopped with SIGTERM to its process group), and
points MLFLOW_TRACKING_URI at it, as a team does with a shared store. Integration and slow: run with
`python -m pytest -m integration tests/reliability/test_reliability_load.py`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import mlflow
import pytest

from experiments.run.resume import CONFIG_HASH_TAG
from experiments.track.run_params import param_text
from tests.support import REPO
from tests.sweep_support import job_dirs, write_tiny_suite

pytestmark = [pytest.mark.slow, pytest.mark.integration]

N_JOBS = 44
K1_VALUES = [f"{0.5 + i * 0.05:.2f}" for i in range(N_JOBS)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def mlflow_server(folder: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    folder.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    command = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        f"sqlite:///{folder / 'mlflow.db'}",
        "--artifacts-destination",
        str(folder / "artifacts"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        # two server processes, where MLflow's default is four: still several processes writing one SQLite
        # store, and half the start-up (each worker imports the server: ~7 s of CPU)
        "--workers",
        "2",
    ]
    log = open(folder / "server.log", "w")  # noqa: SIM115 - closed in finally
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"mlflow server did not start: {(folder / 'server.log').read_text()[-2000:]}"
                )
            time.sleep(0.5)
        yield uri, proc
    finally:
        stop(proc)
        log.close()


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's own process group (its workers too), SIGKILL if it lingers."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def multirun(tmp: Path, suite: Path, sweep_dir: Path, uri: str, *overrides: str, popen: bool = False):
    command = [
        sys.executable,
        "-m",
        "experiments.run",
        "-m",
        "suite=jsonl",
        f"suite.path={suite}",
        "variant=bm25",
        "progress=false",
        "tracking.tracker.experiment=load",
        f"cache_dir={tmp / 'cache'}",
        f"hydra.sweep.dir={sweep_dir}",
        *overrides,
    ]
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": uri,
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
        "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
        "HF_HUB_OFFLINE": "1",
    }
    if popen:
        return subprocess.Popen(
            command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)


def test_four_joblib_workers_log_44_runs_to_a_real_server_and_every_run_and_metric_arrives(tmp_path):
    suite = write_tiny_suite(tmp_path)
    with mlflow_server(tmp_path / "server") as (uri, _):
        proc = multirun(
            tmp_path,
            suite,
            tmp_path / "sweep",
            uri,
            "hydra/launcher=joblib",
            "hydra.launcher.n_jobs=4",
            "stage.bm25.k1=" + ",".join(K1_VALUES),
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        client = mlflow.MlflowClient(tracking_uri=uri)
        experiment = client.get_experiment_by_name("load")
        assert experiment is not None
        every = client.search_runs([experiment.experiment_id], max_results=1000)
        children = [r for r in every if CONFIG_HASH_TAG in r.data.tags]
        parents = [r for r in every if "memeval.sweep_key" in r.data.tags]
        on_disk = [json.loads((j / "metrics.json").read_text()) for j in job_dirs(tmp_path / "sweep")]
        artifacts = {a.path for a in client.list_artifacts(children[0].info.run_id)} if children else set()

    assert len(on_disk) == N_JOBS
    assert len(children) == N_JOBS and all(r.info.status == "FINISHED" for r in children)
    assert sorted(r.data.params["stage.bm25.k1"] for r in children) == sorted(
        param_text(float(k))
        for k in K1_VALUES  # one spelling: 1.0 is logged as 1
    )
    assert len({r.data.tags[CONFIG_HASH_TAG] for r in children}) == N_JOBS
    # every metric arrived: each run holds the same keys, and its values are the ones on disk
    keys = set(children[0].data.metrics)
    assert {"nDCG_at_10", "P_at_5", "scope_leaks"} <= keys
    assert all(set(r.data.metrics) == keys for r in children)
    by_hash = {m["config_hash"]: m for m in on_disk}
    for r in children:
        overall = by_hash[r.data.tags[CONFIG_HASH_TAG]]["overall"]
        assert r.data.metrics["nDCG_at_10"] == pytest.approx(overall["nDCG@10"], abs=1e-12)
    # one parent for the sweep, every child linked to it; no run fell into the Default experiment
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parents[0].info.run_id}
    assert {"metrics.json", "run.trec", "config.yaml"} <= artifacts


def test_a_server_that_goes_away_mid_sweep_loses_no_results(tmp_path):
    suite = write_tiny_suite(tmp_path)
    sweep_dir = tmp_path / "sweep"
    with mlflow_server(tmp_path / "server") as (uri, server):
        proc = multirun(tmp_path, suite, sweep_dir, uri, "stage.bm25.k1=1.0,1.1,1.2,1.3,1.4,1.5", popen=True)
        deadline = time.monotonic() + 600
        while not (sweep_dir / "1" / "metrics.json").exists() and proc.poll() is None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        stop(server)  # the store goes away while the sweep runs
        output, _ = proc.communicate(timeout=900)
    assert proc.returncode != 0, output[-3000:]
    assert f"could not log to the MLflow store {uri}" in output, output[-3000:]
    started = job_dirs(sweep_dir)
    assert len(started) >= 2
    for job in started:  # every job that ran has its results on disk, logged or not
        metrics = json.loads((job / "metrics.json").read_text())
        assert metrics["overall"]["n_queries"] == 4
    store = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'server' / 'mlflow.db'}")
    logged = store.search_runs([store.get_experiment_by_name("load").experiment_id])
    finished = [r for r in logged if CONFIG_HASH_TAG in r.data.tags and r.info.status == "FINISHED"]
    assert 1 <= len(finished) < len(started)  # logged before the outage; the rest are only on disk
