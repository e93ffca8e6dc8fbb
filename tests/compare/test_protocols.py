"""memeval-protocols (experiments/compare/protocols.py): one real run scored under each protocol and
granularity, its own setting equal to the run's own numbers, the spread the max - min of the settings."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from experiments.compare.protocols import score_under
from tests.support import DATA

EDGES = DATA / "longmemeval" / "longmemeval_official_edges.json"


@pytest.fixture(scope="module")
def turn_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("protocols") / "run"
    done = subprocess.run(
        [sys.executable, "-m", "experiments.run", "suite=longmemeval", f"suite.path={EDGES}", "variant=bm25",
         "tracking=none", "cache_dir=null", "progress=false", f"hydra.run.dir={folder}"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return folder


def test_each_protocol_and_granularity_with_the_spread(turn_run):
    table, notes = score_under(turn_run)
    overall = json.loads((turn_run / "metrics.json").read_text())["overall"]
    settings = [i for i in table.index if i != "spread"]
    assert settings == [
        "protocol=official, granularity=turn", "protocol=official, granularity=session",
        "protocol=memeval, granularity=turn", "protocol=memeval, granularity=session",
    ]  # fmt: skip
    own = table.loc["protocol=official, granularity=turn"]
    assert table.loc["spread", "recall_all@5"] > 0  # the conventions move the headline number here
    for metric in ("recall_all@5", "R@10"):
        if metric in overall:  # the run's own setting gives its own numbers
            assert own[metric] == pytest.approx(overall[metric], abs=1e-12)
        column = table.loc[settings, metric]
        assert table.loc["spread", metric] == pytest.approx(column.max() - column.min())
    assert notes == []


def test_a_session_run_says_it_cannot_be_scored_by_turn(turn_run, tmp_path):
    folder = tmp_path / "session"
    done = subprocess.run(
        [sys.executable, "-m", "experiments.run", "suite=longmemeval", f"suite.path={EDGES}", "variant=bm25",
         "suite.granularity=session", "tracking=none", "cache_dir=null", "progress=false",
         f"hydra.run.dir={folder}"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    table, notes = score_under(folder)
    assert "protocol=official, granularity=turn" not in table.index
    assert any("a session ranking cannot be scored at turn granularity" in n for n in notes)
