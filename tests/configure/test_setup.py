"""configure.setup: once per process, and a ConfigStore that Hydra's compose copies as itself."""

from __future__ import annotations

import copy

import pytest
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from experiments.configure import setup as configure_setup
from experiments.configure.compose import compose_config

CASES = [["variant=bm25", "stage.bm25.k1=0.9"], ["variant=exp05"], ["variant=spark_phase3"]]


def test_the_store_copies_as_itself_and_composes_the_same_configs_as_a_real_copy(monkeypatch):
    configure_setup.setup()
    store = ConfigStore.instance()
    assert copy.deepcopy(store) is store
    shared = [OmegaConf.to_yaml(compose_config(overrides)) for overrides in CASES]
    monkeypatch.delattr(ConfigStore, "__deepcopy__")  # Hydra's own behaviour: a deep copy per compose
    monkeypatch.setattr(configure_setup, "share_the_config_store", lambda: None)
    assert copy.deepcopy(store) is not store
    copied = [OmegaConf.to_yaml(compose_config(overrides)) for overrides in CASES]
    assert shared == copied
    # composing left the store's nodes as they were: a later compose still sees the defaults
    assert compose_config(["variant=bm25"]).stage.bm25.k1 != 0.9


def test_setup_registers_once_and_again_when_the_store_lost_its_nodes(monkeypatch):
    configure_setup.setup()
    calls = []
    monkeypatch.setattr(configure_setup, "register_stage_nodes", lambda: calls.append("stage"))
    configure_setup.setup()
    assert calls == []  # registered already: nothing rebuilt
    stage = ConfigStore.instance().repo["stage"]
    monkeypatch.delitem(stage, "dataclass")
    configure_setup.setup()
    assert calls == ["stage"]


@pytest.fixture(autouse=True)
def _nodes_back():
    yield
    configure_setup.setup()  # whatever a test took away is registered again for the tests after it
