"""`python -m experiments.compare.cli` is the report command itself (it used to import and exit 0 doing
nothing), and its --name, the report's folder, is checked before any run is read."""

from __future__ import annotations

import subprocess
import sys

from tests.support import REPO


def _cli(*args: str, cwd=REPO) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "experiments.compare.cli", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)


def test_the_cli_module_runs_and_answers_help():
    done = _cli("--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: memeval-report") and "--run-dir" in done.stdout


def test_the_cli_module_does_the_work_it_is_asked():
    done = _cli("--name", "x")  # no runs named: the command's own error, not a silent exit 0
    assert done.returncode == 2 and "give --run-dir" in done.stderr


def test_a_report_named_dot_dot_is_refused_before_anything_is_read_or_written(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    done = _cli("--name", "..", "--out-root", str(work), "--run-dir", str(tmp_path / "nowhere"), cwd=work)
    assert done.returncode == 2
    assert "--name: a report name names a folder: it may not be '..'" in done.stderr
    assert list(tmp_path.iterdir()) == [work] and list(work.iterdir()) == []


def test_a_missing_sweep_dir_is_said_to_be_missing(tmp_path):
    done = _cli("--name", "x", "--out-root", str(tmp_path), "--sweep-dir", str(tmp_path / "no_such_sweep"))
    assert done.returncode == 2
    assert done.stderr.strip() == f"report error: --sweep-dir {tmp_path / 'no_such_sweep'}: no such folder"
