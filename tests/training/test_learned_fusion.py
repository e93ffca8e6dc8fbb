"""Learned fusion: its features from the score columns, the model file and its errors, the training."""

from __future__ import annotations

import json

import numpy as np
import pytest

from experiments.configure.build import pipeline_from_config
from experiments.training.fusion import fit
from retrieval.fusion_model import (
    FusionModelError,
    FusionModelFile,
    feature_names,
    fusion_features,
    load_fusion_model,
    source_columns,
)
from retrieval.pipeline import Pipeline
from retrieval.retrievers.bm25 import BM25Retriever
from retrieval.stages.learned_fusion import LearnedFusion
from retrieval.types import Candidates, Corpus
from tests.support import memory, query


def synthetic(seed: int = 0, n_queries: int = 20, n: int = 30):
    """Candidates whose relevance follows column `a` (noisy) and not column `b`."""
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for _ in range(n_queries):
        a, b = rng.normal(size=n), rng.normal(size=n)
        a[rng.random(n) < 0.2] = np.nan  # a channel that missed some candidates
        relevant = np.nan_to_num(a, nan=-3) + 0.3 * rng.normal(size=n) > 1.0
        xs.append(fusion_features({"a": a, "b": b}, ["a", "b"], n))
        ys.append(relevant.astype(float))
    return np.concatenate(xs), np.concatenate(ys)


def saved_model(tmp_path, sources=("a", "b")):
    x, y = synthetic()
    model = fit(x, y, list(sources), 1.0, {"train_suite": "synthetic"})
    path = tmp_path / "fusion.json"
    model.save(path)
    return path


def test_features_of_a_missing_value_and_an_absent_column_are_zero():
    columns = {"bm25": np.array([3.0, np.nan, 1.0]), "dense": np.array([0.2, 0.9, 0.5])}
    x = fusion_features(columns, ["bm25", "dense", "graph"], 3)
    names = feature_names(["bm25", "dense", "graph"])
    col = {name: x[:, i] for i, name in enumerate(names)}
    assert col["bm25:norm"].tolist() == [1.0, 0.0, 0.0]
    assert col["bm25:present"].tolist() == [1.0, 0.0, 1.0]
    assert col["bm25:rr"].tolist() == [1 / 61, 0.0, 1 / 62]
    assert col["dense:rr"].tolist() == [1 / 63, 1 / 61, 1 / 62]
    assert np.all(x[:, names.index("graph:norm") :] == 0)  # no graph stage: the defined missing value


def test_source_columns_skip_the_ranking_score_and_derived_copies():
    columns = {
        "bm25": np.ones(2),
        "bm25_rank": np.ones(2),
        "dense_norm": np.ones(2),
        "score": np.ones(2),
        "fused": np.ones(2),
        "tier": np.array(["a", "b"], dtype=object),
    }
    assert source_columns(columns) == ["bm25", "fused"]


def test_training_is_deterministic_and_learns_the_informative_column(tmp_path):
    x, y = synthetic()
    first = fit(x, y, ["a", "b"], 1.0, {})
    second = fit(x, y, ["a", "b"], 1.0, {})
    assert first.coef.tolist() == second.coef.tolist() and first.intercept == second.intercept
    weight = dict(zip(feature_names(["a", "b"]), first.coef, strict=True))
    assert abs(weight["a:norm"]) > 5 * abs(weight["b:norm"])
    held_x, held_y = synthetic(seed=1)
    logit = ((held_x - first.mean) / first.scale) @ first.coef + first.intercept
    top = np.argsort(-logit)[: int(held_y.sum())]
    assert held_y[top].mean() > 3 * held_y.mean()  # ranks held-out relevant candidates well above chance


def test_a_saved_model_loads_with_its_feature_list_and_provenance(tmp_path):
    path = saved_model(tmp_path)
    data = json.loads(path.read_text())
    assert data["features"] == feature_names(["a", "b"]) and data["provenance"] == {
        "train_suite": "synthetic"
    }
    model = load_fusion_model(path)
    assert model.sources == ("a", "b")


def tiny_pipeline(stage: LearnedFusion) -> Pipeline:
    return Pipeline((BM25Retriever(), stage), depth=100)


def test_a_missing_model_is_an_error_before_any_work(tmp_path):
    pipeline = tiny_pipeline(LearnedFusion(model=FusionModelFile(path=str(tmp_path / "none.json"))))
    with pytest.raises(FusionModelError, match="none.json.*not found.*experiments.training.fusion"):
        pipeline.check_models()


