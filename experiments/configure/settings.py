"""The run's settings, read from the composed config once: a frozen record that run/, track/, serve/ and
study/ take instead of the config itself, so no module outside configure/ asks a DictConfig for a key.

    settings = RunSettings.from_config(cfg)  # after the config check (check.py): it resolves

Every field is a plain value (str, int, tuple, dict): what a module reads is typed here, once, and a
default (`resume: auto`, `statistics.unit: auto`) is stated once. `config` is the whole config resolved,
for what must be written or logged as a whole (its hash, config.yaml, the MLflow params); `references`
names the settings that only refer to another (`stage.dense.encoder: ${encoder}`), which the params log
once, at their source (experiments/track/run_params.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from experiments.suites.load import load_suite
from experiments.suites.suite import Suite

# conf/config.yaml: `shard` is null or "i/n"; `+shards=n` with `shard=i` (an integer) is the same as shard=i/n
SHARD_KEY, SHARDS_KEY = "shard", "shards"
_REFERENCE = re.compile(r"^\$\{[A-Za-z_][\w.]*\}$")  # `${encoder}`: a plain reference, no resolver


@dataclass(frozen=True)
class TrackingSettings:
    """`tracking`: whether the run logs to MLflow, and the tracker's node (`_target_` and its fields)."""

    enabled: bool
    tracker: Mapping[str, Any]

    @classmethod
    def of(cls, node: Mapping[str, Any]) -> TrackingSettings:
        """The record of a `tracking` node resolved to a mapping (every app's and a study row's)."""
        return cls(enabled=bool(node["enabled"]), tracker=node.get("tracker") or {})


@dataclass(frozen=True)
class RunSettings:
    """What a run reads of its config, each setting once (conf/config.yaml states their meaning). Frozen:
    no field is reassigned; the mappings are the resolved config's plain containers, only ever read."""

    variant: str
    stage_order: tuple[str, ...]  # the variant's stages, in order (build.py `finish_variant`)
    depth: int
    seed: int
    objective: str
    metrics: tuple[str, ...]
    report_label: str | None
    progress: bool | str  # as given: retrieval/progress.py reads it
    resume: bool | str  # auto | true | false (experiments/run_folder `resume_enabled`)
    cache_dir: str | None
    statistics_unit: str
    empty_queries: str
    budget_tokens: int | None
    sharding: Mapping[str, Any]  # `shard` and `shards` as given (experiments/shards.py reads them)
    suite: Mapping[str, Any]  # the loader node: `_target_` and its arguments
    extra_metrics: Mapping[str, Mapping[str, Any]]
    answer: Mapping[str, Any] | None  # None: no answer stage
    system: Mapping[str, Any] | None  # a live service's node; None without one (or when it does not resolve)
    tracking: TrackingSettings
    config: Mapping[str, Any]  # the whole config, resolved
    references: frozenset[str]

    @classmethod
    def from_config(cls, cfg: DictConfig, resolved: Mapping[str, Any] | None = None) -> RunSettings:
        """The record of a composed (and finished: build.py `finish_variant`) config; `resolved`: the
        config already resolved to a container (resolved here when not given)."""
        if resolved is None:
            resolved = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
        assert resolved is not None
        budget = resolved.get("budget")
        system = cfg.get("system")
        return cls(
            variant=str(cfg.variant.name),
            stage_order=tuple(str(s) for s in cfg.variant.stages),
            depth=int(cfg.depth),
            seed=cfg.seed,
            objective=cfg.objective,
            metrics=tuple(cfg.metrics),
            report_label=cfg.report_label,
            progress=cfg.progress,
            resume=cfg.get("resume", "auto"),
            cache_dir=cfg.cache_dir,
            statistics_unit=cfg.get("statistics", {}).get("unit", "auto"),
            empty_queries=cfg.get("empty_queries", "apart"),
            budget_tokens=None if budget is None else budget.get("tokens"),
            sharding={key: resolved.get(key) for key in (SHARD_KEY, SHARDS_KEY)},
            suite=resolved.get("suite") or {},
            extra_metrics=resolved.get("extra_metrics") or {},
            answer=resolved.get("answer"),
            system=resolved_or_none(system) if isinstance(system, DictConfig) else None,
            tracking=TrackingSettings.of(resolved["tracking"]),
            config=resolved,
            references=plain_references(cfg, resolved),
        )


def load_suite_from_config(cfg: DictConfig, *, memoise: bool = False) -> Suite:
    """The suite a composed config names (experiments/suites/load.py `load_suite` over its `suite` node)."""
    return load_suite(OmegaConf.to_container(cfg.suite, resolve=True), memoise=memoise)  # type: ignore[arg-type]


def resolved_or_none(node: DictConfig) -> dict[str, Any] | None:
    """A config node resolved to plain containers, or None when it does not resolve (the config check
    names why: a run refuses it before this value is read)."""
    try:
        return OmegaConf.to_container(node, resolve=True)  # type: ignore[return-value]
    except Exception:
        return None


def plain_references(node: Any, values: Mapping[str, Any], prefix: str = "") -> frozenset[str]:
    """The dotted keys of `values` (the config resolved) whose setting in `node` (the config as composed)
    only refers to another (`${encoder}`): one value, whose source is logged."""
    found: set[str] = set()
    for key, value in values.items():
        name = f"{prefix}{key}"
        if _is_reference(node, key):
            found.add(name)
            continue
        if isinstance(value, Mapping):
            child = node.get(key) if isinstance(node, DictConfig) else None
            found |= plain_references(child, value, f"{name}.")
    return frozenset(found)


def _is_reference(node: Any, key: str) -> bool:
    if not isinstance(node, DictConfig) or key not in node:
        return False
    if not OmegaConf.is_interpolation(node, key):
        return False
    raw = node._get_node(key)._value()  # the interpolation's own text, unresolved
    return isinstance(raw, str) and bool(_REFERENCE.match(raw))
