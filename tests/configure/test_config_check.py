"""One config validation pass before any work: typed stage fields, stage ranges, the run
settings, the suite's loader arguments, and a config hash that does not care how a number is written.

The fast tests compose real configs and call the validator / pipeline builder in-process; the slow one
runs the CLI as a user would and checks the exit code, the message, and that nothing was written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from experiments.configure.build import build_pipeline
from experiments.configure.check import ConfigError
from experiments.configure.compose import CONF_DIR, compose_config
from experiments.configure.settings import RunSettings
from experiments.run.app import run_experiment
from experiments.run.resume import config_hash
from retrieval.field_types import value_problems
from retrieval.fusions.rrf import RRFFusion
from retrieval.pipeline import PipelineConfigError
from retrieval.retrievers.bm25 import BM25Retriever
from retrieval.stage import FieldError, _canonical
from retrieval.stages.cross_encoder import CrossEncoderRerank
from tests.support import DATA, REPO, config_problems
from tests.sweep_support import write_tiny_suite

VARIANTS = sorted(p.stem for p in (CONF_DIR / "variant").glob("*.yaml"))


# ---- stage fields: types against annotations, checked generically -----------------------------------


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("stage.bm25.k1=abc", "stage.bm25.k1: expected float, got 'abc'"),
        ("stage.bm25.k1=nan", "stage.bm25.k1: expected a finite float, got nan"),
        ("stage.bm25.k1=inf", "stage.bm25.k1: expected a finite float, got inf"),
        ("stage.bm25.top_n=10.0", "stage.bm25.top_n: expected int, got 10.0"),
        ("stage.bm25.top_n=true", "stage.bm25.top_n: expected int, got True"),
        ("stage.bm25.enabled=maybe", "stage.bm25.enabled: expected bool, got 'maybe'"),
        (
            "stage.bm25.backend=lucene",
            "stage.bm25.backend: expected one of 'bm25s', 'rank_bm25', got 'lucene'",
        ),
        ("encoder.batch_size=big", "stage.dense.encoder.batch_size: expected int, got 'big'"),
        (
            "variant=hybrid_weighted stage.fusion.weights.bm25=x",
            "stage.fusion.weights['bm25']: expected float, got 'x'",
        ),
        ("+stage.bm25.k2=1", "stage.bm25.k2: not a field of BM25Retriever"),
    ],
)
def test_a_mistyped_stage_field_is_named_with_what_was_expected(override, expected):
    with pytest.raises(PipelineConfigError) as err:
        build_pipeline(compose_config(["variant=hybrid", *override.split()]))
    assert any(p.startswith(expected) for p in err.value.problems), err.value.problems


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["stage.bm25.top_n=0"], "stage.bm25.top_n: must be >= 1, got 0"),
        (["stage.dense.top_n=-5"], "stage.dense.top_n: must be >= 1, got -5"),
        (["stage.bm25.k1=-0.5"], "stage.bm25.k1: must be >= 0, got -0.5"),
        (["stage.bm25.b=1.5"], "stage.bm25.b: must be <= 1, got 1.5"),
        (["stage.bm25.b=-0.1"], "stage.bm25.b: must be >= 0, got -0.1"),
        (["stage.fusion.k=0"], "stage.fusion.k: must be > 0, got 0"),
        (["variant=exp05", "stage.instruction_boost.max_boosted=-1"], "stage.instruction_boost.max_boosted"),
        (["variant=cross_encoder", "stage.cross_encoder.top_k=32"], "stage.cross_encoder.top_k: needs 1 <="),
        (["variant=tiering", "stage.tiered.bm25.k1=-1"], "stage.tiered.bm25.k1: must be >= 0, got -1"),
        (["variant=tiering", "stage.tiered.cap=0"], "stage.tiered.cap: must be >= 1, got 0"),
    ],
)
def test_an_out_of_range_stage_value_is_refused_naming_the_stage_and_field(overrides, expected):
    with pytest.raises(PipelineConfigError) as err:
        build_pipeline(compose_config(overrides))
    assert any(p.startswith(expected) for p in err.value.problems), err.value.problems


def test_every_problem_of_every_stage_comes_at_once():
    with pytest.raises(PipelineConfigError) as err:
        build_pipeline(
            compose_config(["stage.bm25.k1=abc", "stage.bm25.top_n=0", "stage.bm25.b=2", "stage.fusion.k=-1"])
        )
    assert err.value.problems == [
        "stage.bm25.k1: expected float, got 'abc'",
        "stage.bm25.top_n: must be >= 1, got 0",  # ranges of the well-typed values, beside the type error
        "stage.bm25.b: must be <= 1, got 2",
        "stage.fusion.k: must be > 0, got -1",
    ]


def test_an_int_is_a_float_and_the_stage_keeps_working():
    pipeline = build_pipeline(compose_config(["variant=bm25", "stage.bm25.k1=1", "stage.bm25.b=1"]))
    assert pipeline.stages[0].k1 == 1 and pipeline.stages[0].b == 1


def test_stages_check_their_ranges_when_built_directly_too():
    with pytest.raises(FieldError) as err:
        BM25Retriever(k1=float("nan"), b=2.0, top_n=0)
    assert [field for field, _ in err.value.problems] == ["top_n", "k1", "b"]
    with pytest.raises(ValueError, match="weights\\['dense'\\]: must be a finite number"):
        RRFFusion(weights={"bm25": 1.0, "dense": float("inf")})
    with pytest.raises(ValueError, match="weight: must be <= 1"):
        CrossEncoderRerank(scorer=object(), weight=2.0)


def test_the_type_check_knows_optional_literal_sequences_and_mappings():
    assert value_problems(None, float | None) == []
    assert value_problems(0.5, float | None) == []
    assert value_problems("x", float | None) == [("", "expected float, got 'x'")]
    assert value_problems(["a", 3], tuple[str, ...]) == [("[1]", "expected str, got 3")]
    assert value_problems("user", tuple[str, ...]) == [("", "expected list of str, got 'user'")]
    assert value_problems({"a": 1, "b": "x"}, dict[str, float]) == [("['b']", "expected float, got 'x'")]
    assert value_problems(1, float) == [] and value_problems(True, float) != []


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_shipped_variant_validates(variant):
    assert config_problems(f"variant={variant}") == []


@pytest.mark.parametrize("suite", sorted(p.stem for p in (CONF_DIR / "suite").glob("*.yaml")))
def test_every_shipped_suite_config_validates(suite, tmp_path, beam_synth_dir):
    # The configs that read data from outside the repository (beam: ../shared) read a generated copy
    # in the fast tier; the real path is the gates' and the slow tier's.
    extra = {
        "jsonl": [f"suite.path={write_tiny_suite(tmp_path)}"],
        "beam": [f"suite.path={beam_synth_dir}"],
    }.get(suite, [])
    if suite == "longmemeval":  # not shipped: the fixture in its schema stands in
        extra = [f"suite.path={DATA / 'longmemeval' / 'longmemeval_fixture.json'}"]
    if suite == "locomo":  # ../shared in the slow tier and the studies: a fixture in its schema here
        extra = [f"suite.path={DATA / 'locomo' / 'locomo_fixture.json'}"]
    assert config_problems(f"suite={suite}", *extra) == []


# ---- the run settings and the suite's arguments ---------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["depth=0"], "depth: expected an integer >= 1"),
        (["depth=-3"], "depth: expected an integer >= 1"),
        (["depth=abc"], "depth: expected an integer >= 1"),
        (["metrics=[P@0]"], "metrics: 'P@0': the cutoff after @ must be an integer >= 1"),
        (["metrics=[Precision@5]"], "metrics: unknown metric name 'Precision@5'"),
        (["metrics=[]"], "metrics: empty"),
        (["objective=P@10"], "objective: 'P@10' is not one of the metrics"),
        (["objective=P@0"], "objective: 'P@0': the cutoff after @ must be an integer >= 1"),
        (["seed=abc"], "seed: expected an integer >= 0, got 'abc'"),
        (["seed=1.5"], "seed: expected an integer >= 0, got 1.5"),
        (["resume=maybe"], "resume: expected auto, true or false, got 'maybe'"),
        (["progress=abc"], "progress: expected true or false"),
        (["cache_dir=5"], "cache_dir: expected a folder path or null"),
        (["suite=jsonl", "suite.path=null"], "suite.path: null, but this suite reads its data from disk"),
        (["suite=jsonl"], "suite.path: missing (set it on the command line: suite.path=...)"),
        (["suite=jsonl", "suite.path=/no/such/suite"], "suite.path: /no/such/suite does not exist"),
        (
            ["suite=beam", "suite.path=pyproject.toml"],
            "suite.path: pyproject.toml: is not a directory",
        ),
        (["+suite.pth=x"], "suite.pth: not an argument of experiments.suites.jsonl.load_suite"),
        (["suite=tiered_synth", "suite.observations=many"], "suite.observations: expected int, got 'many'"),
        (["suite=tiered_synth", "+suite.path=/tmp"], "suite.path: not an argument of"),
    ],
)
def test_a_bad_run_setting_is_named(overrides, expected):
    found = config_problems(*overrides)
    assert any(p.startswith(expected) for p in found), found


def test_all_problems_of_a_config_come_at_once():
    found = config_problems(
        "depth=0",
        "metrics=[P@0]",
        "seed=abc",
        "resume=maybe",
        "suite=jsonl",
        "suite.path=null",
        "stage.bm25.k1=abc",
    )
    keys = [p.split(":")[0] for p in found]
    assert keys == ["depth", "metrics", "seed", "resume", "suite.path", "stage.bm25.k1"]


def test_a_bad_config_fails_before_the_suite_is_read_and_writes_nothing(tmp_path):
    """The suite here is broken too: the config error must come first (no file is read, nothing written)."""
    broken = tmp_path / "suite"
    broken.mkdir()
    (broken / "memories.jsonl").write_text("{not json\n")
    cfg = compose_config(
        [
            "suite=jsonl",
            f"suite.path={broken}",
            "variant=bm25",
            "tracking=mlflow",
            f"tracking.tracker.uri=sqlite:///{tmp_path / 'mlflow.db'}",
            f"cache_dir={tmp_path / 'cache'}",
            "stage.bm25.k1=abc",
        ]
    )
    with pytest.raises(ConfigError, match="stage.bm25.k1: expected float"):
        run_experiment(cfg, tmp_path / "run")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["suite"]  # no run dir, cache, or MLflow store


# ---- config hash: 1 and 1.0 are one config ---------------------------------------------------------------


def test_integral_floats_hash_like_ints():
    def hashed(*overrides: str) -> str:
        return config_hash(RunSettings.from_config(compose_config(list(overrides))).config)

    base = hashed("variant=bm25", "stage.bm25.k1=1")
    assert hashed("variant=bm25", "stage.bm25.k1=1.0") == base
    assert hashed("variant=bm25", "stage.bm25.k1=1.5") != base
    assert config_hash({"a": [2.0, {"b": 0.0}]}) == config_hash({"a": [2, {"b": 0}]})
    assert config_hash({"a": float("nan")}) != config_hash({"a": 0})  # not integral: no crash, no merge
    assert _canonical(2.0) == 2 and _canonical(float("inf")) == float("inf")  # stage fingerprints agree


def test_resume_finds_a_run_whether_k1_was_written_1_or_1_0(tmp_path, capsys):
    suite = write_tiny_suite(tmp_path)
    common = [
        "suite=jsonl",
        f"suite.path={suite}",
        "variant=bm25",
        "tracking=none",
        "progress=false",
        "resume=true",
        f"cache_dir={tmp_path / 'cache'}",
    ]
    first = run_experiment(compose_config([*common, "stage.bm25.k1=1"]), tmp_path / "first")
    assert "skipped" not in first and (tmp_path / "first" / "metrics.json").is_file()
    second = run_experiment(compose_config([*common, "stage.bm25.k1=1.0"]), tmp_path / "second")
    assert second["skipped"]["run_dir"] == str((tmp_path / "first").resolve())
    assert second["overall"]["nDCG@10"] == first["overall"]["nDCG@10"]
    assert not (tmp_path / "second" / "metrics.json").exists()
    third = run_experiment(compose_config([*common, "stage.bm25.k1=1.2"]), tmp_path / "third")
    assert "skipped" not in third  # a different value is a different config


# ---- the CLI, as a user runs it -------------------------------------------------------------------------

CLI_PROBES = {
    "k1_text": (["stage.bm25.k1=abc"], "stage.bm25.k1: expected float, got 'abc'"),
    "k1_nan": (["stage.bm25.k1=nan"], "stage.bm25.k1: expected a finite float, got nan"),
    "k1_negative": (["stage.bm25.k1=-1"], "stage.bm25.k1: must be >= 0, got -1"),
    "b_above_one": (["stage.bm25.b=2"], "stage.bm25.b: must be <= 1, got 2"),
    "top_n_zero": (["stage.bm25.top_n=0"], "stage.bm25.top_n: must be >= 1, got 0"),
    "depth_zero": (["depth=0"], "depth: expected an integer >= 1"),
    "p_at_0": (["metrics=[P@0]"], "metrics: 'P@0': the cutoff after @ must be an integer >= 1"),
    "seed_text": (["seed=abc"], "seed: expected an integer >= 0, got 'abc'"),
    "resume_maybe": (["resume=maybe"], "resume: expected auto, true or false, got 'maybe'"),
    "suite_path_null": (["suite.path=null"], "suite.path: null, but this suite reads its data from disk"),
}


@pytest.fixture(scope="module")
def cli_outcomes(tmp_path_factory) -> tuple[dict[str, subprocess.CompletedProcess], Path]:
    tmp = tmp_path_factory.mktemp("config_cli")
    suite = write_tiny_suite(tmp)
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp / 'mlflow.db'}",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }

    def run(case: str) -> subprocess.CompletedProcess:
        command = [
            sys.executable,
            "-m",
            "experiments.run",
            "suite=jsonl",
            f"suite.path={suite}",
            "variant=bm25",
            "tracking=mlflow",
            f"hydra.run.dir={tmp / 'runs' / case}",
            f"cache_dir={tmp / 'cache'}",
            "progress=false",
            *CLI_PROBES[case][0],
        ]
        return subprocess.run(command, cwd=tmp, capture_output=True, text=True, timeout=300, env=env)

    with ThreadPoolExecutor(max_workers=2) as pool:
        done = dict(zip(CLI_PROBES, pool.map(run, CLI_PROBES), strict=True))
    return done, tmp


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CLI_PROBES))
def test_the_cli_refuses_a_bad_config_with_exit_2_and_writes_nothing(cli_outcomes, case):
    done, tmp = cli_outcomes
    result = done[case]
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert CLI_PROBES[case][1] in result.stderr, output
    assert "Traceback" not in output and "Error executing job" not in output, output
    run_dir = tmp / "runs" / case
    assert not run_dir.exists()  # a refused run leaves no folder (not even Hydra's own files)
    assert not (tmp / "mlflow.db").exists() and not (tmp / "mlruns").exists()  # no MLflow run anywhere
    assert not (tmp / "cache").exists()


@pytest.mark.slow
def test_the_cli_still_runs_a_good_config(tmp_path):
    """The control for the probes above: the same command line without a bad value finishes (exit 0)."""
    suite = write_tiny_suite(tmp_path)
    command = [
        sys.executable,
        "-m",
        "experiments.run",
        "suite=jsonl",
        f"suite.path={suite}",
        "variant=bm25",
        "tracking=none",
        f"hydra.run.dir={tmp_path / 'run'}",
        f"cache_dir={tmp_path / 'cache'}",
        "progress=false",
        "stage.bm25.k1=1",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["overall"]["n_queries"] > 0
