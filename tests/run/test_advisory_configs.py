"""Advisory stage configs state their class defaults; the spark25 suite and phase variants compose."""

from __future__ import annotations

import pytest
from hydra.utils import instantiate

from experiments.configure.build import build_pipeline
from experiments.configure.compose import CONF_DIR, compose_config
from experiments.configure.settings import load_suite_from_config
from retrieval.stages.action_domain import ActionDomainClassifier
from retrieval.stages.actionability import ActionabilityGate
from retrieval.stages.enrichment import ContextualEnrichment
from retrieval.stages.intent_route import IntentRouter
from retrieval.stages.retrieval_gate import RetrievalGate
from retrieval.stages.score_floor import ScoreFloor

CONF = CONF_DIR
DEFAULTS = {
    "action_domain": ActionDomainClassifier,
    "intent_route": IntentRouter,
    "actionability": ActionabilityGate,
    "score_floor": ScoreFloor,
    "enrichment": ContextualEnrichment,
    "retrieval_gate": RetrievalGate,
}


def compose_with(*overrides: str):
    return compose_config(overrides)


@pytest.mark.parametrize("name", sorted(DEFAULTS))
def test_a_stage_yaml_states_exactly_its_class_defaults(name):
    cfg = compose_with(
        "variant=spark_phase3" if name in ("enrichment", "retrieval_gate") else "variant=spark_phase2"
    )
    built = instantiate(cfg.stage[name], _convert_="all")
    assert built.fingerprint() == DEFAULTS[name]().fingerprint()


def test_mmr_config_takes_the_shared_encoder():
    cfg = compose_with("variant=spark_phase2")
    mmr = instantiate(cfg.stage.mmr, _convert_="all")
    assert mmr.lambda_mult == 0.5 and mmr.encoder.model == cfg.encoder.model


def test_the_spark25_suite_config_loads_the_shipped_suite():
    suite = load_suite_from_config(compose_with("suite=spark25"))
    assert suite.name == "spark25" and len(suite.queries) == 25
    assert compose_with("suite=spark25").report_label == "category"


@pytest.mark.parametrize("phase", range(4))
def test_each_spark_phase_extends_the_one_before(phase):
    stages = [s.name for s in build_pipeline(compose_with(f"variant=spark_phase{phase}")).stages]
    if phase:
        before = [s.name for s in build_pipeline(compose_with(f"variant=spark_phase{phase - 1}")).stages]
        assert set(before) <= set(stages) or phase == 3  # phase 3 may swap the retrieval channels for tiers
        assert len(stages) > len(before)
    else:
        assert stages == ["bm25", "dense", "rrf"]
