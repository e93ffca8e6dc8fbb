"""Every config composes and builds (lightning-hydra-template's rule): a broken YAML fails here."""

from __future__ import annotations

import pytest

from experiments.configure.build import build_pipeline
from experiments.configure.compose import CONF_DIR, compose_config
from retrieval.pipeline import Pipeline

CONF = CONF_DIR
VARIANTS = sorted(p.stem for p in (CONF / "variant").glob("*.yaml"))


def compose_with(*overrides: str):
    return compose_config(overrides)


def test_the_foundation_variants_exist():
    assert {"bm25", "dense", "hybrid", "baseline"} <= set(VARIANTS)


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_builds_a_pipeline(variant):
    cfg = compose_with(f"variant={variant}")
    pipeline = build_pipeline(cfg)
    assert isinstance(pipeline, Pipeline)
    assert cfg.variant.name == variant
    assert set(cfg.variant.stages) <= set(cfg.stage)


def test_baseline_is_hybrid():
    base, hybrid = (
        build_pipeline(compose_with("variant=baseline")),
        build_pipeline(compose_with("variant=hybrid")),
    )
    assert [s.fingerprint() for s in base.stages] == [s.fingerprint() for s in hybrid.stages]


def test_any_stage_field_is_overridable_by_stage_name():
    pipeline = build_pipeline(compose_with("variant=hybrid", "stage.bm25.k1=0.9", "stage.fusion.k=10"))
    bm25 = next(s for s in pipeline.stages if s.name == "bm25")
    fusion = pipeline.fusion
    assert bm25.k1 == 0.9 and fusion.k == 10


def test_switching_a_stage_off_from_the_command_line_drops_it():
    pipeline = build_pipeline(
        compose_with("variant=hybrid", "stage.dense.enabled=false", "stage.fusion.enabled=false")
    )
    assert [s.name for s in pipeline.stages] == ["bm25"]


@pytest.mark.parametrize("suite", sorted(p.stem for p in (CONF / "suite").glob("*.yaml")))
def test_every_suite_config_composes(suite):
    cfg = compose_with(f"suite={suite}")
    assert "_target_" in cfg.suite


def test_caching_off_means_no_cache_folder_anywhere():
    cfg = compose_with("variant=cross_encoder", "cache_dir=null")
    assert cfg.encoder.cache_dir is None and cfg.stage.cross_encoder.scorer.cache_dir is None
    assert compose_with().encoder.cache_dir == ".memeval_cache/embeddings"


def test_config_yaml_reads_back_as_omegaconf_writes_it_for_every_variant_and_awkward_strings():
    import yaml
    from omegaconf import OmegaConf

    from experiments.configure.compose import yaml_text

    awkward = ["1", "1.5", "1e3", "true", "on", "no", "null", "~", "", " lead", "a: b", "#x", "- x", "ünï ☃"]
    awkward += ["line\nbreak", "x" * 300 + " y" * 200, "'quoted'", '"dq"', "%tag", "@at", "`tick`"]
    configs = [OmegaConf.to_container(compose_with(f"variant={v}"), resolve=True) for v in VARIANTS]
    nested = {s or "empty": s for s in awkward}
    configs.append({"strings": awkward, "nested": nested, "n": [1, 1.0, None, True]})
    for container in configs:
        ours = yaml_text(container)
        theirs = OmegaConf.to_yaml(OmegaConf.create(container))
        assert yaml.safe_load(ours) == yaml.safe_load(theirs) == container
        assert OmegaConf.to_container(OmegaConf.create(ours)) == container


def _same_tree(a, b, path: str = "") -> list[str]:
    """Where two configs differ in any node's type, value, flags or metadata (parents within each tree)."""
    from omegaconf import DictConfig, ListConfig

    if type(a) is not type(b):
        return [f"{path}: type"]
    problems = [f"{path}: metadata"] if a._metadata != b._metadata else []
    problems += [
        f"{path}: {f}" for f in ("struct", "readonly", "allow_objects") if a._get_flag(f) != b._get_flag(f)
    ]
    if isinstance(a, DictConfig | ListConfig):
        mine, theirs = a.__dict__["_content"], b.__dict__["_content"]
        if isinstance(mine, dict) and isinstance(theirs, dict):
            problems += [f"{path}: keys"] if list(mine) != list(theirs) else []
            for key in mine:
                problems += _same_tree(mine[key], theirs[key], f"{path}.{key}")
                problems += [f"{path}.{key}: parent"] if mine[key]._get_parent() is not a else []
        elif isinstance(mine, list) and isinstance(theirs, list):
            for i, (x, y) in enumerate(zip(mine, theirs, strict=True)):
                problems += _same_tree(x, y, f"{path}[{i}]")
        elif mine != theirs:
            problems.append(f"{path}: content")
    elif a._val != b._val or type(a._val) is not type(b._val):
        problems.append(f"{path}: value")
    return problems


@pytest.mark.parametrize("overrides", [["variant=exp05"], ["suite=beam", "variant=spark_phase3"]])
def test_config_copy_is_deepcopy_node_for_node(overrides):
    import copy

    from omegaconf import OmegaConf

    from experiments.configure.compose import config_copy

    cfg = compose_config(overrides, hydra_node=True)
    OmegaConf.set_readonly(cfg.hydra, True)  # flags below the root travel too
    ours, theirs = config_copy(cfg), copy.deepcopy(cfg)
    assert _same_tree(ours, theirs) == []
    assert ours is not cfg and ours.stage is not cfg.stage
    ours.variant.name = "changed"  # a copy: the original is untouched
    assert cfg.variant.name != "changed"


def test_config_copy_of_what_pickle_cannot_take_is_a_deepcopy():
    from omegaconf import OmegaConf

    from experiments.configure.compose import config_copy

    cfg = OmegaConf.create({"a": 1}, flags={"allow_objects": True})
    cfg.fn = lambda: 3  # noqa: E731
    copied = config_copy(cfg)
    assert copied.a == 1 and copied.fn() == 3 and copied is not cfg
