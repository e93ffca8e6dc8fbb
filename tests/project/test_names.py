"""Names that become paths or file fields are checked once, before any work (experiments/names.py).

A plan named `..` would write its report into the working directory, a row named `..` its runs one
level up; a variant named `bm25 tuned` would write 7-field run.trec lines; an empty label value would be
a group no report table shows; a 600-character suite name would fail on MLflow's limit after the whole
run; depth=1e20 would overflow deep in numpy. Each is refused by the validation pass, naming the field.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path
from types import MappingProxyType

import pytest
import yaml

from experiments.names import MAX_NAME_CHARS, UnsafeNameError, name_problem, under_root
from experiments.study import PlanError, load_plan
from experiments.suites.jsonl import save_suite
from experiments.suites.suite import Suite, SuiteError, check_suite
from retrieval.types import Memory, Query
from tests.study.test_study import good_plan
from tests.support import REPO, config_problems, tiny_suite
from tests.sweep_support import write_tiny_suite


@pytest.mark.parametrize(
    ("kind", "value", "expected"),
    [
        ("plan", "..", "may not be '..'"),
        ("row", ".", "may not be '.'"),
        ("report", "a/b", "may not contain / or \\"),
        ("suite id", "a\\b", "may not contain / or \\"),
        ("plan", "", "must be a non-empty string"),
        ("label value", "", "must be a non-empty string"),
        ("label value", "  ", "must be a non-empty string"),
        ("label name", "ability\n", "must not contain control characters"),
        ("suite", "beam\x00", "U+0000 at position 4"),
        ("suite", "beam\u2028", "U+2028"),  # a line separator
        ("variant", "bm25\u200btuned", "U+200B"),  # zero-width space: a format character
        ("variant", "bm25 tuned", "must not contain whitespace"),
        ("variant", "bm25\ttuned", "U+0009 at position 4"),
        ("suite", "s" * (MAX_NAME_CHARS + 1), f"over the limit of {MAX_NAME_CHARS}"),
        ("variant", 3, "must be a non-empty string"),
    ],
)
def test_a_name_that_cannot_be_a_path_or_field_is_refused(kind, value, expected):
    problem = name_problem(kind, value)
    assert problem is not None and expected in problem


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        ("suite", "BEAM 100K"),  # a suite name is no file field: spaces are fine
        ("label value", "information extraction"),
        ("variant", "hybrid[k1=0.9]"),
        ("plan", "boost_beam100k"),
        ("row", "..x"),  # only . and .. themselves name another folder
        ("suite", "s" * MAX_NAME_CHARS),
    ],
)
def test_ordinary_names_pass(kind, value):
    assert name_problem(kind, value) is None


def test_under_root_refuses_a_path_that_leaves_its_folder(tmp_path):
    root = tmp_path / "reports"
    root.mkdir()
    assert under_root(root, "study/report.md") == root / "study" / "report.md"
    with pytest.raises(UnsafeNameError, match="outside its folder"):
        under_root(root, "../report.md")
    (root / "link").symlink_to(tmp_path)  # a symlink out of the root is followed, then refused
    with pytest.raises(UnsafeNameError, match="outside its folder"):
        under_root(root, "link/report.md")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"name": ".."}, "study.name: a plan name names a folder: it may not be '..'"),
        ({"name": "."}, "study.name"),
        ({"rows": [{"name": ".."}], "baseline": ".."}, "study.rows[0].name: a row name names a folder"),
        ({"suites": [{"id": "..", "name": "spark25"}], "suite": None}, "study.suites[0].id"),
    ],
)
def test_a_plan_or_row_named_dot_dot_is_refused(change, field):
    with pytest.raises(PlanError) as err:
        load_plan(good_plan(**change))
    assert field in str(err.value)


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("variant.name=bm25 tuned", "variant.name: must not contain whitespace"),
        ("variant.name=''", "variant.name: must be a non-empty string"),
        ("depth=100000000000000000000", "depth: expected an integer >= 1 and <= 1,000,000"),
        ("depth=1000001", "depth: expected an integer >= 1 and <= 1,000,000"),
        ("metrics=[P@100000000000000000000]", "metrics: 'P@100000000000000000000': the cutoff after @"),
        ("stage.bm25.top_n=100000000000000000000", "stage.bm25.top_n: must be <= 1e+06"),
        ("tracking.tracker.experiment=" + "e" * 501, "tracking.tracker.experiment: MLflow takes"),
    ],
)
def test_the_config_check_refuses_unsafe_names_and_unbounded_cutoffs(override, expected):
    problems = config_problems(override)
    assert any(expected in p for p in problems), problems


def test_a_bounded_depth_and_a_plain_variant_name_pass():
    assert config_problems("depth=1000000", "variant.name=bm25_tuned") == []


def test_check_suite_refuses_a_long_suite_name_and_an_empty_label_value():
    base = tiny_suite()
    long_name = Suite(name="s" * 600, memories=base.memories, queries=base.queries, qrels=base.qrels)
    with pytest.raises(SuiteError, match="suite: name: a suite name of 600 characters"):
        check_suite(long_name)
    queries = (base.queries[0].__class__(**{**base.queries[0].__dict__, "labels": {"ability": ""}}),)
    empty = Suite(name="tiny", memories=base.memories, queries=queries + base.queries[1:], qrels=base.qrels)
    with pytest.raises(SuiteError, match="queries:1: labels: 'ability': must be a non-empty string"):
        check_suite(empty)


def test_memeval_names_stay_within_mlflows_limits():
    from mlflow.utils import validation

    from experiments.track import mlflow_tracker as tracking

    assert tracking.MAX_EXPERIMENT_NAME_CHARS == validation.MAX_EXPERIMENT_NAME_LENGTH
    assert tracking.MAX_KEY_CHARS == validation.MAX_ENTITY_KEY_LENGTH
    assert tracking.MAX_DATASET_NAME_CHARS == validation.MAX_DATASET_NAME_SIZE
    assert tracking.MAX_TAG_VALUE_CHARS == validation.MAX_TAG_VAL_LENGTH
    # a suite and a variant name make the run name, the dataset name and tag values
    assert 2 * MAX_NAME_CHARS + 1 <= min(validation.MAX_DATASET_NAME_SIZE, validation.MAX_TAG_VAL_LENGTH)
    assert tracking.MAX_PARAM_CHARS <= validation.MAX_PARAM_VAL_LENGTH


# ---- end to end: exit 2, a message, nothing written -------------------------------------------------


def _run(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "experiments.run", "variant=bm25", "tracking=none", "progress=false"]
    command += [f"hydra.run.dir={tmp_path / 'run'}", f"cache_dir={tmp_path / 'cache'}", *overrides]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("depth=1e20", "depth: expected an integer >= 1"),
        ("depth=100000000000000000000", "depth: expected an integer >= 1 and <= 1,000,000"),
        ("variant.name=bm25 tuned", "variant.name: must not contain whitespace"),
    ],
)
def test_the_run_exits_2_before_any_work(tmp_path, override, expected):
    suite = write_tiny_suite(tmp_path / "suite")
    proc = _run(tmp_path, "suite=jsonl", f"suite.path={suite}", override)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert expected in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "run" / "metrics.json").exists()


@pytest.mark.slow
def test_a_study_named_dot_dot_exits_2_and_writes_nothing(tmp_path):
    conf = tmp_path / "conf" / "study"
    conf.mkdir(parents=True)
    suite = {"name": "jsonl", "path": str(write_tiny_suite(tmp_path / "suite"))}
    (conf / "dots.yaml").write_text(yaml.safe_dump(good_plan(name="..", suite=suite, sweep=None)))
    work = tmp_path / "work" / "here"
    work.mkdir(parents=True)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.study",
            "study=dots",
            f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
            "tracking=none",
            "runs_root=runs",
        ],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "study.name: a plan name names a folder: it may not be '..'" in proc.stderr
    assert sorted(p.name for p in work.iterdir()) == [], "nothing is written, in the folder or beside it"
    assert sorted(p.name for p in work.parent.iterdir()) == ["here"]


# ---- no room for the results: a clear message naming the folder, no traceback ----------------------


def _bigger_suite(folder: Path) -> Path:
    """One scope, 400 memories: run.trec holds ~40 KB (10 queries x 100 ranks), the config a few KB."""
    scope = MappingProxyType({"user": "u1"})
    memories = tuple(
        Memory(id=f"m{i}", text=f"note {i} about topic {i % 7} and {i % 11}", scope=scope) for i in range(400)
    )
    queries = tuple(Query(id=f"q{i}", text=f"topic {i} and {i + 1}", scope=scope) for i in range(10))
    qrels = {f"q{i}": {f"m{i}": 1} for i in range(10)}
    return save_suite(Suite(name="bigger", memories=memories, queries=queries, qrels=qrels), folder)


def _file_size_limit(limit: int):
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write over the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


@pytest.mark.slow
def test_no_room_for_the_results_is_a_clear_error_naming_the_folder(tmp_path):
    suite = _bigger_suite(tmp_path / "suite")
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "experiments.run", "suite=jsonl", f"suite.path={suite}", "variant=bm25"]
    command += ["tracking=none", "progress=false", "cache_dir=null", f"hydra.run.dir={run_dir}"]
    command += ["hydra.output_subdir=null"]  # Hydra's own copies of the config: not what is tested
    proc = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, timeout=300, preexec_fn=_file_size_limit(20_000)
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert f"error: cannot write the results to {run_dir}: File too large" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (run_dir / "metrics.json").exists()  # never taken for a finished run
