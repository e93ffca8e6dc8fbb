"""A user's own Python class as the memory system under test (docs/live_systems.md, "Your own Python
adapter"): `system=python system.adapter._target_=<module>.<Class>`.

- The page's worked example (an FTS5 store) is written, as the page shows it, to a package in a folder of
  its own, and the page's commands run as written from another directory with that folder on PYTHONPATH:
  a live run, a sweep over a constructor argument (which reaches the class: the two rankings differ), a
  recorded cassette replayed to the same run.trec, and the gate, refreshed then passing.
- A class named but not importable, lacking a protocol call, or given keys it does not take (e.g. the
  default system=memeval_serve's HTTP settings when `system=python` is forgotten) is exit 2 before any work,
  naming the key.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.configure.build import checked_pipeline
from experiments.configure.check import ConfigError
from experiments.configure.compose import compose_config
from tests.support import REPO, doc_code, doc_commands

PAGE = (REPO / "docs" / "live_systems.md").read_text()
SECTION = "## Your own Python adapter"
PACKAGE_LINE = "# ~/my-store/my_store/__init__.py"


@pytest.fixture()
def my_store(tmp_path: Path) -> Path:
    """The page's example package, in a folder of its own (what the page calls ~/my-store)."""
    folder = tmp_path / "my-store"
    (folder / "my_store").mkdir(parents=True)
    (folder / "my_store" / "__init__.py").write_text(doc_code(PAGE, PACKAGE_LINE))
    return folder


def run_documented(command: str, folder: Path, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    """One command of the page as a user types it: `PYTHONPATH=~/my-store .venv/bin/<script> ...`."""
    args = shlex.split(command.replace("~/my-store", str(folder)))
    env = dict(env)
    while "=" in args[0] and not args[0].startswith((".", "/")):  # leading VAR=value assignments
        name, value = args.pop(0).split("=", 1)
        env[name] = value
    assert args[0].startswith(".venv/bin/"), command
    args[0] = str(Path(sys.executable).parent / args[0].removeprefix(".venv/bin/"))
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_the_documented_python_adapter_runs_records_replays_sweeps_and_gates(my_store, tmp_path):
    commands = doc_commands(PAGE, SECTION)
    assert len(commands) == 6, commands
    work = tmp_path / "work"  # not the checkout: the package is found through PYTHONPATH alone
    work.mkdir()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    env.pop("PYTHONPATH", None)
    for command in commands:
        done = run_documented(command, my_store, work, env)
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    # live and record runs: timestamped run folders; the replay: the folder the page names
    runs = sorted(p.parent for p in (work / "outputs" / "spark25" / "system").glob("*/run.trec"))
    assert len(runs) == 2
    live, recorded = (p / "run.trec" for p in runs)
    replayed = work / "outputs" / "live" / "fts" / "run.trec"
    assert recorded.read_bytes() == replayed.read_bytes() == live.read_bytes()
    assert (work / "outputs" / "cassettes" / "fts.jsonl").stat().st_size > 0
    cost = json.loads((runs[0] / "metrics.json").read_text())["system"]  # the cost section, for free
    assert cost["n_queries"] == 25 and cost["memories_ingested"] == 306 and cost["errors"] == 0
    # the sweep: one job per tokenizer, and stemming changes the ranking (the argument reached the class)
    jobs = sorted((work / "multirun").glob("*/*/run.trec"))
    assert len(jobs) == 2 and jobs[0].read_bytes() != jobs[1].read_bytes()
    assert (work / "outputs" / "baselines" / "live_spark25-system.json").is_file()


def _problems(overrides: list[str]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        checked_pipeline(compose_config(["variant=system", "tracking=none", *overrides]))
    return caught.value.problems


@pytest.fixture()
def on_path(my_store, monkeypatch):
    monkeypatch.syspath_prepend(str(my_store))
    yield
    sys.modules.pop("my_store", None)


def test_the_class_is_built_with_its_arguments(on_path):
    cfg = compose_config(
        ["variant=system", "system=python", "system.adapter._target_=my_store.FtsStore"]
        + ["+system.adapter.tokenizer=porter unicode61"]
    )
    adapter = checked_pipeline(cfg).stages[0].system
    assert type(adapter).__module__ == "my_store" and adapter.fingerprint() == "FtsStore|porter unicode61"


def test_system_python_needs_a_class():
    assert _problems(["system=python"]) == [
        "system.adapter._target_: missing (set it on the command line: system.adapter._target_=...), "
        "e.g. system.adapter._target_=my_store.FtsStore (docs/live_systems.md)"
    ]


def test_a_class_that_does_not_import_is_named():
    (problem,) = _problems(["system=python", "system.adapter._target_=no_such_package.Store"])
    assert problem.startswith("system.adapter._target_: cannot import no_such_package.Store (ModuleNotFound")
    assert "PYTHONPATH" in problem


def test_a_class_without_the_whole_protocol_is_named(on_path, tmp_path, monkeypatch):
    (tmp_path / "half_store.py").write_text(
        "class Half:\n    def search(self, request):\n        return []\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    (problem,) = _problems(["system=python", "system.adapter._target_=half_store.Half"])
    assert problem.startswith(
        "system.adapter._target_: half_store.Half has no reset, ingest, wait_until_searchable, close"
    )


def test_forgetting_system_python_names_the_http_keys_and_the_fix(on_path):
    (problem,) = _problems(["system.adapter._target_=my_store.FtsStore"])
    assert "my_store.FtsStore takes no backoff_s, base_url, ca_file, endpoints" in problem
    assert "system=python system.adapter._target_=my_store.FtsStore" in problem


def test_a_key_the_class_does_not_take_is_named(on_path):
    (problem,) = _problems(
        ["system=python", "system.adapter._target_=my_store.FtsStore", "+system.adapter.tokeniser=porter"]
    )
    assert problem.startswith("system.adapter: my_store.FtsStore takes no tokeniser:")
