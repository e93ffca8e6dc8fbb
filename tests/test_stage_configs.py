"""Every stage YAML (conf/stage/) states its class's defaults, so `memeval-run` and the Python
API (`BM25Retriever()`) mean the same stage; the few deliberate differences are listed with their reason."""

from __future__ import annotations

import dataclasses
import importlib

import pytest
from omegaconf import OmegaConf

from experiments.run.compose import CONF_DIR

STAGE_YAMLS = sorted((CONF_DIR / "stage").glob("*.yaml"))

# (file, key): why the YAML differs from the class default.
DELIBERATE = {
    ("instruction_boost.yaml", "enabled"): "off unless a variant (exp05) turns it on",
    ("learned_fusion.yaml", "sources"): "the columns the shipped models were trained on, checked on load",
    ("tier_fusion.yaml", "weights"): "the tiering variant's tier weights (the class: every tier 1.0)",
    ("tier_fusion_advisory.yaml", "default_tier"): "a second config of tier fusion, for the advisory tiers",
    ("tier_fusion_advisory.yaml", "weights"): "a second config of tier fusion, for the advisory tiers",
}


def _plain(value):
    """Tuples as lists, recursively (YAML has no tuples)."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _class_default(field: dataclasses.Field):
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


@pytest.mark.parametrize("path", STAGE_YAMLS, ids=lambda p: p.stem)
def test_a_stage_yaml_states_its_class_defaults(path):
    raw = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    if "_target_" not in raw:  # a composition of other stage configs (defaults list only)
        assert "defaults" in raw
        return
    module, _, name = raw["_target_"].rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    problems = []
    for key, value in raw.items():
        if key.startswith("_") or (path.name, key) in DELIBERATE:
            continue
        if key not in fields:
            problems.append(f"{key}: not a field of {name}")
            continue
        default = _class_default(fields[key])
        interpolated = isinstance(value, str) and "${" in value
        wired = interpolated or (isinstance(value, dict) and "_target_" in value)
        if wired or dataclasses.is_dataclass(default):  # a component (encoder, scorer): built, not a default
            continue
        if default is dataclasses.MISSING:
            problems.append(f"{key}: {name} has no default for it")
        elif _plain(value) != _plain(default):
            problems.append(f"{key}: YAML {value!r}, {name} {default!r}")
    assert not problems, f"{path.name}: {problems}"


def test_every_deliberate_difference_is_still_one():
    for file, key in DELIBERATE:
        raw = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "stage" / file), resolve=False)
        assert key in raw, f"{file}: {key} no longer set: drop it from DELIBERATE"
