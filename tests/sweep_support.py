"""Helpers for the sweep tests: a tiny suite on disk, a multirun in a subprocess, MLflow queries."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from experiments.suites.jsonl import save_suite
from tests.support import REPO, tiny_suite


def write_tiny_suite(folder: Path) -> Path:
    return save_suite(tiny_suite(), folder / "suite")


def sweep(
    cwd: Path,
    suite: Path,
    sweep_dir: Path,
    *overrides: str,
    uri: str | None = None,
    timeout: float = 600,
    popen: bool = False,
):
    """`python -m experiments.run -m` on the tiny suite with variant=bm25 (no model needed)."""
    tracking = (
        [f"tracking.tracker.uri={uri}", "tracking.tracker.experiment=sweeps"] if uri else ["tracking=none"]
    )
    args = [
        sys.executable,
        "-m",
        "experiments.run",
        "-m",
        "suite=jsonl",
        f"suite.path={suite}",
        "variant=bm25",
        "progress=false",
        f"cache_dir={cwd / 'cache'}",
        f"hydra.sweep.dir={sweep_dir}",
        *tracking,
        *overrides,
    ]
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": "",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    if popen:
        return subprocess.Popen(
            args,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def job_dirs(sweep_dir: Path) -> list[Path]:
    return sorted(
        (p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name)
    )


def copy_store(template: Path, folder: Path) -> str:
    """A ready SQLite store (creating one costs ~20 s of migrations), as a URI."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(template, folder / "mlflow.db")
    return f"sqlite:///{folder / 'mlflow.db'}"


def runs(uri: str, experiment: str = "sweeps") -> list:
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"experiment {experiment!r} missing from {uri}"
    return client.search_runs([found.experiment_id], max_results=1000)


def parents_and_children(uri: str) -> tuple[list, list]:
    every = runs(uri)
    children = [r for r in every if "mlflow.parentRunId" in r.data.tags]
    parents = [r for r in every if "memeval.sweep_key" in r.data.tags]
    return parents, children


def sharded_tiny_runs(folder: Path) -> dict[str, Path]:
    """The tiny suite as a 2-shard sweep, merged whole by the sweep itself (`whole`), and a partial merge
    of its first shard alone (`memeval-merge --allow-partial`: `partial`)."""
    from experiments.merge import merge

    suite = write_tiny_suite(folder)
    sweep(folder, suite, folder / "sweep", "shard=0/2,1/2")
    first = folder / "sweep" / "0"
    partial = merge([first], folder / "partial", allow_partial=True, tracking=False)
    return {"suite": suite, "whole": folder / "sweep" / "merged" / "0", "partial": partial}
