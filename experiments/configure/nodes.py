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
- one base per live adapter, by the class's `name` (`http`, `mcp`, `mem0`, `chroma`): `_target_` plus every
  field's default, mappings included, so `system.adapter.results.text=body` sets one key by name. The
  adapters are found as the stages are: every class defined in a module of ADAPTER_PACKAGES that names
  itself and offers the MemorySystem protocol (experiments/systems/protocol.py);
- `unset/<field>` (`{<field>: null}`): a file whose mapping replaces the class's default whole, rather than
  being merged into it key by key, names it before its own values (`- dataclass/unset/memory@adapter`).

A file in conf/system/ starts from them (`defaults: [dataclass/channel@_here_, dataclass/http@adapter,
_self_]`) and states only what differs (tests/live/test_live_config.py checks it), as a stage YAML does.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import pkgutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore

from experiments.systems.protocol import MemorySystem
from retrieval.stage import Stage

# The packages whose modules define the stage classes (one stage per file): each `Stage` subclass defined
# there is the option `<its name>` of the `stage` group. The live-system channel is the harness's (an
# instrument, not the system under test), in one module of experiments/systems/.
STAGE_PACKAGES = ("retrieval.retrievers", "retrieval.fusions", "retrieval.stages")
STAGE_MODULES = ("experiments.systems.retriever",)
# The packages whose modules define the live adapters: each class there with a `name` that offers the
# MemorySystem protocol is the base `system/dataclass/<its name>`.
ADAPTER_PACKAGES = ("experiments.systems",)
# What a live system's class must offer (experiments/systems/protocol.py's MemorySystem; check.py asks it of
# a user's class too).
PROTOCOL_METHODS = tuple(
    name for name, value in vars(MemorySystem).items() if not name.startswith("_") and callable(value)
)


def found_classes(packages: Sequence[str], modules: Sequence[str], wanted: Callable[[type], bool]) -> dict:
    """Every class defined in a module of `packages` (or one of `modules`) that is `wanted`, by its `name`,
    sorted by name: the one registry rule of stages and adapters (a name given twice is an error)."""
    found: dict[str, type] = {}
    names = [
        info.name
        for package in map(importlib.import_module, packages)
        for info in pkgutil.iter_modules(package.__path__, f"{package.__name__}.")
    ]
    for module in map(importlib.import_module, [*names, *modules]):
        for cls in vars(module).values():
            if isinstance(cls, type) and cls.__module__ == module.__name__ and wanted(cls):
                if cls.name in found:
                    raise TypeError(f"two classes are named {cls.name!r}: {found[cls.name]}, {cls}")
                found[cls.name] = cls
    return dict(sorted(found.items()))


@functools.cache
def stage_classes() -> dict[str, type[Stage]]:
    """Every stage class of STAGE_PACKAGES (and STAGE_MODULES) by its `name`."""
    return found_classes(STAGE_PACKAGES, STAGE_MODULES, lambda cls: issubclass(cls, Stage))


def is_adapter(cls: type) -> bool:
    """A live adapter: a dataclass that names itself and offers every method of the MemorySystem protocol."""
    return (
        dataclasses.is_dataclass(cls)
        and isinstance(vars(cls).get("name"), str)
        and all(callable(getattr(cls, m, None)) for m in PROTOCOL_METHODS)
    )


@functools.cache
def adapter_classes() -> dict[str, type]:
    """Every live adapter of ADAPTER_PACKAGES by its `name`."""
    return found_classes(ADAPTER_PACKAGES, (), is_adapter)


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
CHANNEL_FIELDS = ("mode", "cassette", "concurrency", "override", "call_timeout_s")


def system_nodes() -> dict[str, dict[str, Any]]:
    """Each base's node by its name under `system/dataclass/`."""
    channel = field_defaults(class_of(RETRIEVER))
    adapters = {name: stage_node(cls) for name, cls in adapter_classes().items()}
    mappings = sorted({k for node in adapters.values() for k, v in node.items() if isinstance(v, dict)})
    return {
        "channel": {name: channel[name] for name in CHANNEL_FIELDS},
        **adapters,
        **{f"unset/{name}": {name: None} for name in mappings},
    }


def class_of(target: str) -> type:
    """The class a `_target_` string names."""
    module, _, name = target.rpartition(".")
    return getattr(importlib.import_module(module), name)


def target_defaults(target: str) -> dict[str, Any]:
    """The defaults a `_target_` fills in: a dataclass's field defaults, a function's (a suite loader's)
    keyword defaults."""
    cls = class_of(target)
    if dataclasses.is_dataclass(cls):
        return field_defaults(cls)
    signature = inspect.signature(cls).parameters.values()
    return {p.name: p.default for p in signature if p.default is not inspect.Parameter.empty}


def register_system_nodes() -> None:
    """Store every base in Hydra's ConfigStore (idempotent: storing again replaces it)."""
    store = ConfigStore.instance()
    for name, node in system_nodes().items():
        group, _, option = f"system/dataclass/{name}".rpartition("/")
        store.store(group=group, name=option, node=node)
