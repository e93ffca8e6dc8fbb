"""Adding a metric, a stage, a live adapter or a folder loader is one new file: each is written here as a
temporary module beside the package's own (a folder added to the package's import path, as a file dropped
in the package folder would be), found by the package's scan with no list edited, and used from the command
line (`memeval-run`), where it shows in metrics.json, run.trec or --help. The scans themselves are compared
with the files on disk in tests/configure/test_stage_nodes.py, tests/live/test_live_config.py and
tests/evaluate/test_metrics.py."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

from experiments.exit_codes import EXIT_BAD_INPUT
from tests.support import REPO

# memeval-run, with a folder of the test's added to one package's import path first.
RUN_WITH_PLUGIN = """
import importlib, sys
importlib.import_module(sys.argv[1]).__path__.append(sys.argv[2])
from experiments.run.app import main
sys.argv = ["memeval-run", *sys.argv[3:]]
main()
"""


def memeval_run(package: str, plugin: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", RUN_WITH_PLUGIN, package, str(plugin), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )


def plugin_folder(tmp_path: Path, name: str, source: str) -> Path:
    folder = tmp_path / "plugin"
    folder.mkdir()
    (folder / f"{name}.py").write_text(textwrap.dedent(source))
    return folder


def help_options(package: str, plugin: Path, group: str) -> list[str]:
    """The options `memeval-run --help` lists for a config group, with the plug-in folder added."""
    helped = memeval_run(package, plugin, "--help")
    assert helped.returncode == 0, helped.stderr[-2000:]
    line = next(line for line in helped.stdout.splitlines() if line.startswith(f"{group}: "))
    return line.split(": ", 1)[1].split(", ")


def spark_run(tmp_path: Path, *args: str) -> list[str]:
    return ["tracking=none", f"cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}", *args]


def per_query(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "per_query.csv", newline="") as f:
        return list(csv.DictReader(f))


METRIC = """
import numpy as np

from experiments.evaluate.metrics.family import MetricFamily


def first_relevant(gains: np.ndarray, n_relevant: np.ndarray, ideal: np.ndarray, k: int | None) -> np.ndarray:
    return (gains[..., :1] > 0).any(axis=-1).astype(float)


METRICS = {"first_relevant": MetricFamily(first_relevant, needs_cutoff=False)}
"""


def test_a_metric_is_one_file(tmp_path):
    plugin = plugin_folder(tmp_path, "first_relevant", METRIC)
    done = memeval_run(
        "experiments.evaluate.metrics",
        plugin,
        *spark_run(tmp_path, "variant=bm25", "metrics=[P@1,first_relevant]", "objective=first_relevant"),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    overall = json.loads((tmp_path / "run" / "metrics.json").read_text())["overall"]
    assert overall["first_relevant"] == overall["P@1"]  # the same quantity, by another kernel
    rows = per_query(tmp_path / "run")
    assert rows and [r["first_relevant"] for r in rows] == [r["P@1"] for r in rows]


STAGE = """
from dataclasses import dataclass

import numpy as np

from retrieval.stage import Range, RankStage
from retrieval.stages.fallback import keep_or_relax


@dataclass(frozen=True, kw_only=True)
class KeepFirst(RankStage):
    name = "keep_first"
    ranges = {"count": Range(ge=1)}
    count: int = 5

    def __call__(self, query, candidates):
        keep = np.arange(len(candidates)) < self.count
        return keep_or_relax(candidates, keep, np.zeros(len(candidates)), 0, self.name)
"""


def test_a_stage_is_one_file(tmp_path):
    plugin = plugin_folder(tmp_path, "keep_first", STAGE)
    assert "keep_first" in help_options("retrieval.stages", plugin, "stage")
    added = ["variant=bm25", "+stage@stage.keep_first=keep_first", "stage.keep_first.count=2"]
    done = memeval_run("retrieval.stages", plugin, *spark_run(tmp_path, *added))
    assert done.returncode == 0, done.stderr[-2000:]
    per_query_lines: dict[str, int] = {}
    for line in (tmp_path / "run" / "run.trec").read_text().splitlines():
        per_query_lines[line.split()[0]] = per_query_lines.get(line.split()[0], 0) + 1
    assert per_query_lines and max(per_query_lines.values()) == 2
    config = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert (
        config["variant"]["stages"] == ["bm25", "keep_first"] and config["stage"]["keep_first"]["count"] == 2
    )


ADAPTER = """
from dataclasses import dataclass, field
from typing import ClassVar

from experiments.systems.protocol import Hit


@dataclass(frozen=True, kw_only=True)
class WordsSystem:
    \"\"\"An in-process memory system: a memory's score is the words it shares with the query.\"\"\"

    name: ClassVar[str] = "words"
    lowercase: bool = True
    store: dict = field(default_factory=dict, init=False, compare=False, repr=False)

    def _words(self, text):
        return set((text.lower() if self.lowercase else text).split())

    def reset(self, scope):
        self.store[tuple(sorted(scope.items()))] = {}

    def ingest(self, scope, memories):
        held = self.store.setdefault(tuple(sorted(scope.items())), {})
        for m in memories:
            held[m.id] = m.text

    def wait_until_searchable(self, scope, memories):
        return 0.0

    def search(self, request):
        held = self.store.get(tuple(sorted(request.scope.items())), {})
        words = self._words(request.text)
        scored = sorted((-len(words & self._words(t)), i) for i, t in held.items())
        return [Hit(i, float(-s)) for s, i in scored[: request.k] if s < 0]

    def close(self):
        self.store.clear()
"""


def test_a_live_adapter_is_one_file(tmp_path):
    plugin = plugin_folder(tmp_path, "words", ADAPTER)  # internal bases are not in --help: the run names it
    done = memeval_run(
        "experiments.systems",
        plugin,
        *spark_run(tmp_path, "variant=system", "system=python", "+system/dataclass@system.adapter=words"),
        "system.adapter.lowercase=false",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    adapter = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["system"]["adapter"]
    assert adapter == {"_target_": "experiments.systems.words.WordsSystem", "lowercase": False}
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["system"] and (tmp_path / "run" / "run.trec").read_text().strip()


LOADER = """
from experiments.suites.files import reads_folder
from experiments.suites.jsonl import load_suite


@reads_folder
def load_mirror(path: str):
    \"\"\"A benchmark in the canonical layout, under its own name.\"\"\"
    return load_suite(path, name="mirror")
"""


def test_a_folder_loader_is_one_file(tmp_path):
    plugin = plugin_folder(tmp_path, "mirror", LOADER)
    suite = ["suite=jsonl", "suite._target_=experiments.suites.mirror.load_mirror", "variant=bm25"]
    a_file = REPO / "datasets" / "spark25" / "queries.jsonl"
    refused = memeval_run("experiments.suites", plugin, *spark_run(tmp_path, *suite, f"suite.path={a_file}"))
    assert refused.returncode == EXIT_BAD_INPUT, refused.stderr[-2000:]
    assert "suite.path" in refused.stderr and "is not a directory" in refused.stderr
    assert not (tmp_path / "run" / "metrics.json").exists()
    done = memeval_run(
        "experiments.suites", plugin, *spark_run(tmp_path, *suite, f"suite.path={a_file.parent}")
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["suite"]["name"] == "mirror"
