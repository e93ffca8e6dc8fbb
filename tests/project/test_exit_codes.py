"""Every console script keeps one exit-code rule (experiments/exit_codes.py): 0 success, 1 a regression or
a failed run, 2 bad input or cannot judge. A CI pipeline must never read a config mistake as a regression.

The scripts are the ones pyproject.toml declares, run as a user runs them: the installed
`.venv/bin/<script>` from another directory. Each kind of mistake (a mistyped config choice, an unknown
key, an override that does not parse, a value of the wrong type, a missing required argument) must exit 2
with a short message naming it and no traceback, before any work; `--help` exits 0 and states the rule.
A script added to pyproject.toml fails `test_every_script_has_a_case_of_each_kind` until its cases are here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from experiments.exit_codes import EXIT_BAD_INPUT, RULE, bad_input_message, console_script
from tests.support import REPO

SCRIPTS = sorted(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"])
BIN = Path(sys.executable).parent
BASELINE = REPO / "reports" / "baselines" / "spark25-hybrid.json"
KINDS = ("typo_choice", "unknown_key", "override_syntax", "bad_type", "missing_required")
# The headline case (a typo in an override) runs in the fast tier; the rest of the matrix, about 30
# fresh Python processes (~2 s of CPU each, mostly imports), in the slow one.
FAST_KINDS = {"unknown_key"}

NONE = "tracking=none"
# script -> kind -> (arguments, the text the message must name); None where the script takes no such input.
MISTAKES: dict[str, dict[str, tuple[list[str], str] | None]] = {
    "memeval-run": {
        "typo_choice": (["variant=hybird", NONE], "variant/hybird"),
        "unknown_key": (["stage.bm25.kk1=1", NONE], "stage.bm25.kk1"),
        "override_syntax": (["stage.bm25.k1=[", NONE], "stage.bm25.k1=["),
        "bad_type": (["stage.bm25.k1=abc", NONE], "stage.bm25.k1"),
        "missing_required": (["suite=jsonl", NONE], "suite.path"),
    },
    "memeval-gate": {
        "typo_choice": (["spark25", "hybird", "--baseline", str(BASELINE)], "variant/hybird"),
        "unknown_key": (["spark25", "hybrid", "stage.bm25.kk1=1"], "stage.bm25.kk1"),
        "override_syntax": (["spark25", "hybrid", "stage.bm25.k1=["], "stage.bm25.k1=["),
        "bad_type": (["spark25", "hybrid", "stage.bm25.k1=abc"], "stage.bm25.k1"),
        "missing_required": (["spark25"], "variant"),
    },
    "memeval-report": {
        "typo_choice": (["--name", "r", "--run-dir", ".", "--test", "wilcoxn"], "wilcoxn"),
        "unknown_key": (["--name", "r", "--run-dir", ".", "--nosuch"], "--nosuch"),
        "override_syntax": (["--name", "r", "--tag", "suite"], "KEY=VALUE"),  # a tag filter is KEY=VALUE
        "bad_type": (["--name", "r", "--run-dir", ".", "--alpha", "abc"], "--alpha"),
        "missing_required": (["--run-dir", "."], "--name"),
    },
    "memeval-study": {
        "typo_choice": (["study=boost_beam10k", NONE], "study/boost_beam10k"),
        "unknown_key": (["study=boost_beam100k", NONE, "nokey=1"], "nokey"),
        "override_syntax": (["study=boost_beam100k", NONE, "refresh=["], "refresh=["),
        "bad_type": (["study=boost_beam100k", NONE, "++study.stats.seed=abc"], "study.stats.seed"),
        "missing_required": ([NONE], "study=<name>"),
    },
    "memeval-train-reranker": {
        "typo_choice": (["encoder=minlm", NONE], "encoder/minlm"),
        "unknown_key": (["nokey=1", NONE], "nokey"),
        "override_syntax": (["epochs=[", NONE], "epochs=["),
        "bad_type": (["epochs=abc", NONE], "epochs"),
        "missing_required": None,  # every setting has a default (BEAM 500K, the bundled MiniLM)
    },
    "memeval-merge": {  # folders and flags only: no config choices, overrides or typed values
        "typo_choice": None,
        "unknown_key": (["--allow-partail", "shards"], "--allow-partail"),
        "override_syntax": None,
        "bad_type": None,
        "missing_required": ([], "paths"),
    },
    "memeval-export": {  # a folder and flags only
        "typo_choice": (["--to", "trec", "run"], "--to"),
        "unknown_key": (["--to", "json", "--too", "run"], "--too"),
        "override_syntax": None,
        "bad_type": None,
        "missing_required": (["run"], "--to"),
    },
    "memeval-protocols": {  # a folder only
        "typo_choice": None,
        "unknown_key": (["--al", "run"], "--al"),
        "override_syntax": None,
        "bad_type": None,
        "missing_required": ([], "run_dir"),
    },
    "memeval-conform": {
        "typo_choice": (["system=memeval_serv", NONE], "system/memeval_serv"),
        "unknown_key": (["conform.nokey=1", NONE], "conform.nokey"),
        "override_syntax": (["conform.seed=[", NONE], "conform.seed=["),
        "bad_type": (["conform.seed=abc", NONE], "conform.seed"),
        "missing_required": (["system=python", NONE], "_target_"),
    },
    "memeval-serve": {
        "typo_choice": (["variant=hybird"], "variant/hybird"),
        "unknown_key": (["stage.bm25.kk1=1"], "stage.bm25.kk1"),
        "override_syntax": (["stage.bm25.k1=["], "stage.bm25.k1=["),
        "bad_type": (["--port", "abc"], "--port"),
        "missing_required": (["--override-keys"], "--override-keys"),
    },
}
CASES = [
    pytest.param(script, kind, marks=[] if kind in FAST_KINDS else [pytest.mark.slow], id=f"{script}-{kind}")
    for script in SCRIPTS
    for kind in KINDS
    if MISTAKES.get(script, {}).get(kind) is not None
]


def _run(script: str, args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    path = BIN / script
    assert path.is_file(), f"{script} is not installed next to {sys.executable}: pip install -e ."
    clean = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    return subprocess.run(
        [str(path), *args],
        cwd=cwd,
        env={**clean, "HF_HUB_OFFLINE": "1", **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_every_script_has_a_case_of_each_kind():
    assert set(MISTAKES) == set(SCRIPTS), "a console script in pyproject.toml without its mistakes here"
    for script, cases in MISTAKES.items():
        assert set(cases) == set(KINDS), script


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_exits_0_and_states_the_rule(script, tmp_path):
    done = _run(script, ["--help"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert RULE in " ".join(done.stdout.split()), f"{script} --help does not state the exit-code rule"


@pytest.mark.parametrize(("script", "kind"), CASES)
def test_a_mistake_exits_2_with_a_short_message_naming_it(script, kind, tmp_path):
    args, named = MISTAKES[script][kind]
    done = _run(script, args, tmp_path)
    assert done.returncode == EXIT_BAD_INPUT, f"exit {done.returncode}:\n{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    # One line; a config check that lists its problems puts each on a line of its own after a header.
    assert 1 <= len(lines) <= 2, done.stderr
    assert named in done.stderr, done.stderr
    assert done.stdout == "", done.stdout  # refused before any work: nothing loaded, nothing printed
    assert not any(tmp_path.iterdir()), sorted(tmp_path.rglob("*"))  # and nothing written


def test_hydra_full_error_adds_the_traceback_and_keeps_exit_2(tmp_path):
    done = _run("memeval-run", ["stage.bm25.kk1=1", NONE], tmp_path, HYDRA_FULL_ERROR="1")
    assert done.returncode == EXIT_BAD_INPUT, done.stderr
    assert "Traceback" in done.stderr and "ConfigCompositionException" in done.stderr
    assert done.stderr.strip().splitlines()[-1] == "error: Could not override 'stage.bm25.kk1': " + (
        "Key 'kk1' is not in struct"
    )


def test_an_error_that_is_not_bad_input_exits_1_with_its_traceback(monkeypatch, capsys):
    # A crash is a failed run, never "bad input"; HYDRA_FULL_ERROR is set for the call only.
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)

    @console_script
    def crashes() -> None:
        assert os.environ["HYDRA_FULL_ERROR"] == "1"  # so @hydra.main re-raises rather than exit 1
        raise RuntimeError("a bug")

    with pytest.raises(SystemExit) as done:
        crashes()
    assert done.value.code == 1
    assert "Traceback" in capsys.readouterr().err and "HYDRA_FULL_ERROR" not in os.environ
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")  # the user's own: Python's whole traceback, exit 1
    with pytest.raises(RuntimeError, match="a bug"):
        crashes()


def test_a_sweep_whose_jobs_failed_on_bad_input_exits_2_with_the_error_not_a_traceback(tmp_path):
    # A sweep runs its other jobs and exits as the failed job alone would: 2 for bad input (issue 41;
    # every launcher: tests/run/test_sweep_exit_codes.py), the error on the console, no traceback.
    missing = [str(tmp_path / "no-suite-1"), str(tmp_path / "no-suite-2")]
    args = ["-m", NONE, "progress=false", "suite=jsonl", f"suite.path={','.join(missing)}", "variant=bm25"]
    done = _run("memeval-run", [*args, f"hydra.sweep.dir={tmp_path / 'sweep'}"], tmp_path)
    assert done.returncode == 2, done.stderr
    assert f"suite.path: {missing[1]} does not exist" in done.stderr  # every job ran
    assert "Traceback" not in done.stderr, done.stderr


def test_the_message_names_the_override_and_the_options_on_one_line():
    from hydra.errors import MissingConfigException, OverrideParseException

    parse = OverrideParseException("stage.bm25.k1=[", "no viable alternative at input '['\nSee https://...")
    assert bad_input_message(parse) == "override 'stage.bm25.k1=[': no viable alternative at input '['"
    missing = MissingConfigException(
        "In 'config': Could not find 'variant/x'\n\nAvailable options...", "x", ["a", "b"]
    )
    assert bad_input_message(missing) == "In 'config': Could not find 'variant/x': options: a, b"


def test_train_reranker_refuses_a_setting_of_the_wrong_kind_before_reading_the_suite():
    from experiments.configure.app_settings import setting_problems
    from experiments.configure.compose import compose_config

    fine = ["max_train_minutes=0.5", "max_train_minutes=null", "cache_dir=null", "num_layers=2"]
    assert setting_problems(compose_config(fine[1:], config_name="train_reranker")) == []
    assert setting_problems(compose_config(fine[:1], config_name="train_reranker")) == []
    wrong = compose_config(["epochs=abc", "progress=1", "train_suite=beam"], config_name="train_reranker")
    assert [p.split(":")[0] for p in setting_problems(wrong)] == ["train_suite", "epochs", "progress"]
