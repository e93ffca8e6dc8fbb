"""A live system's defaults are stated once, in its classes: the `system` config group's bases are built
from them (experiments/configure/nodes.py), and a file in conf/system/ states only what differs, as a stage
YAML."""

from __future__ import annotations

import dataclasses

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from experiments.configure.build import checked_pipeline
from experiments.configure.check import ConfigError
from experiments.configure.compose import CONF_DIR, compose_config
from experiments.configure.nodes import (
    CHANNEL_FIELDS,
    RETRIEVER,
    adapter_classes,
    class_of,
    field_defaults,
    system_nodes,
)

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
        elif entry.startswith("dataclass/unset/"):  # the file's mapping replaces the class's whole
            values.pop(entry.removeprefix("dataclass/unset/").split("@")[0])
        elif entry.startswith("dataclass/"):
            adapter = adapter_classes()[entry.removeprefix("dataclass/").split("@")[0]]
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
    for kind, cls in adapter_classes().items():
        # every default, the template mappings included: one key of them can be set by name
        target = f"{cls.__module__}.{cls.__qualname__}"
        assert nodes[kind] == {"_target_": target, **field_defaults(cls)}, kind


def test_the_adapters_found_are_the_files_that_define_one():
    # Found by the scan, named by the class: each module of experiments/systems/ whose source defines a
    # class with `name: ClassVar[str]` and a `search` method is an adapter, and nothing else is.
    import ast

    from tests.support import REPO

    on_disk = {}
    for path in sorted((REPO / "experiments" / "systems").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            named = [
                s.value.value
                for s in node.body
                if isinstance(s, ast.AnnAssign) and getattr(s.target, "id", None) == "name" and s.value
            ]
            methods = {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
            if named and "search" in methods:
                on_disk[named[0]] = f"experiments.systems.{path.stem}.{node.name}"
    found = {name: f"{cls.__module__}.{cls.__qualname__}" for name, cls in adapter_classes().items()}
    assert found == on_disk and {"http", "mcp", "mem0", "chroma"} <= set(found)


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


def test_one_key_of_an_adapters_mapping_is_set_by_name():
    # Every field of an adapter, mappings included, is in the composed config with the class's default
    # (issue #41: `system.adapter.results.text=body` was refused, and `++` replaced the whole mapping).
    given = ["tracking=none", "variant=system", "system=memeval_serve"]
    cfg = compose_config([*given, "system.adapter.results.text=body"])
    defaults = field_defaults(adapter_classes()["http"])["results"]
    assert OmegaConf.to_container(cfg.system.adapter.results) == {**defaults, "text": "body"}
    adapter = instantiate(cfg.system.adapter, _convert_="all")
    assert adapter.results == {**defaults, "text": "body"}
    assert OmegaConf.to_container(compose_config(given).system.adapter.headers) == {}


def test_a_file_whose_mapping_replaces_the_classes_states_it_whole():
    # atomicmemory's memory shape (with the role, #41) has no `text` key: merged into the class's default it
    # would gain one.
    cfg = compose_config(["tracking=none", "variant=system", "system=atomicmemory"])
    assert set(cfg.system.adapter.memory) == {"id", "content", "created_at", "metadata", "role"}
    cfg = compose_config(["tracking=none", "variant=system", "system=mcp_memory"])
    assert set(cfg.system.adapter.results) == {"hits", "id", "text"}
