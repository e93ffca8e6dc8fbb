"""The settings of the Hydra apps other than memeval-run, each read from its composed config once into a
frozen record the app's body takes (experiments/configure/app.py `hydra_app`), as a run takes RunSettings:

    StudySettings     memeval-study                           conf/run_study.yaml
    ConformSettings   memeval-conform                         conf/conform.yaml
    FusionSettings    python -m experiments.training.fusion   conf/train_fusion.yaml
    RerankerSettings  memeval-train-reranker                  conf/train_reranker.yaml

A field holds its setting's value as the config gives it (resolved); a node a body builds from
(`_target_`: a suite, a stage, a tracker) is its resolved mapping. Where an app writes or logs its config
as a whole, the record carries that text, made here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from experiments.configure.check import ConfigError
from experiments.configure.compose import CONF_DIR
from experiments.configure.settings import TrackingSettings


def _resolved(node: Any) -> Any:
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node


def _complete(node: DictConfig) -> None:
    """OmegaConf's error for the first value `node` leaves unset (`???`), named by its full key as
    instantiating it names it (`system=python` without `system.adapter._target_`)."""
    if missing := sorted(OmegaConf.missing_keys(node)):
        raise MissingMandatoryValue(f"Missing mandatory value: {missing[0]}")  # its full key


def _tracking(cfg: DictConfig) -> TrackingSettings:
    return TrackingSettings.of(_resolved(cfg.tracking))


@dataclass(frozen=True)
class StudySettings:
    """memeval-study's settings: the plan and where its rows and report go."""

    plan: Mapping[str, Any] | None  # the `study` node resolved (conf/study/<plan>.yaml); None: none chosen
    runs_root: str
    output_dir: str | None
    refresh: bool
    cache_dir: str | None
    progress: bool
    # The `tracking` node as composed (its rows' configs take it as their own) when tracking is on; None: off.
    tracking: Mapping[str, Any] | None
    tracker_uri: str | None  # resolved: where the study's report is logged

    @classmethod
    def from_config(cls, cfg: DictConfig) -> StudySettings:
        enabled = bool(cfg.tracking.enabled)
        return cls(
            plan=None if cfg.get("study") is None else _resolved(cfg.study),
            runs_root=cfg.runs_root,
            output_dir=cfg.get("output_dir"),
            refresh=bool(cfg.get("refresh")),
            cache_dir=cfg.cache_dir,
            progress=cfg.progress,
            tracking=OmegaConf.to_container(cfg.tracking) if enabled else None,  # type: ignore[arg-type]
            tracker_uri=cfg.tracking.tracker.get("uri") if enabled else None,
        )


@dataclass(frozen=True)
class ConformSettings:
    """memeval-conform's settings: the checks' node and the system under test."""

    conform: Mapping[str, Any]  # the `conform` node resolved: the probe's settings and `checks`
    system: Mapping[str, Any]  # the `system` node resolved: its `adapter`, `mode`, `cassette`
    tracking: TrackingSettings
    config_text: str  # the config as composed (not resolved), logged as config.yaml

    @classmethod
    def from_config(cls, cfg: DictConfig) -> ConformSettings:
        _complete(cfg.system.adapter)  # the adapter is built from the resolved node
        return cls(
            conform=_resolved(cfg.conform),
            system=_resolved(cfg.system),
            tracking=_tracking(cfg),
            config_text=OmegaConf.to_yaml(cfg),
        )


@dataclass(frozen=True)
class FirstStage:
    """A trainer's first stage: its stages in order and their resolved `_target_` nodes."""

    order: tuple[str, ...]
    stages: Mapping[str, Any]

    @classmethod
    def from_config(cls, node: DictConfig) -> FirstStage:
        return cls(order=tuple(str(s) for s in node.order), stages=_resolved(node.stage))


