"""The `stage` config group, built from the stage classes: a stage's defaults live in its dataclass only.

First step of composing a run config: before Hydra composes anything, each stage class is registered in
Hydra's ConfigStore as `_target_` plus its fields' defaults, twice:

- `stage/<name>` (`/stage@stage.bm25: bm25` in a variant) for a stage with no YAML of its own;
- `stage/dataclass/<name>` for every stage, which a YAML in conf/stage/ starts from
  (`defaults: [dataclass/dense@_here_, _self_]`) when it wires components (`encoder: ${encoder}`) or
  differs on purpose, stating only that.

Hydra itself runs the registration (hydra_plugins/memeval_config: Hydra imports its plugin modules before
it composes anything), so every way of composing (the @hydra.main apps, compose_config, tests with
initialize_config_dir) sees the same nodes. The values are plain YAML
values (tuples as lists, mappings as dicts, a component's default as its own `_target_` node), so `--cfg job`
shows every field and `stage.bm25.k1=1.2` overrides it as before.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# The stage name a variant picks (`/stage@stage.<slot>: <name>`) -> its class. A YAML in conf/stage/ of the
# same name, if any, takes the name and starts from `dataclass/<name>`.
STAGE_CLASSES: dict[str, str] = {
    "abstention_gate": "retrieval.stages.abstention_gate.AbstentionGate",
    "action_domain": "retrieval.stages.action_domain.ActionDomainClassifier",
    "actionability": "retrieval.stages.actionability.ActionabilityGate",
    "advisory_tiers": "retrieval.stages.advisory_tiers.AdvisoryTiers",
    "bm25": "retrieval.retrievers.bm25.BM25Retriever",
    "conciseness_penalty": "retrieval.stages.conciseness_penalty.ConcisenessPenalty",
    "cross_encoder": "retrieval.stages.cross_encoder.CrossEncoderRerank",
    "current_state": "retrieval.stages.current_state.CurrentState",
    "decay": "retrieval.stages.decay.TimeDecay",
    "dense": "retrieval.retrievers.dense.DenseRetriever",
    "enrichment": "retrieval.stages.enrichment.ContextualEnrichment",
    "feedback": "retrieval.retrievers.feedback.FeedbackRetriever",
    "graph": "retrieval.retrievers.graph.GraphRetriever",
    "graph_build": "retrieval.stages.graph_build.GraphBuild",
    "graph_expand": "retrieval.stages.graph_expand.GraphExpand",
    "importance_prune": "retrieval.stages.importance_prune.ImportancePrune",
    "instruction_boost": "retrieval.stages.instruction_boost.InstructionBoost",
    "instruction_tagging": "retrieval.stages.instruction_tagging.InstructionTagging",
    "intent_route": "retrieval.stages.intent_route.IntentRouter",
    "keyword_tags": "retrieval.stages.keyword_tags.KeywordTags",
    "learned_fusion": "retrieval.stages.learned_fusion.LearnedFusion",
    "mmr": "retrieval.stages.mmr.MMRDiversity",
    "passage": "retrieval.retrievers.passage.PassageRetriever",
    "retrieval_gate": "retrieval.stages.retrieval_gate.RetrievalGate",
    "rrf": "retrieval.fusions.rrf.RRFFusion",
    "score_floor": "retrieval.stages.score_floor.ScoreFloor",
    "system": "experiments.systems.retriever.SystemRetriever",
    "tag_boost": "retrieval.stages.tag_boost.TagBoost",
    "tier_fusion": "retrieval.fusions.tier_fusion.TierFusion",
    "tiered": "retrieval.retrievers.tiered.TieredRetriever",
    "topic_tags": "retrieval.stages.topic_tags.TopicTags",
    "trec_run": "retrieval.retrievers.trec_run.TrecRunRetriever",
    "weighted": "retrieval.fusions.weighted.WeightedFusion",
}


def stage_class(target: str) -> type:
    module, _, name = target.rpartition(".")
    return getattr(importlib.import_module(module), name)


def field_defaults(cls: type) -> dict[str, Any]:
    """A stage class's init fields that have a default, in field order, as plain YAML values."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.default is not dataclasses.MISSING:
            out[f.name] = yaml_value(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = yaml_value(f.default_factory())
    return out


def stage_node(target: str) -> dict[str, Any]:
    """`_target_` and the defaults of the class it names: what a stage YAML used to restate."""
    return {"_target_": target, **field_defaults(stage_class(target))}


def yaml_value(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        return {
            "_target_": f"{cls.__module__}.{cls.__qualname__}",
            **{f.name: yaml_value(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init},
        }
    if isinstance(value, Mapping):
        return {k: yaml_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [yaml_value(v) for v in value]
    return value


def register_stage_nodes() -> None:
    """Store every stage's node in Hydra's ConfigStore (idempotent: storing again replaces it)."""
    from hydra.core.config_store import ConfigStore

    conf = importlib.import_module("experiments.conf")  # conf/ (experiments.run.compose.CONF_DIR)
    store = ConfigStore.instance()
    with_yaml = {p.stem for p in (Path(str(conf.__file__)).parent / "stage").glob("*.yaml")}
    for name, target in STAGE_CLASSES.items():
        node = stage_node(target)
        store.store(group="stage/dataclass", name=name, node=node)
        if name not in with_yaml:
            store.store(group="stage", name=name, node=node)
