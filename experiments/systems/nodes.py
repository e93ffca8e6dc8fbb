"""The `system` config group's bases, built from the classes: a live system's defaults live in its dataclass.

Registered in Hydra's ConfigStore before anything is composed (experiments/config_setup.py), under
`system/dataclass/`:

- `channel`: what a system file chooses of the channel that asks it (`SystemRetriever`'s `mode`,
  `cassette`, `concurrency`, `override`; conf/stage/system.yaml wires them into `stage.system`);
- `http`, `mcp`, `mem0`, `chroma`: `_target_` plus the adapter class's field defaults, but for those whose
  default is a mapping (`results`, `memory`, `headers`, `env`): a file's mapping would be merged into it
  key by key, not put in its place, so those are left to the class (a file that states one states it whole).

A file in conf/system/ starts from them (`defaults: [dataclass/channel@_here_, dataclass/http@adapter,
_self_]`) and states only what differs (tests/live/test_live_config.py checks it), as a stage YAML does.
"""

from __future__ import annotations

import importlib
from typing import Any

from experiments.run.stage_nodes import field_defaults, stage_node

RETRIEVER = "experiments.systems.retriever.SystemRetriever"
CHANNEL_FIELDS = ("mode", "cassette", "concurrency", "override", "call_timeout_s")
ADAPTERS = {
    "http": "experiments.systems.http.HttpSystem",
    "mcp": "experiments.systems.mcp.McpSystem",
    "mem0": "experiments.systems.mem0.Mem0System",
    "chroma": "experiments.systems.chroma.ChromaSystem",
}


def system_nodes() -> dict[str, dict[str, Any]]:
    """Each base's node by its name under `system/dataclass/`."""
    channel = field_defaults(class_of(RETRIEVER))
    return {
        "channel": {name: channel[name] for name in CHANNEL_FIELDS},
        **{kind: _scalars(stage_node(class_of(target))) for kind, target in ADAPTERS.items()},
    }


def class_of(target: str) -> type:
    """The class a `_target_` string names."""
    module, _, name = target.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _scalars(node: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in node.items() if not isinstance(value, dict)}


def register_system_nodes() -> None:
    """Store every base in Hydra's ConfigStore (idempotent: storing again replaces it)."""
    from hydra.core.config_store import ConfigStore  # Hydra is the harness's; imported when it composes

    store = ConfigStore.instance()
    for name, node in system_nodes().items():
        store.store(group="system/dataclass", name=name, node=node)
