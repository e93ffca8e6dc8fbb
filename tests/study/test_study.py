"""A study is a config: plans are checked before anything runs, and one command runs a plan end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import MISSING, fields
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from experiments.compare.drilldown import DrilldownOptions
from experiments.compare.render import Block, Paragraph
from experiments.configure.compose import CONF_DIR, compose_config, run_config
from experiments.study import Experiment, PlanError, Row, SectionContext, load_plan, write_report
from experiments.study.plan import Stats, StudyPlan
from experiments.study.sections import available_sections
from experiments.suites.jsonl import save_suite
from tests.support import REPO, tiny_suite

PLANS = sorted(p.stem for p in (CONF_DIR / "study").glob("*.yaml"))


def good_plan(**changes) -> dict:
    plan = {
        "name": "tiny_study",
        "suite": {"name": "jsonl", "path": "/nowhere"},
        "variant": "bm25",
        "rows": [{"name": "bm25_default", "overrides": []}],
        "sweep": {"stage.bm25.k1": "range(0.5, 1.6, 0.5)"},
        "baseline": "bm25_default",
        "metrics": ["nDCG@10", "R@10"],
    }
    plan.update(changes)
    return plan


@pytest.mark.parametrize("name", PLANS)
def test_every_committed_plan_composes_and_loads(name):
    cfg = compose_config([f"study={name}"], config_name="run_study")
    plan = load_plan(OmegaConf.to_container(cfg.study, resolve=True), name=name)
    assert plan.name == name and plan.baseline in [r.name for r in plan.rows]
    raw = yaml.safe_load((CONF_DIR / "study" / f"{name}.yaml").read_text())
    assert len(raw) <= 25
    assert "name" not in raw, "a plan is named by its file (study=<name>): it does not restate it"


def restated_defaults(raw: dict) -> list[str]:
    """The keys of a plan file whose value is what the loader would use without them.

    The defaults are read from the loader's own dataclasses (StudyPlan, Stats, DrilldownOptions), so a
    changed default is followed here. `baseline` is not one: it names the plan's reference row, and the
    loader's fallback (the first row) is a convenience, not a default value.
    """
    plan_defaults = {
        f.name: f.default
        for f in fields(StudyPlan)
        if f.default is not MISSING and f.name not in ("stats", "drilldown")
    }
    plan_defaults["title"] = raw.get("name")
    found = [key for key, value in raw.items() if key in plan_defaults and _same(value, plan_defaults[key])]
    for key, cls in (("stats", Stats), ("drilldown", DrilldownOptions)):
        block = raw.get(key)
        if block == {}:
            found.append(key)
        found += [f"{key}.{sub}" for sub, value in (block or {}).items() if _same(value, getattr(cls(), sub))]
    return found


def _same(value, default) -> bool:
    """A YAML value equal to a dataclass default (a YAML list stands for a tuple)."""
    if isinstance(default, tuple):
        return isinstance(value, list) and tuple(value) == default
    return value == default and type(value) is type(default)


@pytest.mark.parametrize("name", PLANS)
def test_no_plan_states_a_value_the_loader_defaults_to(name):
    raw = yaml.safe_load((CONF_DIR / "study" / f"{name}.yaml").read_text())
    assert restated_defaults(raw) == [], f"conf/study/{name}.yaml restates defaults: delete them"


def test_the_default_check_finds_every_kind_of_restated_default():
    plan = good_plan(
        stats={"test": "randomization", "alpha": 0.05, "correction": "holm", "seed": 0, "unit": "query"},
        drilldown={"n": 3, "queries": ["q1"]},
        title="tiny_study",
        overrides=[],
        description="",
        label=None,
        primary="nDCG@10",
    )
    found = restated_defaults(plan)
    assert found == ["title", "overrides", "description", "label", "stats.test", "stats.alpha"] + [
        "stats.correction",
        "stats.seed",
        "drilldown.n",
    ]
    load_plan(plan)  # every restated value is a valid one: the check is about repetition, not errors


@pytest.mark.parametrize("name", ["boost_sweep21_beam100k", "exp05_beam100k", "beam_best_beam100k"])
def test_rows_sharing_their_group_choices_compose_as_hydra_composes_each(name):
    """The study composes a sweep's group choices once and sets each row's values: the same config."""
    from experiments.configure.study_row import study_composer

    cfg = compose_config([f"study={name}"], config_name="run_study")
    plan = load_plan(OmegaConf.to_container(cfg.study, resolve=True), name=name)
    composer = study_composer()
    for row in plan.rows[:5]:
        overrides = plan.row_overrides(row)
        fast, full = run_config(composer(overrides)), compose_config(overrides)
        assert OmegaConf.to_yaml(fast) == OmegaConf.to_yaml(full), row.name
        assert OmegaConf.is_struct(fast) and OmegaConf.is_struct(full)
    assert len(composer._bases) < 5 or name == "beam_best_beam100k"  # a sweep shares compositions


def test_a_row_value_for_a_missing_key_is_still_an_error():
    from hydra.errors import ConfigCompositionException

    from experiments.configure.study_row import study_composer

    with pytest.raises(ConfigCompositionException, match="no_such_field"):
        study_composer()(["variant=bm25", "stage.bm25.no_such_field=1"])


def test_the_worked_example_sweeps_five_weights_against_weight_zero():
    cfg = compose_config(["study=boost_beam100k"], config_name="run_study")
    plan = load_plan(OmegaConf.to_container(cfg.study, resolve=True), name="boost_beam100k")
    weights = [dict(r.swept)["stage.instruction_boost.weight"] for r in plan.rows]
    assert [float(w) for w in weights] == [0.0, 0.1, 0.2, 0.3, 0.4]
    assert plan.baseline == "exp05[instruction_boost.weight=0]"
    assert plan.stats.correction == "holm" and [s.name for s in plan.sections] == ["exp05_acceptance"]
    assert plan.row_overrides(plan.rows[2]) == [
        "suite=beam",
        "suite.path=../shared/beam/100K",
        "variant=exp05",
        "stage.instruction_boost.weight=0.2",
    ]


def test_a_sweep_expands_into_named_rows_and_listed_rows_name_their_variant():
    plan = load_plan(good_plan())
    assert [r.name for r in plan.rows] == [
        "bm25_default",
        "bm25[bm25.k1=0.5]",
        "bm25[bm25.k1=1]",
        "bm25[bm25.k1=1.5]",
    ]
    assert "variant.name=bm25_default" in plan.row_overrides(plan.rows[0])
    assert load_plan(good_plan(baseline="stage.bm25.k1=1")).baseline == "bm25[bm25.k1=1]"


def test_a_later_override_of_a_key_replaces_the_earlier_one():
    plan = load_plan(
        good_plan(
            overrides=["stage.bm25.b=0.5"],
            rows=[{"name": "b9", "overrides": ["stage.bm25.b=0.9"]}],
            baseline="b9",
        )
    )
    overrides = plan.row_overrides(plan.rows[0])
    assert "stage.bm25.b=0.9" in overrides and "stage.bm25.b=0.5" not in overrides


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"metrics": None}, "study.metrics: is required"),
        ({"metrics": ["nDCG@10", "nDCG@ten"]}, "study.metrics[1]"),
        ({"primary": "P@5"}, "study.primary"),
        ({"baseline": "no_such_row"}, "study.baseline"),
        ({"baseline": "stage.bm25.k1=7"}, "study.baseline"),
        ({"stats": {"test": "t-test"}}, "study.stats.test"),
        ({"stats": {"alpha": 2}}, "study.stats.alpha"),
        ({"stats": {"correction": "bonferroni"}}, "study.stats.correction"),
        ({"stats": {"sed": 1}}, "study.stats: unknown keys ['sed']"),
        ({"sections": ["no_such_section"]}, "study.sections[0]"),
        ({"sweep": {"stage.bm25.k1": "range(0, 1"}}, "study.sweep.stage.bm25.k1"),
        ({"rows": [{"name": "a b"}]}, "study.rows[0].name"),
        ({"rows": [{"name": "x", "overrides": ["k1"]}], "baseline": "x"}, "study.rows[0].overrides[0]"),
        ({"rows": [{"name": "x", "overides": []}]}, "study.rows[0]: unknown keys ['overides']"),
        ({"rows": None, "sweep": None}, "study.rows"),
        (
            {"rows": [{"name": "dup"}, {"name": "dup"}], "baseline": "dup"},
            "study.rows: row names must be unique",
        ),
        ({"suite": 3}, "study.suite"),
        ({"metric": ["R@10"]}, "study: unknown keys ['metric']"),
        ({"measure_latency": "yes"}, "study.measure_latency"),
    ],
)
def test_a_bad_plan_is_an_error_naming_the_field(change, field):
    with pytest.raises(PlanError) as err:
        load_plan(good_plan(**change))
    assert field in str(err.value)


def test_the_exp05_acceptance_section_is_registered():
    assert "exp05_acceptance" in available_sections()


def ability_counts(ctx: SectionContext) -> list[Block]:
    """A report section defined outside the harness, named in a plan as
    tests.study.test_study:ability_counts."""
    n = len(ctx.comparison.values[ctx.primary])
    return [
        Paragraph(
            f"PLUGIN: {n} answerable queries, baseline {ctx.comparison.baseline}, {ctx.options['note']}"
        )
    ]


@pytest.fixture
def tiny_dir(tmp_path) -> Path:
    return save_suite(tiny_suite(), tmp_path / "tiny")


def test_experiment_compares_rows_with_significance_marks(tiny_dir, tmp_path):
    result = Experiment(
        [Row("bm25", ("variant=bm25",)), Row("bm25_b0", ("variant=bm25", "stage.bm25.b=0"))],
        suite={"name": "jsonl", "path": str(tiny_dir)},
        metrics=["nDCG@10", "R@10"],
        baseline="bm25",
        tracking=False,
        cache_dir=None,
        runs_dir=tmp_path / "runs",
    )
    assert result.baseline == "bm25" and list(result.labels) == ["bm25", "bm25_b0"]
    assert list(result.table().columns) == ["nDCG@10", "R@10"]
    assert list(result.per_query("R@10").index) == ["c1:q0", "c1:q1", "c2:q0"]  # answerable only
    assert (tmp_path / "runs" / "bm25_b0" / "metrics.json").is_file()
    sig = result.significance
    assert set(sig["run"]) == {"bm25", "bm25_b0"} and sig.attrs["correction"] == "holm"
    out = write_report(result, tmp_path / "reports" / "tiny", commands=["Experiment(...)"])
    report = (out / "report.md").read_text()
    assert "Baseline: **bm25**" in report and "| bm25_b0 |" in report and "Experiment(...)" in report


def test_a_plan_metric_the_runs_do_not_compute_by_default_is_added_to_every_row(tiny_dir, tmp_path):
    result = Experiment(
        [Row("bm25", ("variant=bm25",))],
        suite={"name": "jsonl", "path": str(tiny_dir)},
        metrics=["nDCG@10", "R@3"],  # R@3: not in config.yaml's metrics
        baseline="bm25",
        tracking=False,
        cache_dir=None,
        runs_dir=tmp_path / "runs",
    )
    assert list(result.table().columns) == ["nDCG@10", "R@3"]
    assert result.per_query("R@3").notna().all().all()


def _study(tmp_path: Path, tiny_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.study",
            "study=tiny_plan",
            f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
            "tracking=none",
            f"runs_root={tmp_path / 'runs'}",
            f"cache_dir={tmp_path / 'cache'}",
            *extra,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_a_tiny_plan_runs_end_to_end_and_a_rerun_reuses_its_rows(tiny_dir, tmp_path):
    (tmp_path / "conf" / "study").mkdir(parents=True)
    plan = {
        "name": "tiny_plan",
        "suite": {"name": "jsonl", "path": str(tiny_dir)},
        "variant": "bm25",
        "sweep": {"stage.bm25.b": [0.0, 0.75]},
        "baseline": "stage.bm25.b=0.75",
        "metrics": ["nDCG@10", "R@10"],
        "label": "ability",
        "sections": [
            {"name": "exp05_acceptance", "target": "if"},
            {"name": "tests.study.test_study:ability_counts", "note": "from the plan"},
        ],
    }
    (tmp_path / "conf" / "study" / "tiny_plan.yaml").write_text(yaml.safe_dump(plan))
    first = _study(tmp_path, tiny_dir)
    assert first.returncode == 0, first.stderr[-3000:]
    # By default the report goes beside the rows' runs (an output folder), never over reports/.
    report = (tmp_path / "runs" / "tiny_plan" / "report.md").read_text()
    assert "python -m experiments.study study=tiny_plan" in report
    assert "Baseline: **bm25[bm25.b=0.75]**" in report and "bm25[bm25.b=0]" in report
    assert "## EXP-05 acceptance" in report and "`if` R@10" in report
    assert "PLUGIN: 3 answerable queries, baseline bm25[bm25.b=0.75], from the plan" in report
    assert (tmp_path / "runs" / "tiny_plan" / "index.html").is_file()
    second = _study(tmp_path, tiny_dir, f"output_dir={tmp_path / 'reports' / 'tiny_plan'}")
    assert second.returncode == 0, second.stderr[-3000:]
    assert second.stdout.count("skipped: config") == 2
    again = (tmp_path / "reports" / "tiny_plan" / "report.md").read_text()
    # The same numbers (not the date; the command block names the other output_dir).
    after_commands = [text.split("## Commands")[1].split("```", 2)[2] for text in (again, report)]
    assert after_commands[0] == after_commands[1]


@pytest.mark.slow
def test_a_bad_plan_exits_2_before_running_anything(tmp_path):
    (tmp_path / "conf" / "study").mkdir(parents=True)
    plan = good_plan(name="tiny_plan", baseline="missing_row")
    (tmp_path / "conf" / "study" / "tiny_plan.yaml").write_text(yaml.safe_dump(plan))
    proc = _study(tmp_path, tmp_path)
    assert proc.returncode == 2 and "study.baseline" in proc.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_a_row_whose_run_config_is_invalid_exits_2_naming_the_setting(tiny_dir, tmp_path):
    (tmp_path / "conf" / "study").mkdir(parents=True)
    plan = good_plan(name="tiny_plan", suite={"name": "jsonl", "path": str(tiny_dir)}, sweep=None)
    plan["overrides"] = ["stage.bm25.k1=-1"]  # out of the stage's range
    (tmp_path / "conf" / "study" / "tiny_plan.yaml").write_text(yaml.safe_dump(plan))
    proc = _study(tmp_path, tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "stage.bm25.k1: must be >= 0, got -1" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_with_tracking_a_study_is_one_mlflow_parent_with_a_child_per_row(tiny_dir, tmp_path, monkeypatch):
    import mlflow

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracking = {
        "enabled": True,
        "tracker": {
            "_target_": "experiments.track.mlflow_tracker.MlflowTracker",
            "experiment": "study",
            "uri": uri,
        },
    }
    rows = [Row("bm25", ("variant=bm25",)), Row("bm25_b0", ("variant=bm25", "stage.bm25.b=0"))]
    kwargs = dict(
        suite={"name": "jsonl", "path": str(tiny_dir)},
        metrics=["R@10"],
        tracking=tracking,
        cache_dir=str(tmp_path / "cache"),
        runs_dir=tmp_path / "runs",
    )
    result = Experiment(rows, **kwargs)
    client = mlflow.MlflowClient(tracking_uri=uri)
    children = client.search_runs(
        [client.get_experiment_by_name("study").experiment_id],
        f"tags.`mlflow.parentRunId` = '{result.parent_run_id}'",
    )
    assert sorted(r.data.tags["variant"] for r in children) == ["bm25", "bm25_b0"]
    assert client.get_run(result.parent_run_id).info.status == "FINISHED"
    again = Experiment(rows, **kwargs)  # the same study: its parent is reopened, no row is re-run
    assert again.parent_run_id == result.parent_run_id
    assert len(client.search_runs([children[0].info.experiment_id], "")) == 3  # parent + 2 children
    assert again.table().equals(result.table())


@pytest.mark.parametrize("measure", [False, True])
def test_measure_latency_gives_every_row_a_measured_latency(measure, tmp_path):
    """Rows sharing a pipeline prefix: by default the second reuses the first's candidates (its latency
    unmeasured, left out of the latency frontier); `measure_latency: true` runs each row on its own, and
    every row's per-query latency is measured (its embeddings still come from the cache)."""
    from experiments.study.experiment import run_plan

    plan = load_plan(
        {
            "name": "measured",
            "suite": {"name": "spark25", "path": str(REPO / "datasets" / "spark25")},
            "variant": "exp05",
            "sweep": {"stage.instruction_boost.weight": [0.0, 0.3]},
            "baseline": "stage.instruction_boost.weight=0.0",
            "metrics": ["nDCG@10"],
            "measure_latency": measure,
        }
    )
    result = run_plan(plan, runs_dir=tmp_path / "runs", tracking=False, cache_dir=str(tmp_path / "cache"))
    measured = [
        json.loads((folder / "metrics.json").read_text())["overall"]["latency_measured"]
        for folder in sorted((tmp_path / "runs").iterdir())
    ]
    assert measured == ([True, True] if measure else [True, False])
    assert len(result.labels) == 2
    if measure:  # the embedding cache is still where the study's cache_dir puts it
        assert any((tmp_path / "cache" / "embeddings").iterdir())
        assert not (tmp_path / "cache" / "candidates").exists()
