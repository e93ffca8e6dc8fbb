"""Every command the README's "Three common tasks" block shows runs, as a user would type it: the
installed console scripts, from a directory outside the repository, in order (the report reads the
sweep the command before it made). BEAM is read from the shared copy instead of ../shared/beam."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import BEAM_DIR, CACHE_DIR, REPO

pytestmark = pytest.mark.slow


def readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    block = text.split("## Three common tasks", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    joined = block.replace("\\\n", " ")  # continuation lines
    return [line.strip() for line in joined.splitlines() if line.strip().startswith(".venv/bin/")]


def test_the_readme_shows_the_three_tasks():
    scripts = {shlex.split(c)[0].rsplit("/", 1)[1] for c in readme_commands()}
    assert scripts == {"memeval-run", "memeval-gate", "memeval-report"}


def test_every_readme_command_runs_from_another_directory(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    env.pop("GITHUB_STEP_SUMMARY", None)
    sweep_dir = None
    for command in readme_commands():
        args = shlex.split(re.sub(r"#.*$", "", command))
        args[0] = str(Path(sys.executable).parent / args[0].rsplit("/", 1)[1])
        args = [a.replace("../shared/beam", str(BEAM_DIR)) for a in args]
        if args[-1].startswith("multirun/<time>"):
            assert sweep_dir is not None, "the report command needs the sweep the README ran before it"
            args[-1] = str(sweep_dir)
        if "memeval-run" in args[0]:  # the shared embedding cache, as the test suite's other runs use
            args.append(f"encoder.cache_dir={CACHE_DIR / 'embeddings'}")
        done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        if "-m" in args:
            sweeps = sorted((tmp_path / "multirun").iterdir())
            sweep_dir = sweeps[-1]
    assert (tmp_path / "reports" / "my_sweep" / "report.md").is_file()
