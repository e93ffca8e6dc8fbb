"""The config nodes built from the classes: a stage's and a live system's defaults live in its dataclass only.

## The `stage` group

First step of composing a run config: before Hydra composes anything, each stage class is registered in
Hydra's ConfigStore as `_target_` plus its fields' defaults, twice:

- `stage/<name>` (`/stage@stage.bm25: bm25` in a variant) for a stage with no YAML of its own;
- `stage/dataclass/<name>` for every stage, which a YAML in conf/stage/ starts from
  (`defaults: [dataclass/dense@_here_, _self_]`) when it wires components (`encoder: ${encoder}`) or
  differs on purpose, stating only that.

The stage classes are found, not listed: every `Stage` subclass defined in a module of STAGE_PACKAGES, by
its `name`. The registration runs in experiments.configure.setup.setup(), which every entry point calls before
it composes. The values are plain YAML values (tuples as lists, mappings as dicts, a component's default as
its own `_target_` node), so `--cfg job` shows every field and `stage.bm25.k1=1.2` overrides it as before.

## The `system` group's bases

Registered under `system/dataclass/` in the same step:

- `channel`: what a system file chooses of the channel that asks it (`SystemRetriever`'s `mode`,
  `cassette`, `concurrency`, `override`; conf/stage/system.yaml wires them into `stage.system`);
- `http`, `mcp`, `mem0`, `chroma`: `_target_` plus the adapter class's field defaults, but for those whose
  default is a mapping (`results`, `memory`, `headers`, `env`): a file's mapping would be merged into it
  key by key, not put in its place, so those are left to the class (a file that states one states it whole).

A file in conf/system/ starts from them (`defaults: [dataclass/channel@_here_, dataclass/http@adapter,
_self_]`) and states only what differs (tests/live/test_live_config.py checks it), as a stage YAML does.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore

from retrieval.stage import Stage

# The packages whose modules define the stage classes (one stage per file): each `Stage` subclass defined
# there is the option `<its name>` of the `stage` group. The live-system channel is the harness's (an
# instrument, not the system under test), in one module of experiments/systems/.
STAGE_PACKAGES = ("retrieval.retrievers", "retrieval.fusions", "retrieval.stages")
STAGE_MODULES = ("experiments.systems.retriever",)


@functools.cache
def stage_classes() -> dict[str, type[Stage]]:
    """Every stage class of STAGE_PACKAGES by its `name`, sorted by name (a module of the packages imported
    once; a name given twice is an error)."""
    found: dict[str, type[Stage]] = {}
    names = [
        info.name
        for package in map(importlib.import_module, STAGE_PACKAGES)
        for info in pkgutil.iter_modules(package.__path__, f"{package.__name__}.")
    ]
    for module in map(importlib.import_module, [*names, *STAGE_MODULES]):
        for cls in vars(module).values():
            if isinstance(cls, type) and issubclass(cls, Stage) and cls.__module__ == module.__name__:
                if cls.name in found:
                    raise TypeError(f"two stage classes are named {cls.name!r}: {found[cls.name]}, {cls}")
                found[cls.name] = cls
    return dict(sorted(found.items()))


def stage_target(cls: type) -> str:
    """The `_target_` that names a class."""
    return f"{cls.__module__}.{cls.__qualname__}"


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


def stage_node(cls: type) -> dict[str, Any]:
    """`_target_` and the defaults of a stage class: what a stage YAML used to restate."""
    return {"_target_": stage_target(cls), **field_defaults(cls)}


def yaml_value(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        return {
            "_target_": stage_target(cls),
            **{f.name: yaml_value(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init},
        }
    if isinstance(value, Mapping):
        return {k: yaml_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [yaml_value(v) for v in value]
    return value


def register_stage_nodes() -> None:
    """Store every stage's node in Hydra's ConfigStore (idempotent: storing again replaces it)."""
    conf = importlib.import_module("experiments.conf")  # conf/ (experiments.configure.compose.CONF_DIR)
    store = ConfigStore.instance()
    with_yaml = {p.stem for p in (Path(str(conf.__file__)).parent / "stage").glob("*.yaml")}
    for name, cls in stage_classes().items():
        node = stage_node(cls)
        store.store(group="stage/dataclass", name=name, node=node)
        if name not in with_yaml:
            store.store(group="stage", name=name, node=node)


RETRIEVER = "experiments.systems.retriever.SystemRetriever"
CHANNEL_FIELDS = ("mode", "cassette", "concurrency", "override")
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
