"""A sweep whose failed job was bad input exits 2, as that run alone would (the project's 0/1/2 rule;
experiments/exit_codes.py), whichever launcher ran it (issue 41, part 3).

Real multiruns in subprocesses over a tiny suite and a suite folder that does not exist (a SuiteError:
bad input), under memeval's default launcher, Hydra's basic one, joblib (loky worker processes) and
submitit_local (a process per job): each runs the good job, records the bad one as failed, and exits 2
(it exited 1, the code of a regression) with the error on the console.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support import REPO
from tests.sweep_support import job_dirs, write_tiny_suite

pytestmark = [pytest.mark.slow, pytest.mark.integration]

LAUNCHERS = {
    "memeval": [],
    "basic": ["hydra/launcher=basic"],
    "joblib": ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
    "submitit_local": ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10"],
}


@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_a_sweep_whose_failed_job_was_bad_input_exits_2(tmp_path, launcher):
    suite = write_tiny_suite(tmp_path)
    missing = tmp_path / "no_such_suite"
    sweep_dir = tmp_path / "sweep"
    args = [sys.executable, "-m", "experiments.run", "-m", "suite=jsonl", f"suite.path={suite},{missing}",
            "variant=bm25", "progress=false", "tracking=none", f"cache_dir={tmp_path / 'cache'}",
            f"hydra.sweep.dir={sweep_dir}", *LAUNCHERS[launcher]]  # fmt: skip
    env = {**os.environ, "MLFLOW_TRACKING_URI": "", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr[-3000:])
    assert "no_such_suite does not exist" in done.stderr, done.stderr[-3000:]
    jobs = job_dirs(sweep_dir)
    assert sorted((j / "failed.json").is_file() for j in jobs) == [False, True]  # the good job ran
    assert sum((j / "metrics.json").is_file() for j in jobs) == 1
