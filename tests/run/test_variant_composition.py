"""A variant names each of its stages once: the order and the name are derived
(experiments/configure/build.py stage_order and finish_variant); what a user
states still wins."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from experiments.configure.build import build_pipeline, finish_variant
from experiments.configure.compose import CONF_DIR, compose_config
from retrieval.pipeline import PipelineConfigError
from tests.support import CACHE_DIR

VARIANT_FILES = sorted((CONF_DIR / "variant").glob("*.yaml"))


@pytest.mark.parametrize("path", VARIANT_FILES, ids=lambda p: p.stem)
def test_a_variant_file_names_each_stage_once_and_states_neither_its_order_nor_its_name(path):
    raw = yaml.safe_load(path.read_text()) or {}
    slots = [
        str(entry).split("@stage.", 1)[1].split(":", 1)[0].split("'", 1)[0]
        for entry in raw.get("defaults", [])
        if "@stage." in str(entry)
    ]
    assert len(slots) == len(set(slots)), f"{path.name} names a stage twice: {slots}"
    assert "stages" not in (raw.get("variant") or {}), "the order is derived from the defaults list"
    assert "name" not in (raw.get("variant") or {}), "a variant is named by its file"
    assert set(raw.get("stage") or {}) <= set(slots) | _inherited_slots(raw), "values only for its stages"


def _inherited_slots(raw: dict) -> set[str]:
    parents = [e for e in raw.get("defaults", []) if isinstance(e, str) and e != "_self_"]
    return {slot for p in parents for slot in compose_config([f"variant={p}"]).stage}


@pytest.mark.parametrize(
    ("variant", "order"),
    [
        ("hybrid", ["bm25", "dense", "fusion"]),
        ("passages", ["bm25", "dense", "passage", "fusion"]),  # a retriever added by the child joins its kind
        (
            "exp05",  # an ingest stage added by the child runs first; rank stages in the order named
            [
                "instruction_tagging",
                "bm25",
                "dense",
                "fusion",
                "current_state",
                "instruction_boost",
                "conciseness_penalty",
            ],
        ),
        (
            "spark_phase3",  # named before its parent: the gate is the first rank stage; dropped: bm25, dense
            [
                "action_domain",
                "enrichment",
                "advisory_tiers",
                "tiered",
                "fusion",
                "retrieval_gate",
                "intent_route",
                "actionability",
                "cross_encoder",
                "mmr",
            ],
        ),
    ],
)
def test_the_derived_order_is_the_order_the_pipeline_runs(variant, order):
    cfg = compose_config([f"variant={variant}"])
    assert list(cfg.variant.stages) == order and cfg.variant.name == variant
    enabled = [s for s in order if cfg.stage[s].get("enabled", True)]
    assert len(build_pipeline(cfg).stages) == len(enabled)  # built in that order: the pipeline accepts it


def test_the_derived_order_and_name_are_plain_values_of_the_composed_config():
    from omegaconf import OmegaConf

    cfg = compose_config(["variant=exp05"])
    assert not OmegaConf.is_interpolation(cfg.variant, "stages")  # a value, as a run's config.yaml holds it
    assert OmegaConf.to_container(cfg.variant) == {
        "stages": [
            "instruction_tagging",
            "bm25",
            "dense",
            "fusion",
            "current_state",
            "instruction_boost",
            "conciseness_penalty",
        ],
        "name": "exp05",
    }
    unfinished = compose_config(["variant=exp05"], hydra_node=True)  # as Hydra composes it, before the run
    assert unfinished.variant.stages is None and unfinished.variant.name is None
    assert unfinished.hydra.runtime.choices.variant == "exp05"


def test_a_stage_added_on_the_command_line_runs_in_its_kinds_place_and_one_can_be_dropped():
    cfg = compose_config(["variant=hybrid", "+stage@stage.tags=keyword_tags", "~stage@stage.dense"])
    assert list(cfg.variant.stages) == ["tags", "bm25", "fusion"]
    assert len(build_pipeline(cfg).ingest) == 1 and len(build_pipeline(cfg).retrievers) == 1


def test_an_explicit_order_on_the_command_line_wins():
    cfg = compose_config(["variant=hybrid", "variant.stages=[bm25]"])
    assert [s.name for s in build_pipeline(cfg).stages] == ["bm25"]


def test_a_users_own_variant_may_state_its_order_and_name_and_otherwise_gets_them_derived(tmp_path):
    (tmp_path / "variant").mkdir()
    (tmp_path / "variant" / "mine.yaml").write_text(
        "# @package _global_\ndefaults:\n  - hybrid\n  - _self_\n\n"
        "variant:\n  name: custom\n  stages: [dense]\n"
    )
    (tmp_path / "variant" / "plain.yaml").write_text("# @package _global_\ndefaults:\n  - bm25\n")
    searchpath = f"hydra.searchpath=[file://{tmp_path}]"  # a user's own variant folder
    mine = compose_config([searchpath, "variant=mine"])
    assert mine.variant.name == "custom" and list(mine.variant.stages) == ["dense"]
    plain = compose_config([searchpath, "variant=plain"])
    assert plain.variant.name == "plain" and list(plain.variant.stages) == ["bm25"]


def test_a_stage_slot_whose_target_is_no_stage_is_named_by_the_build():
    cfg = compose_config(["variant=bm25", "+stage.odd={_target_: collections.OrderedDict}"])
    assert list(cfg.variant.stages) == ["bm25", "odd"]  # no kind: last, for the build to report
    with pytest.raises(PipelineConfigError, match="odd"):
        build_pipeline(cfg)


@pytest.mark.slow
def test_a_sweep_over_variants_names_each_job_by_its_variant(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.run",
            "-m",
            "variant=bm25,tiering",
            "tracking=none",
            "progress=false",
            f"cache_dir={tmp_path / 'cache'}",
            f"encoder.cache_dir={CACHE_DIR / 'embeddings'}",  # shared vectors: tiering embeds nothing again
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    tags = {
        Path(f).parent.name: Path(f).read_text().split("\n", 1)[0].split()[-1]
        for f in map(str, sorted((tmp_path / "sweep").glob("*/run.trec")))
    }
    assert tags == {"0": "bm25", "1": "tiering"}


def test_a_stated_name_or_order_is_kept_and_an_interpolation_is_left_for_the_config_check():
    labelled = compose_config(["variant=exp05", "variant.name=boost", "variant.stages=[bm25,dense,fusion]"])
    assert labelled.variant.name == "boost" and list(labelled.variant.stages) == ["bm25", "dense", "fusion"]
    broken = compose_config(["variant=bm25", "variant.stages=${no_such_key}"])
    assert broken.variant._get_node("stages")._is_interpolation()  # the check names it (test_config_check)
    assert finish_variant(compose_config(["variant=bm25"]), "other").variant.name == "bm25"  # set once
