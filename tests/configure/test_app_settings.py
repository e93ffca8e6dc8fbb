"""The Hydra apps' records (experiments/configure/app_settings.py), and the one helper that makes a Hydra app
whose body takes its record (experiments/configure/app.py `hydra_app`): the job keeps the body's name."""

from __future__ import annotations

import dataclasses
import sys

import pytest
import yaml
from omegaconf import OmegaConf

from experiments.configure.app import Job, hydra_app
from experiments.configure.app_settings import (
    ConformSettings,
    FusionSettings,
    RerankerSettings,
    StudySettings,
)
from experiments.configure.check import ConfigError
from experiments.configure.compose import compose_config
from experiments.configure.setup import setup


def _run_hydra_app(app, monkeypatch, *overrides: str) -> None:
    setup()
    monkeypatch.setattr(sys, "argv", ["app", *overrides])
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")  # Hydra re-raises instead of exiting 1
    app()


def test_the_body_takes_its_record_and_the_job_keeps_the_body_s_name(tmp_path, monkeypatch):
    seen: list[tuple[FusionSettings, Job]] = []

    def train_here(settings: FusionSettings, job: Job) -> None:
        seen.append((settings, job))

    app = hydra_app("train_fusion", FusionSettings.from_config)(train_here)
    assert (app.__name__, app.__module__) == ("train_here", __name__)
    _run_hydra_app(app, monkeypatch, "C=0.5", "first_stage.order=[bm25]", f"hydra.run.dir={tmp_path}")
    ((settings, job),) = seen
    assert (settings.C, settings.first_stage.order) == (0.5, ("bm25",))
    assert job.output_dir == tmp_path and job.overrides == ("C=0.5", "first_stage.order=[bm25]")
    # Hydra names the job after the body's module, as it did when the body took the config itself.
    written = yaml.safe_load((tmp_path / ".hydra" / "hydra.yaml").read_text())
    assert written["hydra"]["job"]["name"] == __name__.rsplit(".", 1)[-1]
    assert yaml.safe_load((tmp_path / ".hydra" / "config.yaml").read_text())["C"] == 0.5


def test_a_record_that_cannot_be_made_is_refused_before_the_body_runs(tmp_path, monkeypatch):
    refused: list[tuple[BaseException, Job]] = []
    body_ran: list[RerankerSettings] = []

    def train_here(settings: RerankerSettings, job: Job) -> None:
        body_ran.append(settings)

    app = hydra_app(
        "train_reranker", RerankerSettings.from_config, refused=lambda err, job: refused.append((err, job))
    )(train_here)
    with pytest.raises(ConfigError, match="epochs: expected int"):
        _run_hydra_app(app, monkeypatch, "epochs=abc", "tracking=none", f"hydra.run.dir={tmp_path}")
    assert body_ran == [] and len(refused) == 1
    assert isinstance(refused[0][0], ConfigError) and refused[0][1].output_dir == tmp_path


def test_the_reranker_record_names_every_setting_of_the_wrong_kind():
    cfg = compose_config(["epochs=abc", "progress=1", "tracking=none"], config_name="train_reranker")
    with pytest.raises(ConfigError) as err:
        RerankerSettings.from_config(cfg)
    assert [p.split(":")[0] for p in err.value.problems] == ["epochs", "progress"]


def test_the_reranker_record_carries_its_config_resolved_and_as_yaml():
    cfg = compose_config(["tracking=none", "num_layers=2"], config_name="train_reranker")
    settings = RerankerSettings.from_config(cfg)
    assert settings.config == OmegaConf.to_container(cfg, resolve=True)
    assert settings.config_text == OmegaConf.to_yaml(cfg, resolve=True)
    assert (settings.num_layers, settings.export_backend, settings.epochs) == (2, None, cfg.epochs)
    assert settings.export_dir == settings.config["export_dir"] and "${" not in settings.export_dir
    assert settings.tracking.enabled is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.epochs = 3  # type: ignore[misc]


def test_the_study_record_hands_its_rows_the_tracking_node_as_composed_only_when_tracking_is_on():
    off = StudySettings.from_config(
        compose_config(["study=boost_beam100k", "tracking=none"], config_name="run_study")
    )
    assert off.tracking is None and off.tracker_uri is None and off.plan is not None
    uri = "sqlite:///somewhere.db"
    cfg = compose_config(["study=boost_beam100k", f"tracking.tracker.uri={uri}"], config_name="run_study")
    on = StudySettings.from_config(cfg)
    assert on.tracking == OmegaConf.to_container(cfg.tracking) and on.tracker_uri == uri
    assert StudySettings.from_config(compose_config([], config_name="run_study")).plan is None


def test_the_conform_record_resolves_the_system_and_logs_the_config_as_composed():
    cfg = compose_config(["system=memeval_serve", "tracking=none"], config_name="conform")
    settings = ConformSettings.from_config(cfg)
    assert settings.system == OmegaConf.to_container(cfg.system, resolve=True)
    assert settings.conform["checks"] is None and settings.config_text == OmegaConf.to_yaml(cfg)


def test_the_conform_record_names_an_unset_adapter_value_by_its_full_key():
    from omegaconf.errors import MissingMandatoryValue

    cfg = compose_config(["system=python", "tracking=none"], config_name="conform")
    with pytest.raises(MissingMandatoryValue, match=r"^Missing mandatory value: system\.adapter\._target_$"):
        ConformSettings.from_config(cfg)