@dataclass(frozen=True)
class FusionSettings:
    """memeval-train-fusion's settings (conf/train_fusion.yaml states their meaning)."""

    train_suite: Mapping[str, Any]  # the loader node resolved
    train_suite_given: Mapping[str, Any]  # as composed (not resolved): the model's provenance
    first_stage: FirstStage
    depth: int
    sources: tuple[str, ...] | None
    C: float
    val_fraction: float
    seed: int
    output: str
    cache_dir: str | None
    progress: bool | str

    @classmethod
    def from_config(cls, cfg: DictConfig) -> FusionSettings:
        return cls(
            train_suite=_resolved(cfg.train_suite),
            train_suite_given=OmegaConf.to_container(cfg.train_suite),  # type: ignore[arg-type]
            first_stage=FirstStage.from_config(cfg.first_stage),
            depth=cfg.depth,
            sources=tuple(cfg.sources) if cfg.sources else None,
            C=cfg.C,
            val_fraction=cfg.val_fraction,
            seed=cfg.seed,
            output=cfg.output,
            cache_dir=cfg.cache_dir,
            progress=cfg.progress,
        )


@dataclass(frozen=True)
class RerankerSettings:
    """memeval-train-reranker's settings (conf/train_reranker.yaml states their meaning), each of the kind
    of its shipped default (`setting_problems`)."""

    train_suite: Mapping[str, Any]  # the loader node resolved
    first_stage: FirstStage
    base_model: str
    output_dir: str
    negative_depth: int
    negatives_per_query: int
    max_positives_per_query: int
    max_pairs: int
    val_fraction: float
    val_max_queries: int
    max_length: int
    batch_size: int
    epochs: int
    lr: float
    weight_decay: float
    warmup_ratio: float
    eval_every: int
    max_train_minutes: float | None
    num_layers: int | None
    export_backend: str | None
    export_dir: str | None
    patience: int
    val_metric: str
    seed: int
    cache_dir: str | None
    progress: bool
    tracking: TrackingSettings
    config: Mapping[str, Any]  # the whole config, resolved: training.json and the MLflow params
    config_text: str  # the same as YAML: MLflow's config.yaml

    @classmethod
    def from_config(cls, cfg: DictConfig) -> RerankerSettings:
        """The record, or ConfigError naming each setting of the wrong kind (before any is read)."""
        values: dict[str, Any] = _resolved(cfg)
        if problems := _kind_problems(values):
            raise ConfigError(problems)
        return cls(
            train_suite=values["train_suite"],
            first_stage=FirstStage.from_config(cfg.first_stage),
            config=values,
            config_text=OmegaConf.to_yaml(cfg, resolve=True),
            tracking=_tracking(cfg),
            num_layers=values.get("num_layers"),
            export_backend=values.get("export_backend"),
            **{name: cfg[name] for name in _PLAIN_RERANKER_FIELDS},  # scalars: as resolved
        )


_PLAIN_RERANKER_FIELDS = (
    "base_model output_dir negative_depth negatives_per_query max_positives_per_query max_pairs val_fraction "
    "val_max_queries max_length batch_size epochs lr weight_decay warmup_ratio eval_every max_train_minutes "
    "export_dir patience val_metric seed cache_dir progress"
).split()


def setting_problems(cfg: DictConfig) -> list[str]:
    """memeval-train-reranker's settings whose value is not of the kind of their shipped default: a number,
    a bool, a string, a mapping, a list (`epochs=abc`, `progress=1`, `train_suite=x`), found before the
    training suite is read; null is accepted (several settings mean "none" by it)."""
    return _kind_problems(_resolved(cfg))


def _kind_problems(values: Mapping[str, Any]) -> list[str]:
    shipped = yaml.safe_load((CONF_DIR / "train_reranker.yaml").read_text())
    problems = []
    for key, default in shipped.items():
        value = values.get(key)
        if key in ("defaults", "hydra") or default is None or value is None or "${" in str(default):
            continue
        allowed = (int, float) if type(default) in (int, float) else (type(default),)  # a number: either
        if not isinstance(value, allowed) or isinstance(value, bool) is not isinstance(default, bool):
            problems.append(f"{key}: expected {' or '.join(k.__name__ for k in allowed)}, got {value!r}")
    return problems
