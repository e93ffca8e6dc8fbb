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


# --- memeval-protocols reads a run folder only through the one run-folder check --------------------------
# (experiments/run_folder/check.py, as memeval-merge, -gate, -report and -export do): exit 2, one line


def _protocols_exit(capsys, folder) -> tuple[int, str]:
    from experiments.compare.protocols import main

    try:
        code = main([str(folder)])
    except SystemExit as exit_:
        code = exit_.code
    return code, capsys.readouterr().err


def _assert_refused(code: int, err: str, folder, file: str) -> None:
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert str(folder) in err and file in err, err


@pytest.fixture
def turn_copy(turn_run, tmp_path):
    import shutil

    return shutil.copytree(turn_run, tmp_path / "run")


@pytest.mark.parametrize("file", ["run.trec", "qrels.tsv", "per_query.csv"])
def test_a_run_folder_missing_a_file_is_refused_naming_folder_and_file(turn_copy, capsys, file):
    (turn_copy / file).unlink()
    code, err = _protocols_exit(capsys, turn_copy)
    _assert_refused(code, err, turn_copy, file)
    assert "missing" in err


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny suite as a 2-shard sweep merged whole, and a partial merge of its first shard (its values
    are re-derived by the check: under protocol=official, LongMemEval's scorer made them)."""
    from tests.sweep_support import sharded_tiny_runs

    return sharded_tiny_runs(tmp_path_factory.mktemp("protocols_tiny"))


def test_an_edited_run_trec_is_refused_naming_the_queries(tiny, tmp_path, capsys):
    import shutil

    folder = shutil.copytree(tiny["whole"], tmp_path / "edited")
    lines = (folder / "run.trec").read_text().splitlines(keepends=True)
    qid, q0, doc, rest = lines[0].split(" ", 3)
    lines[0] = " ".join((qid, q0, f"{doc}-replaced", rest))  # one document replaced
    (folder / "run.trec").write_text("".join(lines))
    code, err = _protocols_exit(capsys, folder)
    _assert_refused(code, err, folder, "per_query.csv")
    assert f"queries {qid} (" in err and "run.trec" in err


def test_a_run_trec_with_some_queries_cut_is_refused(turn_copy, capsys):
    lines = (turn_copy / "run.trec").read_text().splitlines(keepends=True)
    first = lines[0].split(" ", 1)[0]
    (turn_copy / "run.trec").write_text("".join(ln for ln in lines if not ln.startswith(f"{first} ")))
    code, err = _protocols_exit(capsys, turn_copy)
    _assert_refused(code, err, turn_copy, "run.trec")
    assert "n_returned" in err and first in err


def test_a_partial_merge_is_refused_saying_so(tiny, capsys):
    partial = tiny["partial"]
    code, err = _protocols_exit(capsys, partial)
    _assert_refused(code, err, partial, "metrics.json")
    assert "partial merge" in err and "1 of 2 shards; missing 1/2" in err


def test_the_console_script_refuses_a_missing_folder_with_exit_2(tmp_path):
    from pathlib import Path

    done = subprocess.run(
        [str(Path(sys.executable).parent / "memeval-protocols"), str(tmp_path / "nowhere")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and str(tmp_path / "nowhere") in done.stderr
