"""The run's settings read once (experiments/configure/settings.py), and resume asked through one object
(experiments/run/resume.py `Resume`): once before the run, once after."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

from experiments.configure.build import build_pipeline
from experiments.configure.compose import compose_config
from experiments.configure.settings import RunSettings
from experiments.run.app import run_experiment
from experiments.run.resume import Resume, config_hash
from experiments.suites.load import load_suite
from tests.sweep_support import write_tiny_suite


def test_the_record_holds_what_a_run_reads_each_setting_once():
    cfg = compose_config(["variant=exp05", "seed=3", "resume=false", "budget.tokens=2000", "tracking=none"])
    settings = RunSettings.from_config(cfg)
    assert (settings.variant, settings.seed, settings.resume, settings.budget_tokens) == (
        "exp05",
        3,
        False,
        2000,
    )
    assert settings.stage_order == tuple(cfg.variant.stages) and settings.depth == cfg.depth
    assert settings.metrics == tuple(cfg.metrics) and settings.objective == cfg.objective
    assert settings.tracking.enabled is False and settings.answer is None
    assert settings.config == OmegaConf.to_container(cfg, resolve=True)
    assert settings.suite == settings.config["suite"]
    # `stage.dense.encoder: ${encoder}` only refers to another setting: the params log it at its source
    assert "stage.dense.encoder" in settings.references and "encoder" not in settings.references
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.seed = 4  # type: ignore[misc]


def test_resume_is_asked_once_before_the_run_and_answers_from_what_the_run_recorded(tmp_path):
    suite_dir = write_tiny_suite(tmp_path)
    overrides = ["suite=jsonl", f"suite.path={suite_dir}", "variant=bm25", "tracking=none", "progress=false"]
    cfg = compose_config([*overrides, f"cache_dir={tmp_path / 'cache'}", "resume=true"])
    run_experiment(cfg, tmp_path / "first")  # records its folder as finished (Resume.record)
    settings = RunSettings.from_config(cfg)
    suite, pipeline = load_suite(settings.suite), build_pipeline(cfg)
    told: list[str] = []
    found = Resume.ask(
        settings, suite.content_hash, pipeline, None, False, lambda phase, *_: told.append(phase)
    )
    assert found.cfg_hash == config_hash(settings.config)
    assert found.finished is not None and found.finished.run_dir == str((tmp_path / "first").resolve())
    assert told == ["look up a finished run"]
    off = dataclasses.replace(settings, resume="auto")  # auto: only a multirun's job is answered
    told.clear()
    assert (
        Resume.ask(off, suite.content_hash, pipeline, None, False, lambda *_: told.append("x")).finished
        is None
    )
    assert told == []  # resume off: nothing is looked up
