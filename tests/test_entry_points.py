"""The documented commands start: every console script answers --help from a directory outside the
repository (configs ship inside the package), and a run that cannot start refuses before any work.

The scripts are the ones `pip install` put next to this interpreter; CI also checks them after a
non-editable install into a fresh virtualenv (.ci/check_installed).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
SCRIPTS = {
    "memeval-run": "memeval-run: score one retrieval variant",
    "memeval-gate": "usage: memeval-gate",
    "memeval-report": "usage: memeval-report",
    "memeval-train-reranker": "memeval-train-reranker: fine-tune a cross-encoder",
    "memeval-study": "memeval-study: run a study plan",
}


def _env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1"}


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_console_script_answers_help_from_another_directory(script, tmp_path):
    path = BIN / script
    assert path.is_file(), f"{script} is not installed next to {sys.executable}: pip install -e ."
    done = subprocess.run([str(path), "--help"], cwd=tmp_path, env=_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert SCRIPTS[script] in done.stdout
    assert not any(tmp_path.iterdir())  # asking for help writes nothing


def test_a_run_whose_reranker_is_missing_refuses_before_any_work_and_leaves_no_folder(tmp_path):
    missing = tmp_path / "no-such-reranker"
    done = subprocess.run(
        [
            str(BIN / "memeval-run"),
            "variant=spark_phase2",
            f"stage.cross_encoder.scorer.model={missing}",
            "tracking=none",
        ],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert str(missing) in done.stderr and "memeval-train-reranker" in done.stderr
    assert "memories" not in done.stdout  # the suite was never loaded, nothing was retrieved
    assert not (tmp_path / "outputs").exists()
