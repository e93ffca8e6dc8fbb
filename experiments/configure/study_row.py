"""A study row's run config: composed from the row's overrides as `memeval-run <overrides>` would see it,
then given the study's settings (its metrics, tracking, cache, progress; resumed, or measured alone).
The study runner (experiments/study/experiment.py) hands in plain values and gets a `StudyRow` back:
the config for experiments/run/app.py `run_experiment`, and the row's tracking as a record.

    composer = study_composer()
    row = study_row(overrides, metrics=["P@5"], tracking=False, composer=composer)
    run_experiment(row.config, run_dir, multirun=True)
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from experiments.configure.compose import Composer, compose_config, run_config
from experiments.configure.settings import RunSettings, TrackingSettings

KEEP: Any = object()  # "what the run config says" (a cache_dir of None is a setting: no cache)


@dataclass(frozen=True)
class StudyRow:
    """One row's run config, as the study edited it, and its tracking (read once)."""

    config: DictConfig  # what experiments/run/app.py `run_experiment` takes

    @functools.cached_property
    def tracking(self) -> TrackingSettings:
        """Whether the row logs to MLflow and its tracker's node, resolved when first asked (a row's config
        is checked by its run: a study that tracks nothing never resolves a tracker here)."""
        return TrackingSettings.of(OmegaConf.to_container(self.config.tracking, resolve=True))  # type: ignore[arg-type]

    def settings(self) -> RunSettings:
        """The row's run settings (what a report section re-runs in-process: experiments/study/live.py)."""
        return RunSettings.from_config(self.config)


def study_composer() -> Composer:
    """The composer of a plan's rows: rows that differ only in values (a sweep: `stage.x.weight=0.2`) share
    one Hydra composition (compose.py `Composer`, the sweep launcher's too)."""
    return Composer(functools.partial(compose_config, hydra_node=True))


def study_row(
    overrides: Sequence[str],
    *,
    metrics: Sequence[str] = (),
    tracking: bool | Mapping[str, Any] = KEEP,
    cache_dir: str | None = KEEP,
    progress: bool = False,
    alone: bool = False,
    composer: Composer | None = None,
) -> StudyRow:
    """The run config of a row's `overrides`, with the study's settings:
    - `metrics`: the study's metrics a run would not compute (R@100), added, so a re-run computes them;
    - `tracking`: False (off), a `tracking` node as a mapping (the study app's), else the run config's;
    - `cache_dir`, unless KEEP; `progress`; `resume: true` (a study re-run reuses its finished rows);
    - `alone` (a plan's `measure_latency: true`): `measured_alone`."""
    cfg = run_config((composer or study_composer())(overrides))
    missing = [m for m in metrics if m not in cfg.metrics]
    if missing:
        cfg.metrics = [*cfg.metrics, *missing]
    if tracking is False:
        cfg.tracking = OmegaConf.create({"enabled": False})
    elif isinstance(tracking, Mapping):
        cfg.tracking = OmegaConf.create(dict(tracking))
    if cache_dir is not KEEP:
        cfg.cache_dir = cache_dir
    cfg.progress = progress
    cfg.resume = True
    if alone:
        measured_alone(cfg)
    return StudyRow(cfg)


def measured_alone(cfg: DictConfig) -> None:
    """A row whose latency must be measured (`measure_latency: true`): no candidate cache, the embedding
    cache and exported models kept where the study's cache puts them (a warm-embedding latency, as
    docs/caching.md says), and no resume (a finished row's latency was measured in another sitting)."""
    encoder = cfg.get("encoder")
    if encoder is not None:
        for key in ("cache_dir", "export_dir"):
            if key in encoder:
                encoder[key] = OmegaConf.select(cfg, f"encoder.{key}")  # resolved while cache_dir is set
    cfg.cache_dir = None
    cfg.resume = False
