"""A stage's defaults are stated once, in its class: the `stage` config group is built from the classes
(experiments/configure/nodes.py, the classes found by scanning retrieval's stage packages), and a YAML in
conf/stage/ states only what it wires or changes on purpose."""

from __future__ import annotations

import ast
import dataclasses

import pytest
from omegaconf import OmegaConf

from experiments.configure.build import build_pipeline
from experiments.configure.compose import CONF_DIR, compose_config
from experiments.configure.nodes import (
    STAGE_MODULES,
    STAGE_PACKAGES,
    field_defaults,
    stage_classes,
    stage_target,
    yaml_value,
)
from retrieval.stage import Stage
from tests.support import REPO

STAGE_YAMLS = sorted((CONF_DIR / "stage").glob("*.yaml"))


def _raw(path):
    return OmegaConf.to_container(OmegaConf.load(path), resolve=False)


def _base_class(path) -> type:
    """The class a stage YAML starts from: `dataclass/<name>@_here_`, or another stage YAML it extends."""
    bases = [d for d in _raw(path).get("defaults", []) if d != "_self_"]
    first = bases[0] if bases else None
    assert isinstance(first, str), (
        f"{path.name}: starts from no stage node (defaults: [dataclass/<name>@_here_])"
    )
    if first.startswith("dataclass/"):
        return stage_classes()[first.removeprefix("dataclass/").split("@")[0]]
    return _base_class(CONF_DIR / "stage" / f"{first}.yaml")


@pytest.mark.parametrize("path", STAGE_YAMLS, ids=lambda p: p.stem)
def test_no_stage_yaml_restates_a_default_of_its_class(path):
    raw = _raw(path)
    cls = _base_class(path)
    defaults = field_defaults(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    restated = [k for k, v in raw.items() if k in defaults and v == defaults[k]]
    unknown = [k for k in raw if k not in fields and k != "defaults"]
    assert (restated, unknown) == ([], []), (
        f"{path.name}: restates {restated}; not fields of {cls.__name__}: {unknown}"
    )


def _stage_classes_on_disk() -> dict[str, str]:
    """Each class of a module of the stage packages that names itself (`name = "..."` in its body), by name,
    read from the files' source: what the scan must find, with no list kept by hand."""
    paths = [
        *(p for package in STAGE_PACKAGES for p in (REPO.joinpath(*package.split("."))).glob("*.py")),
        *(REPO.joinpath(*m.split(".")).with_suffix(".py") for m in STAGE_MODULES),
    ]
    found = {}
    for path in paths:
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.ClassDef):
                continue
            for stmt in node.body:
                if (
                    isinstance(stmt, ast.Assign)
                    and [getattr(t, "id", None) for t in stmt.targets] == ["name"]
                    and isinstance(stmt.value, ast.Constant)
                ):
                    found[stmt.value.value] = f"{module}.{node.name}"
    return found


def test_the_scan_finds_every_stage_class_by_its_name():
    on_disk = _stage_classes_on_disk()
    assert len(on_disk) >= 30 and {"bm25", "dense", "rrf", "system"} <= set(on_disk)
    assert {name: stage_target(cls) for name, cls in stage_classes().items()} == on_disk


def test_every_registered_stage_is_a_stage_class_and_every_class_field_reaches_the_config():
    for name, cls in stage_classes().items():
        assert issubclass(cls, Stage) and cls.name == name
        cfg = compose_config(["tracking=none", f"+stage@stage.probe={name}"])
        node = OmegaConf.to_container(cfg.stage.probe, resolve=False)
        assert node["_target_"] == stage_target(cls)
        # every default is in the composed node, as the class states it (or as the YAML changes it on purpose)
        assert set(field_defaults(cls)) <= set(node), name


def test_a_stage_without_a_yaml_builds_the_class_default():
    cfg = compose_config(["tracking=none", "variant=bm25"])
    (bm25,) = build_pipeline(cfg).stages
    assert bm25 == stage_classes()["bm25"]()
    assert yaml_value((1, {"a": (2,)})) == [1, {"a": [2]}]


def test_a_class_node_is_still_overridable_field_by_field():
    cfg = compose_config(["tracking=none", "variant=hybrid", "stage.bm25.k1=1.2", "stage.fusion.k=30"])
    pipeline = build_pipeline(cfg)
    assert pipeline.stages[0].k1 == 1.2 and pipeline.fusion.k == 30