def test_a_model_trained_on_other_columns_is_an_error_before_any_work(tmp_path):
    path = saved_model(tmp_path)
    stage = LearnedFusion(model=FusionModelFile(path=str(path)), sources=("bm25", "dense", "fused"))
    with pytest.raises(FusionModelError, match=r"trained on columns \['a', 'b'\]"):
        tiny_pipeline(stage).check_models()


@pytest.mark.parametrize(
    ("edit", "field"),
    [({"format": "other"}, "format"), ({"features": ["a:norm"]}, "features"), ({"coef": [1.0]}, "coef")],
)
def test_a_corrupt_model_file_names_its_field(tmp_path, edit, field):
    path = saved_model(tmp_path)
    path.write_text(json.dumps({**json.loads(path.read_text()), **edit}))
    with pytest.raises(FusionModelError, match=f"fusion.json: field '{field}'"):
        load_fusion_model(path)


def test_the_stage_ranks_by_the_model_and_keeps_every_column(tmp_path):
    path = saved_model(tmp_path)
    stage = LearnedFusion(model=FusionModelFile(path=str(path)), sources=("a", "b"))
    stage.check_available()
    corpus = Corpus(tuple(memory(str(i), f"m{i}") for i in range(4)))
    a = np.array([0.1, 2.0, np.nan, 1.0])
    b = np.array([3.0, 0.0, 1.0, 2.0])
    before = Candidates(corpus, np.arange(4), {"a": a, "b": b, "score": b})
    after = stage(query("q", "x"), before)
    assert after.index.tolist()[0] == 1  # highest `a`, though last by the incoming score
    assert set(after.columns) == {"a", "b", "score", "learned_fusion"}
    assert np.all(np.diff(after.score) <= 0)


@pytest.mark.slow
def test_train_on_two_beam_conversations_then_run_the_learned_fusion_variant(tmp_path, beam_100k):
    """End to end on real BEAM: the trainer's model file is the one the variant's stage loads and ranks by."""
    from experiments.configure.app_settings import FusionSettings
    from experiments.configure.compose import compose_config
    from experiments.suites.beam import load_beam
    from experiments.training.fusion import train
    from tests.support import CACHE_DIR

    model_path = tmp_path / "fusion.json"
    folders = [str(beam_100k / "1"), str(beam_100k / "2")]
    cfg = compose_config(
        [
            f"train_suite.path=[{','.join(folders)}]",
            f"output={model_path}",
            f"cache_dir={CACHE_DIR}",
            "progress=false",
            "val_fraction=0.5",
        ],
        config_name="train_fusion",
    )
    provenance = train(FusionSettings.from_config(cfg), tmp_path / "run")
    assert provenance["train_suite_config"]["path"] == cfg.train_suite.path and provenance["candidates"] > 0
    model = load_fusion_model(model_path)
    assert model.sources == ("bm25", "dense", "fused") and model.provenance["train_queries"] > 0

    run_cfg = compose_config(["variant=learned_fusion", f"stage.learned_fusion.model.path={model_path}"])
    # Depth 200 keeps every candidate: features are scaled over a query's whole candidate list.
    pipeline = pipeline_from_config(list(run_cfg.variant.stages), run_cfg.stage, depth=200)
    pipeline.check_models()
    suite = load_beam(beam_100k / "3")
    out = pipeline.run(suite.memories, suite.queries, progress=False)
    for ranked in out.ranked:
        assert len(ranked.memory_ids) > 10
        expected = model.score(ranked.columns, len(ranked.memory_ids))
        np.testing.assert_allclose(ranked.scores, expected)  # ranked by the trained model's logit
        assert np.all(np.diff(ranked.scores) <= 0)


def test_features_do_not_depend_on_the_candidates_order():
    columns = {"fused": np.array([0.5, 0.2, 0.5, 0.1]), "bm25": np.array([1.0, np.nan, 2.0, 2.0])}
    perm = np.array([3, 2, 0, 1])
    x = fusion_features(columns, ["fused", "bm25"], 4)
    shuffled = fusion_features({k: v[perm] for k, v in columns.items()}, ["fused", "bm25"], 4)
    np.testing.assert_array_equal(shuffled, x[perm])
    assert x[0, 1] == x[2, 1] == 1 / 61  # tied scores share the best rank
