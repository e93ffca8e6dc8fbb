"""A live system's defaults are stated once, in its classes: the `system` config group's bases are built
from them (experiments/configure/nodes.py), and a file in conf/system/ states only what differs, as a stage
YAML."""

from __future__ import annotations

import dataclasses

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from experiments.configure.check import ConfigError
from experiments.configure.compose import CONF_DIR, compose_config
from experiments.configure.nodes import (
    ADAPTERS,
    CHANNEL_FIELDS,
    RETRIEVER,
    class_of,
    field_defaults,
    system_nodes,
)
from experiments.run.app import checked_pipeline

SYSTEM_YAMLS = sorted((CONF_DIR / "system").glob("*.yaml"))


def _raw(path) -> dict:
    return OmegaConf.to_container(OmegaConf.load(path), resolve=False)  # type: ignore[return-value]


def _bases(path) -> tuple[dict, type | None, dict]:
    """What a system file starts from: the channel's values, the adapter class and the adapter's values
    (the classes' defaults, and those of a file it extends)."""
    channel, adapter, values = {}, None, {}
    for entry in _raw(path).get("defaults", []):
        if entry == "_self_":
            continue
        if entry == "dataclass/channel@_here_":
            channel = system_nodes()["channel"]
        elif entry.startswith("dataclass/"):
            adapter = class_of(ADAPTERS[entry.removeprefix("dataclass/").split("@")[0]])
            values = field_defaults(adapter)
        else:
            parent = CONF_DIR / "system" / f"{entry}.yaml"
            channel, adapter, values = _bases(parent)
            channel = {**channel, **{k: v for k, v in _raw(parent).items() if k in channel}}
            values = {**values, **_raw(parent).get("adapter", {})}
    return channel, adapter, values


@pytest.mark.parametrize("path", SYSTEM_YAMLS, ids=lambda p: p.stem)
def test_no_system_file_restates_a_default_of_its_classes(path):
    raw = _raw(path)
    channel, adapter, values = _bases(path)
    assert channel, f"{path.name}: starts from no channel base (defaults: [dataclass/channel@_here_, ...])"
    restated = [k for k in CHANNEL_FIELDS if k in raw and raw[k] == channel[k]]
    if adapter is not None:
        fields = {f.name for f in dataclasses.fields(adapter) if f.init}
        node = raw.get("adapter", {})
        restated += [f"adapter.{k}" for k, v in node.items() if k in values and v == values[k]]
        restated += [f"adapter.{k} (not a field)" for k in node if k not in fields]
    assert restated == [], f"{path.name}: restates {restated}"


def test_the_bases_are_the_classes_defaults():
    nodes = system_nodes()
    channel = field_defaults(class_of(RETRIEVER))
    assert nodes["channel"] == {k: channel[k] for k in CHANNEL_FIELDS}
    for kind, target in ADAPTERS.items():
        defaults = field_defaults(class_of(target))
        # every default but the template mappings (left to the class: a file's mapping would merge into one)
        assert {k: v for k, v in defaults.items() if not isinstance(v, dict)} == {
            k: v for k, v in nodes[kind].items() if k != "_target_"
        }, kind
        assert nodes[kind]["_target_"] == target


@pytest.mark.parametrize("name", ["memeval_serve", "txtai", "mcp_memeval_serve", "mcp_memory"])
def test_a_composed_system_builds_its_adapter_with_the_class_defaults_it_does_not_state(name):
    cfg = compose_config(["tracking=none", "variant=system", f"system={name}"])
    adapter = instantiate(cfg.system.adapter, _convert_="all")
    raw = _raw(CONF_DIR / "system" / f"{name}.yaml").get("adapter", {})
    for key, default in field_defaults(type(adapter)).items():
        if key not in raw:
            assert getattr(adapter, key) == default, (name, key)
    assert cfg.stage.system.mode == "live" and cfg.stage.system.concurrency == cfg.system.concurrency


def test_bad_fields_of_a_composed_adapter_are_each_named_by_the_config_check():
    # Before: one "stage.system.system: retries: must be >= 0, got -1; timeout_s: ..." ValueError line.
    overrides = ["system.adapter.retries=-1", "system.adapter.timeout_s=0"]
    cfg = compose_config(["tracking=none", "variant=system", "system=memeval_serve", *overrides])
    with pytest.raises(ConfigError) as err:
        checked_pipeline(cfg)
    assert sorted(err.value.problems) == [
        "stage.system.system.retries: must be >= 0, got -1",
        "stage.system.system.timeout_s: must be > 0, got 0",
    ]
