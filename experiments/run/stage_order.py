"""A variant's stage order, derived from its stages: a variant names each stage once, in its defaults.

Step of composing a run config. `variant.stages` (conf/config.yaml) is `${stage_order:${stage}}`: every
stage under `stage`, in the only order a pipeline accepts them (ingest -> retriever -> fusion -> rank,
retrieval.pipeline.STAGE_KINDS), and within a kind in the order the defaults list composed them. A child
variant adds a stage by naming it in its defaults (after the parent: it runs after the parent's stages
of its kind; before the parent: before them), replaces one with `override /stage@stage.<slot>: <name>`
(same place) and drops one with `override /stage@stage.<slot>: null`. Setting `variant.stages` itself
(`variant.stages=[bm25,dense,fusion]`, in a variant file or on the command line) runs that subset in that
order instead.

Registered as an OmegaConf resolver when Hydra starts (hydra_plugins/memeval_config), so every way of
composing resolves it; a saved run config holds the resolved list.
"""

from __future__ import annotations

from typing import Any

RESOLVER = "stage_order"


def stage_order(stages: Any) -> list[str]:
    """The slots of a `stage` mapping sorted by their class's kind, stably. A slot whose `_target_` names
    no stage class keeps its place after the others: building it reports what is wrong."""
    from retrieval.pipeline import STAGE_KINDS

    keyed = []
    for position, name in enumerate(stages):
        node = stages.get(name)
        target = node.get("_target_") if hasattr(node, "get") else None
        kind = _kind_of(target) if isinstance(target, str) else None
        keyed.append((STAGE_KINDS.index(kind) if kind else len(STAGE_KINDS), position, str(name)))
    return [name for _, _, name in sorted(keyed)]


def _kind_of(target: str) -> str | None:
    from experiments.run.stage_nodes import stage_class
    from retrieval.pipeline import stage_kind

    try:
        return stage_kind(stage_class(target))
    except (ImportError, AttributeError, ValueError):
        return None


def pin_stage_order(cfg: Any) -> None:
    """Replace a derived `variant.stages` in `cfg` by its value: resolved once for the run, not at each of
    its reads (an OmegaConf resolver runs at every access)."""
    from omegaconf import DictConfig, OmegaConf, read_write

    variant = cfg.get("variant") if isinstance(cfg, DictConfig) else None
    if (
        isinstance(variant, DictConfig)
        and "stages" in variant
        and OmegaConf.is_interpolation(variant, "stages")
    ):
        try:
            value = list(variant.stages)
        except Exception:  # noqa: BLE001 - left as it is: the config check names the problem
            return
        with read_write(variant):
            variant.stages = value


def register_stage_order() -> None:
    from omegaconf import ListConfig, OmegaConf

    # A ListConfig, not a list: OmegaConf.resolve (`--cfg job --resolve`) puts a container result in
    # place of the interpolation, where a plain list would not fit the value node it replaces.
    OmegaConf.register_new_resolver(RESOLVER, lambda stages: ListConfig(stage_order(stages)), replace=True)
