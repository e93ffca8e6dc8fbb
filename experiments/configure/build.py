"""Building a retrieval pipeline from the run config: Hydra's `_target_` nodes -> checked stages ->
`retrieval.pipeline.Pipeline`, in the variant's order (`stage_order`: by kind unless the variant states one).

Sits in the run flow between composing the config (compose.py) and running the pipeline (run/app.py), which
hands the composed config here once (`prepare_run`: finished, checked, built, read into its settings). The
system under test (`retrieval/`) knows nothing of Hydra: this module instantiates each stage's node,
type-checks its values against the stage class's fields (retrieval.field_types) before the class sees
them, and collects every problem of every stage into one PipelineConfigError. In a sweep a stage whose
resolved config and named files are unchanged is taken from the process memo instead of being built again.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import re
import stat
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from experiments.configure.check import ConfigError, buildable_depth, config_problems, stages_checkable
from experiments.configure.settings import RunSettings, resolved_or_none
from retrieval.field_types import field_type_problems
from retrieval.pipeline import STAGE_KINDS, Pipeline, PipelineConfigError, stage_kind
from retrieval.reuse import ProcessMemo
from retrieval.stage import FieldError, Stage, range_problems, stage_ranges

if TYPE_CHECKING:
    from experiments.suites.suite import Suite
    from retrieval.types import Corpus


def stage_order(stages: Mapping[str, Any]) -> list[str]:
    """The order a variant that states none runs its stages in: the slots of its `stage` mapping by their
    class's kind (ingest -> retriever -> fusion -> rank, retrieval.pipeline.STAGE_KINDS), and within a kind
    in the order its defaults list composed them. A child variant adds a stage by naming it in its
    defaults (after the parent: it runs after the parent's stages of its kind; before: before them),
    replaces one with `override /stage@stage.<slot>: <name>` (same place) and drops one with
    `override /stage@stage.<slot>: null`. A variant whose order is not this one states `variant.stages`.
    A slot whose `_target_` names no stage class keeps its place after the others: building it says why."""
    keyed = []
    for position, name in enumerate(stages):
        node = stages.get(name)
        target = node.get("_target_") if hasattr(node, "get") else None
        kind = _kind_of(target) if isinstance(target, str) else None
        keyed.append((STAGE_KINDS.index(kind) if kind else len(STAGE_KINDS), position, str(name)))
    return [name for _, _, name in sorted(keyed)]


def finish_variant(cfg: DictConfig, choice: str | None) -> DictConfig:
    """What a variant file leaves unstated (conf/config.yaml: `variant: {stages: null, name: null}`), filled:
    - `variant.name`: the variant's file name, `choice` (`variant=exp05` runs as `exp05`: run.trec's tag, the
      MLflow run name);
    - `variant.stages`: the order of its stages by kind (`stage_order`).
    `variant.name=label` and `variant.stages=[...]`, on the command line or in a variant file, win. The
    Hydra apps call it with their job's choice (HydraConfig), compose_config with its composition's."""
    variant = cfg.get("variant")
    if not isinstance(variant, DictConfig):
        return cfg
    with read_write(variant), open_dict(variant):
        if choice is not None and variant.get("name") is None:
            variant.name = choice
        if (
            not OmegaConf.is_interpolation(variant, "stages")
            and variant.get("stages") is None
            and isinstance(cfg.get("stage"), DictConfig)
        ):
            variant.stages = stage_order(cfg.stage)
    return cfg


def _kind_of(target: str) -> str | None:
    module, _, name = target.rpartition(".")
    try:
        return stage_kind(getattr(importlib.import_module(module), name))
    except (ImportError, AttributeError, ValueError):
        return None


def pipeline_from_config(
    order: Sequence[str] | None,
    stages: Mapping[str, Any],
    depth: int,  # the run config's `depth` (conf/config.yaml states its default once)
    memo: ProcessMemo | None = None,
    resolved: Mapping[str, Any] | None = None,
) -> Pipeline:
    """Build from a variant's stage order (None: `stage_order`) and the `stage` config mapping (Hydra
    `_target_` nodes).

    Every stage's values are checked before the pipeline exists: each field against its annotation
    (retrieval.field_types.field_type_problems), then the stage's own ranges on construction. One
    PipelineConfigError lists every problem of every stage as `stage.<name>.<field>: <problem>`.
    With a `memo` (a sweep's jobs), a stage whose resolved config and named files are unchanged is
    the one built before: building them (Hydra's instantiate) was a tenth of a sweep job's time.
    `resolved`: the same `stage` mapping already resolved to plain containers (a run resolves its
    whole config once): the memo's keys are made from it instead of resolving each stage again.
    """
    order = stage_order(stages) if order is None else order
    built = build_stages(order, stages, memo, resolved)
    return Pipeline(tuple(built[name] for name in order), depth=depth)


def prepare_run(
    cfg: Any, *, choice: str | None = None, memo: ProcessMemo | None = None
) -> tuple[RunSettings, Pipeline]:
    """A composed run config, read once: its variant finished (`finish_variant`, with the Hydra job's
    `choice` of variant), every problem of it named at once and its pipeline built once
    (`checked_pipeline`), then its settings (settings.py `RunSettings`), the one record the run's other
    modules take. ConfigError or PipelineConfigError before any work."""
    finish_variant(cfg, choice)
    resolved = resolved_or_none(cfg)  # None when it does not resolve: config_problems names why
    pipeline = checked_pipeline(cfg, memo=memo, resolved=resolved)
    return RunSettings.from_config(cfg, resolved), pipeline


def checked_pipeline(
    cfg: Any, *, memo: ProcessMemo | None = None, resolved: Mapping[str, Any] | None = None
) -> Pipeline:
    """The run's pipeline, built once (its unchanged stages from `memo`, in a sweep), or ConfigError listing
    every problem at once: the config's (check.py), then those its stages find in their own values when
    built. `resolved`: the config resolved to a container."""
    problems = config_problems(cfg, resolved)
    pipeline = None
    if stages_checkable(problems):
        try:
            stages = resolved.get("stage") if resolved is not None else None
            pipeline = pipeline_from_config(
                list(cfg.variant.stages), cfg.stage, depth=buildable_depth(cfg), memo=memo, resolved=stages
            )
        except PipelineConfigError as err:
            problems += err.problems
    if problems:
        raise ConfigError(problems)
    assert pipeline is not None
    return pipeline


def build_pipeline(cfg: Any) -> Pipeline:
    """A composed config's pipeline, its stages checked and nothing else (a run uses `checked_pipeline`)."""
    return pipeline_from_config(list(cfg.variant.stages), cfg.stage, depth=cfg.depth)


def settings_pipeline(settings: RunSettings) -> Pipeline:
    """The pipeline of a run's settings (its stage order and resolved `stage` nodes), built afresh: what a
    study's report re-runs and times in-process (experiments/study/live.py)."""
    return pipeline_from_config(list(settings.stage_order), settings.config["stage"], depth=settings.depth)


def extra_metrics(nodes: Mapping[str, Mapping[str, Any]], suite: Suite, corpus: Corpus) -> dict[str, Any]:
    """The run's extra metrics.json sections (`extra_metrics` in the config, resolved: name -> a `_target_`
    node of a function(suite, corpus) -> dict), computed over `corpus` (the suite's memories as ingested):
    plug-ins, so neither the runner nor the merge knows any of them."""
    from hydra.utils import instantiate

    return {str(name): instantiate(node)(suite, corpus) for name, node in nodes.items()}


def configured_stages(cfg: Any) -> tuple[RunSettings, dict[str, Stage]]:
    """A composed config's settings and every stage its `stage` group configures for the variant, built
    (disabled ones too: memeval-serve's overrides may turn one on), for a service of the variant."""
    settings = RunSettings.from_config(cfg)
    return settings, build_stages(list(settings.stage_order), cfg.stage)


def build_stages(
    order: Sequence[str],
    stages: Mapping[str, Any],
    memo: ProcessMemo | None = None,
    resolved: Mapping[str, Any] | None = None,
) -> dict[str, Stage]:
    """Each stage of `order` by its slot name, built and checked (`pipeline_from_config`; memeval-serve
    builds its stages here too): one PipelineConfigError lists every problem of every stage."""
    missing = [name for name in order if name not in stages]
    if missing:
        raise PipelineConfigError(f"variant names stages with no config under `stage`: {missing}")
    problems: list[str] = []
    built: dict[str, Stage] = {}
    for name in order:
        source = resolved[name] if resolved is not None and name in resolved else stages[name]
        key = _stage_key(source) if memo is not None else None
        stage = memo.get(f"stage.{name}", key) if key is not None else None
        if stage is None:
            stage = build_stage(name, stages[name], problems)
            # A live channel's adapter is closed at the end of its run: never handed to the next job.
            if stage is not None and key is not None and not getattr(stage, "live", False):
                memo.put(f"stage.{name}", key, stage)
        if stage is not None:
            built[name] = stage
    if problems:
        raise PipelineConfigError(problems)
    return built


def _stage_key(node: Any) -> str | None:
    """What a stage built from `node` depends on: its resolved config, the working directory (relative
    paths) and the size and mtime of every file it names; None when the config does not resolve (the
    build then reports why)."""
    from omegaconf import OmegaConf

    try:
        content = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
        text = json.dumps(content, sort_keys=True, default=repr)
    except Exception:
        return None
    files = []
    for value in _strings(content):
        try:
            found = os.stat(value) if len(value) < 4096 else None
        except (OSError, ValueError):  # not a path, or no such file
            continue
        if found is not None and stat.S_ISREG(found.st_mode):
            files.append(f"{value}:{found.st_size}:{found.st_mtime_ns}")
    return "|".join([text, os.getcwd(), *sorted(files)])


def _strings(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, Mapping):
        return [s for v in node.values() for s in _strings(v)]
    if isinstance(node, list | tuple):
        return [s for v in node for s in _strings(v)]
    return []


def build_stage(name: str, node: Any, problems: list[str]) -> Stage | None:
    """Instantiate one stage config, or append what is wrong with it to `problems` and return None.

    Hydra builds the nested components (encoder, scorer...) and hands back the stage class with its
    values (`_partial_`); the values are type-checked before the class sees them, so its range checks
    (`__post_init__`) only ever see values of the right type.
    """
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    def failed(err: BaseException, where: str = f"stage.{name}") -> None:
        if isinstance(err, FieldError):
            problems.extend(f"{where}.{field}: {problem}" for field, problem in err.problems)
        else:
            problems.append(f"{where}: {err}")

    try:
        partial = instantiate(node, _convert_="all", _partial_=True)
    except InstantiationException as err:  # a nested component failed, or the target cannot be found
        # Hydra names the failing node (`full_key: stage.tiered.bm25`): a nested stage's field keeps its path.
        nested = re.search(r"full_key: (\S+)", str(err))
        where = nested[1] if nested and nested[1].startswith(f"stage.{name}.") else f"stage.{name}"
        return failed(err.__cause__ or err, where)
    target = getattr(partial, "func", None)
    if isinstance(target, type) and dataclasses.is_dataclass(target):
        found = field_type_problems(target, partial.keywords)
        if found:  # the class cannot be built: add the range problems of the values of the right type
            bad = {field.split("[")[0].split(".")[0] for field, _ in found}
            typed = {k: v for k, v in partial.keywords.items() if k not in bad}
            return failed(FieldError(found + range_problems(typed, stage_ranges(target))))
    try:
        stage = partial()
    except (TypeError, ValueError) as err:  # e.g. a missing required field, or a range check
        return failed(err)
    if not isinstance(stage, Stage):
        problems.append(f"stage.{name} does not build a Stage: {type(stage).__name__}")
        return None
    return stage
