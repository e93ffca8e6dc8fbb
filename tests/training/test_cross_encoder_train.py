"""memeval-train-reranker: split by conversation, evidence positives and first-stage hard negatives,
and a step or two of training from the bundled MiniLM that writes a loadable model, logged to MLflow."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from experiments.configure.app_settings import RerankerSettings
from experiments.configure.compose import compose_config
from experiments.suites.jsonl import save_suite
from experiments.training.reranker import (
    Budget,
    TimeBudgetWarning,
    keep_first_layers,
    split_by_conversation,
    train,
    training_pairs,
)
from retrieval.compute import cpu_isa
from retrieval.reranker import CrossEncoderScorer
from tests.retrieval.test_cross_encoder import build_tiny_cross_encoder
from tests.support import tiny_suite


def compose_training(*overrides: str) -> RerankerSettings:
    return RerankerSettings.from_config(compose_config(overrides, config_name="train_reranker"))


def test_the_default_training_suite_is_beam_500k_with_bm25_negatives():
    cfg = compose_training()
    assert cfg.train_suite["path"].endswith("beam/500K")
    assert cfg.first_stage.order == ("bm25",)
    assert cfg.output_dir == "models/cross-encoder-beam500k"


def test_validation_holds_out_whole_conversations():
    suite = tiny_suite()
    split = split_by_conversation(suite, val_fraction=0.5, seed=0)
    assert split.train and split.validation
    assert not {q.scope_key for q in split.train} & {q.scope_key for q in split.validation}
    assert not any(suite.is_abstention(q.id) for q in split.train + split.validation)


def test_pairs_are_evidence_positives_and_first_stage_non_evidence_negatives():
    suite = tiny_suite()
    cfg = compose_training("negatives_per_query=2", "max_positives_per_query=4", "max_pairs=100")
    index_of = {m.id: i for i, m in enumerate(suite.memories)}
    query = suite.queries[0]  # c1:q0, evidence c1:0
    lists = {query.id: [index_of[m] for m in ("c1:0", "c1:3", "c1:4", "c1:1")]}
    pairs = training_pairs(suite, [query], lists, cfg, np.random.default_rng(0))
    positives = [p.text for p in pairs if p.label == 1.0]
    negatives = [p.text for p in pairs if p.label == 0.0]
    assert positives == [suite.memories[index_of["c1:0"]].text]
    assert len(negatives) == 2 and suite.memories[index_of["c1:0"]].text not in negatives
    assert set(negatives) <= {suite.memories[index_of[m]].text for m in ("c1:3", "c1:4", "c1:1")}


def test_pairs_stop_at_the_budget_by_whole_queries():
    suite = tiny_suite()
    cfg = compose_training("negatives_per_query=4", "max_pairs=3")
    index_of = {m.id: i for i, m in enumerate(suite.memories)}
    lists = {
        q.id: [index_of[m.id] for m in suite.memories if m.scope_key == q.scope_key] for q in suite.queries
    }
    pairs = training_pairs(suite, suite.queries[:3], lists, cfg, np.random.default_rng(0))
    assert len(pairs) <= 3


def short_training(tmp_path, *overrides: str):
    save_suite(tiny_suite(), tmp_path / "suite")
    return compose_training(
        "train_suite._target_=experiments.suites.jsonl.load_suite",
        f"train_suite.path={tmp_path / 'suite'}",
        "train_suite.name=tiny",
        f"output_dir={tmp_path / 'model'}",
        "val_fraction=0.5",
        "max_length=32",
        "batch_size=2",
        "epochs=1",
        "eval_every=1",
        "patience=5",
        "max_pairs=4",
        "negatives_per_query=1",
        "cache_dir=null",
        "progress=false",
        *overrides,
    )


def test_a_short_training_run_writes_a_loadable_model_and_its_validation_curve(tmp_path):
    base = build_tiny_cross_encoder(tmp_path / "tiny")
    cfg = short_training(tmp_path, f"base_model={base}", "tracking=none")
    summary = train(cfg, tmp_path / "run")
    assert 1 <= summary["steps"] <= 2 and summary["pairs"] <= 4
    assert len(summary["history"]) == summary["steps"] + 1  # step 0 (untrained head) + each step
    saved = json.loads((tmp_path / "model" / "training.json").read_text())
    assert saved["config"]["seed"] == 0 and saved["best_step"] == summary["best_step"]
    assert (tmp_path / "run" / "training.json").is_file()
    model = str(tmp_path / "model")
    scores = CrossEncoderScorer(model=model, max_length=32, cache_dir=None).score("travel budget", ["a", "b"])
    assert scores.shape == (2,) and np.isfinite(scores).all()


def test_training_is_reproducible_with_its_seed(tmp_path):
    base = build_tiny_cross_encoder(tmp_path / "tiny")
    runs = [
        train(short_training(tmp_path / str(i), f"base_model={base}", "tracking=none"), tmp_path / f"run{i}")
        for i in range(2)
    ]
    assert [h["val"] for h in runs[0]["history"]] == [h["val"] for h in runs[1]["history"]]
    assert runs[0]["final_train_loss"] == runs[1]["final_train_loss"]


@pytest.mark.slow
def test_training_from_the_bundled_minilm_logs_config_and_validation_to_mlflow(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = short_training(tmp_path, f"tracking.tracker.uri={uri}", "tracking.tracker.experiment=train-test")
    summary = train(cfg, tmp_path / "run")
    assert summary["steps"] >= 1
    scorer = CrossEncoderScorer(model=str(tmp_path / "model"), max_length=32, cache_dir=None)
    assert np.isfinite(scorer.score("travel budget", ["a", "b"])).all()

    import mlflow

    # A client, not mlflow.set_tracking_uri: that would set MLFLOW_TRACKING_URI for every later test.
    client = mlflow.MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("train-test").experiment_id])
    assert len(runs) == 1
    run = runs[0]
    assert run.data.params["max_pairs"] == "4" and run.data.params["first_stage.order"] == "['bm25']"
    assert "val_nDCG_at_8_best" in run.data.metrics and run.data.tags["kind"] == "train_reranker"


def test_a_suite_of_one_conversation_cannot_be_split():
    suite = tiny_suite()
    one = type(suite)(
        name="one",
        memories=tuple(m for m in suite.memories if m.scope["conversation"] == "c1"),
        queries=tuple(q for q in suite.queries if q.scope["conversation"] == "c1"),
        qrels={k: v for k, v in suite.qrels.items() if k.startswith("c1")},
    )
    with pytest.raises(ValueError, match="split needs 2"):
        split_by_conversation(one, val_fraction=0.2, seed=0)


@pytest.mark.slow  # ~30 s on the loaded box (model load + first stage), like the other training runs
def test_the_time_budget_is_checked_every_step_and_the_best_model_is_saved(tmp_path):
    base = build_tiny_cross_encoder(tmp_path / "tiny")
    # eval_every is far away: before, the budget was only looked at on validation steps and ran over.
    cfg = short_training(
        tmp_path,
        f"base_model={base}",
        "tracking=none",
        "eval_every=1000",
        "max_pairs=40",
        "epochs=50",
        "max_train_minutes=0.0001",
    )
    # The cap is only a safety net: cutting there says the model now depends on the machine's speed.
    with pytest.warns(TimeBudgetWarning, match="safety cap cut training at step 1 of"):
        summary = train(cfg, tmp_path / "run")
    assert summary["stop_reason"] == "time budget" and summary["steps"] == 1
    assert [h["step"] for h in summary["history"]] == [0, 1]  # a last validation before stopping
    assert (tmp_path / "model" / "model.safetensors").is_file()


@pytest.mark.slow  # two short trainings, ~30 s each on the loaded box
def test_training_ends_on_steps_and_patience_so_two_runs_give_the_same_model(tmp_path):
    """What `make reranker` relies on: with the cap out of reach, the stop and the weights depend only
    on the config (steps, patience, seed), not on how fast the machine is."""
    import warnings

    base = build_tiny_cross_encoder(tmp_path / "tiny")
    summaries = []
    for run in ("a", "b"):
        cfg = short_training(
            tmp_path / run,
            f"base_model={base}",
            "tracking=none",
            "max_pairs=40",
            "epochs=3",
            "eval_every=2",
            "patience=2",
            "max_train_minutes=30",
        )
        with warnings.catch_warnings():
            warnings.simplefilter("error", TimeBudgetWarning)  # the cap must not be what stopped it
            summaries.append(train(cfg, tmp_path / run / "run"))
    a, b = summaries
    assert a["stop_reason"] in ("patience", "completed") and a["stop_reason"] == b["stop_reason"]
    assert a["steps"] == b["steps"] and a["best_step"] == b["best_step"]
    assert [h["val"] for h in a["history"]] == [h["val"] for h in b["history"]]
    assert (tmp_path / "a" / "model" / "model.safetensors").read_bytes() == (
        tmp_path / "b" / "model" / "model.safetensors"
    ).read_bytes()


def test_the_budget_keeps_room_for_a_last_validation():
    budget = Budget(time.perf_counter(), 1.0)
    assert not budget.exhausted()
    budget.validation_s = 61.0  # a validation as slow as that would end past the deadline
    assert budget.exhausted()
    assert not Budget(time.perf_counter() - 1e6, None).exhausted()


def test_a_compact_reranker_keeps_the_first_layers(tmp_path):
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(str(build_tiny_cross_encoder(tmp_path / "tiny")), num_labels=1, max_length=32)
    first = model.model.bert.encoder.layer[0]
    keep_first_layers(model.model, 1)
    assert len(model.model.bert.encoder.layer) == 1 and model.model.bert.encoder.layer[0] is first
    assert model.model.config.num_hidden_layers == 1
    assert np.isfinite(model.predict([("a", "b")])).all()
    with pytest.raises(ValueError, match="between 1 and 1"):
        keep_first_layers(model.model, 2)


@pytest.mark.slow
def test_make_reranker_path_on_a_tiny_budget_trains_a_compact_model_and_exports_it(tmp_path):
    """The `make reranker` path in small: few layers, a budget of a few steps, int8 export, then the stage."""
    base = build_tiny_cross_encoder(tmp_path / "tiny")
    # On an avx2-only CPU static int8 is refused for a tiny random model (tests/retrieval/test_backends.py):
    # the path is then exported for OpenVINO in fp32, as `make reranker` exports it.
    backend = "openvino" if cpu_isa() == "avx2" else "onnx-int8"
    cfg = short_training(
        tmp_path,
        f"base_model={base}",
        "tracking=none",
        "num_layers=1",
        "max_pairs=40",
        "epochs=50",
        "eval_every=2",
        "max_train_minutes=0.05",
        f"export_backend={backend}",
        f"export_dir={tmp_path / 'exports'}",
    )
    summary = train(cfg, tmp_path / "run")
    assert summary["stop_reason"] in ("time budget", "patience") and summary["num_layers"] == 1
    assert summary["train_s"] < 0.05 * 60 + 30  # stopped near the budget (the export comes after)
    assert list((tmp_path / "exports").glob("model-*-cross-encoder/*"))
    scorer = CrossEncoderScorer(
        model=str(tmp_path / "model"),
        max_length=32,
        cache_dir=None,
        backend=backend,
        export_dir=str(tmp_path / "exports"),
    )
    reference = CrossEncoderScorer(model=str(tmp_path / "model"), max_length=32, cache_dir=None)
    texts = ["travel budget for june", "the cat", "a dentist appointment"]
    assert np.abs(scorer.score("travel budget", texts) - reference.score("travel budget", texts)).max() < 0.1
