"""Settings read once, measured (#42): following a run's settings from `memeval-run`'s entry point through
every call handed them whole (the composed config, its RunSettings record, the record's resolved config:
experiments/tools/settings_walk.py records each such call while a real run goes), they stay in at most 12
files, and in no file more than twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

from tests.support import REPO
from tests.sweep_support import write_tiny_suite

MAX_FILES, MAX_STAYS = 12, 2
CONFIG_LAYER = ("experiments/configure/", "experiments/run/app.py")


def _walk(tmp_path, *overrides: str) -> list[dict]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    done = subprocess.run(
        [sys.executable, "-m", "experiments.tools.settings_walk", "--json", "--", *overrides,
         f"hydra.run.dir={tmp_path / 'run'}", f"cache_dir={tmp_path / 'cache'}", "progress=false"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def _stays(calls: list[dict]) -> list[str]:
    files: list[str] = []
    for call in calls:
        if not files or files[-1] != call["file"]:
            files.append(call["file"])
    return files


def test_a_tracked_run_hands_its_settings_to_at_most_12_files_none_more_than_twice(tmp_path):
    suite = write_tiny_suite(tmp_path)  # the walk is the same on any suite; a tiny one runs in no time
    calls = _walk(tmp_path, "suite=jsonl", f"suite.path={suite}", "variant=bm25", "tracking=mlflow")
    stays = _stays(calls)
    # The walk is whole: it starts at the Hydra app, reaches the config layer, the record's readers and
    # the MLflow log at the end (a walk that lost the settings early would pass the bounds trivially).
    assert (calls[0]["file"], calls[0]["function"]) == ("experiments/run/app.py", "run_app")
    assert {"experiments/configure/build.py", "experiments/configure/settings.py"} <= set(stays)
    assert ("experiments/run/resume.py", "Resume.ask", ["settings"]) in [
        (c["file"], c["function"], c["params"]) for c in calls
    ]
    assert stays[-1].startswith("experiments/track/")
    assert len(set(stays)) <= MAX_FILES, stays
    assert max(Counter(stays).values()) <= MAX_STAYS, Counter(stays).most_common(3)
    # The composed config itself goes no further than the config layer and the run's app: the rest of the
    # run takes the record (or its resolved config).
    config_takers = {c["file"] for c in calls if "config" in c["kinds"]}
    assert config_takers and all(f.startswith(CONFIG_LAYER) for f in config_takers), config_takers
