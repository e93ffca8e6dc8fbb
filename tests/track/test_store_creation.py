"""First-time creation of the default SQLite store, safe under parallel starts and SIGKILL: real runs
(`python -m experiments.run suite=spark25 variant=bm25`) in separate processes, in a fresh working
directory whose default store (`./mlflow.db`) does not exist yet.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest

from tests.support import REPO

pytestmark = pytest.mark.slow


def env(cwd: Path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO), "HOME": str(cwd)}


def start_run(cwd: Path, *overrides: str) -> subprocess.Popen:
    args = [sys.executable, "-m", "experiments.run", "suite=spark25", "variant=bm25", "progress=false",
            *overrides]  # fmt: skip
    return subprocess.Popen(
        args, cwd=cwd, env=env(cwd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip


def finished_runs(cwd: Path) -> list:
    client = mlflow.MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("memeval")
    assert experiment is not None
    return [r for r in client.search_runs([experiment.experiment_id]) if r.info.status == "FINISHED"]


def test_eight_parallel_first_runs_on_a_new_default_store_all_arrive(tmp_path):
    procs = [start_run(tmp_path, f"seed={i}", f"hydra.run.dir=outputs/{i}") for i in range(8)]
    outputs = [p.communicate(timeout=900)[0] for p in procs]
    for proc, out in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, out[-3000:]
    assert len(finished_runs(tmp_path)) == 8
    assert not list(tmp_path.glob(".mlflow.db.*.creating"))


def test_a_creator_killed_mid_way_leaves_no_store_and_the_next_run_succeeds(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    code = f"from experiments.track.mlflow_tracker import ensure_store; ensure_store({uri!r})"
    creator = subprocess.Popen(
        [sys.executable, "-c", code], cwd=tmp_path, env=env(tmp_path), start_new_session=True
    )
    deadline = time.monotonic() + 300
    while not list(tmp_path.glob(".mlflow.db.*.creating")) and time.monotonic() < deadline:
        assert creator.poll() is None, "the creator ended before it was killed"
        time.sleep(0.01)
    time.sleep(0.3)  # mid-way through the migrations (creation takes seconds)
    os.killpg(creator.pid, signal.SIGKILL)  # the creator's own session: that process and nothing else
    creator.wait()
    assert list(tmp_path.glob(".mlflow.db.*.creating")), "the kill came after the store was complete"
    assert not (tmp_path / "mlflow.db").exists()  # the store's path never holds a half-made store

    run = start_run(tmp_path)
    out = run.communicate(timeout=600)[0]
    assert run.returncode == 0, out[-3000:]
    assert len(finished_runs(tmp_path)) == 1
    assert not list(tmp_path.glob(".mlflow.db.*.creating"))  # the leftover was cleaned up
