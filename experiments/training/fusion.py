"""`python -m experiments.training.fusion`: train the learned fusion model (a logistic regression).

    training suite (BEAM 500K) -> split by conversation (train / validation)
                 -> the first stage (hybrid: bm25 + dense + RRF) keeps every candidate's score columns
                 -> features per candidate (retrieval/fusion_model.py), label = judged relevant
                 -> standardise, logistic regression (class-balanced, lbfgs: deterministic)
                 -> validation: nDCG@10 of the learned order against the first stage's, held-out conversations
                 -> models/learned-fusion-beam500k.json: columns, features, coefficients, provenance
Pointwise on purpose: a linear model over a dozen features, cheap and stable; the learned_fusion stage
re-scores the candidates the same first stage returns.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from hydra.utils import instantiate

from experiments.configure.app import Job, hydra_app
from experiments.configure.app_settings import FusionSettings
from experiments.configure.build import pipeline_from_config
from experiments.configure.setup import setup
from experiments.evaluate.metrics import per_query
from experiments.suites.suite import Suite, SuiteError
from experiments.track.mlflow_tracker import git_commit
from experiments.training.reranker import split_by_conversation
from retrieval.encoder import ModelNotFoundError
from retrieval.fusion_model import LinearFusionModel, fusion_features, source_columns
from retrieval.pipeline import PipelineConfigError
from retrieval.reuse import CandidateCache
from retrieval.types import Query, RankedList


def first_stage(settings: FusionSettings, suite: Suite, queries: Sequence[Query]) -> list[RankedList]:
    """Every query's candidates with their score columns (cached like any run's prefix)."""
    stages = settings.first_stage
    pipeline = pipeline_from_config(list(stages.order), stages.stages, depth=settings.depth)
    pipeline.check_models()
    cache = CandidateCache(Path(settings.cache_dir) / "candidates") if settings.cache_dir else None
    output = pipeline.run(
        suite.memories, queries, suite_hash=suite.content_hash, cache=cache, progress=settings.progress
    )
    return output.ranked


def training_table(
    suite: Suite, ranked: Sequence[RankedList], sources: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    """Features and 0/1 labels of every candidate of every query (queries in the given order)."""
    xs, ys = [], []
    for r in ranked:
        relevant = {m for m, grade in suite.qrels.get(r.query_id, {}).items() if grade > 0}
        xs.append(fusion_features(r.columns, sources, len(r.memory_ids)))
        ys.append(np.array([m in relevant for m in r.memory_ids], dtype=np.float64))
    return np.concatenate(xs), np.concatenate(ys)


def fit(
    x: np.ndarray, y: np.ndarray, sources: Sequence[str], c: float, provenance: dict
) -> LinearFusionModel:
    from sklearn.linear_model import LogisticRegression  # seconds to import (scipy): only fitting needs it

    if len(set(y.tolist())) < 2:
        raise ValueError("the training candidates need both relevant and non-relevant memories")
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale == 0] = 1.0  # a constant feature: left unscaled (its coefficient stays ~0)
    clf = LogisticRegression(C=c, class_weight="balanced", solver="lbfgs", max_iter=2000)
    clf.fit((x - mean) / scale, y)
    return LinearFusionModel(
        tuple(sources), mean, scale, clf.coef_[0].copy(), float(clf.intercept_[0]), provenance
    )


def ndcg(suite: Suite, ranked: Sequence[RankedList], order_by, metric: str = "nDCG@10") -> float:
    """Mean `metric` over the answerable queries' lists re-ordered by `order_by(list) -> scores`."""
    run = {}
    for r in ranked:
        order = np.argsort(-order_by(r), kind="stable")
        run[r.query_id] = [r.memory_ids[i] for i in order]
    qrels = {r.query_id: suite.qrels.get(r.query_id, {}) for r in ranked}
    table = per_query(qrels, run, [metric])
    return float(table[metric].mean()) if len(table) else float("nan")


def train(settings: FusionSettings, run_dir: Path) -> dict[str, Any]:
    started, cpu0 = time.perf_counter(), time.process_time()
    suite = instantiate(settings.train_suite, _convert_="all")
    split = split_by_conversation(suite, settings.val_fraction, settings.seed)
    ranked = first_stage(settings, suite, split.train + split.validation)
    by_id = {r.query_id: r for r in ranked}
    train_lists = [by_id[q.id] for q in split.train]
    val_lists = [by_id[q.id] for q in split.validation]
    sources = list(settings.sources) if settings.sources else source_columns(train_lists[0].columns)
    x, y = training_table(suite, train_lists, sources)
    provenance = {
        "train_suite": suite.name,
        "train_suite_config": settings.train_suite_given,  # a path, or a generator's parameters
        "train_suite_hash": suite.content_hash,
        "conversations_train": sorted({q.scope_key for q in split.train}),
        "conversations_validation": sorted({q.scope_key for q in split.validation}),
        "first_stage": list(settings.first_stage.order),
        "depth": settings.depth,
        "train_queries": len(train_lists),
        "validation_queries": len(val_lists),
        "candidates": int(len(y)),
        "relevant_candidates": int(y.sum()),
        "C": settings.C,
        "seed": settings.seed,
        "sklearn": __import__("sklearn").__version__,
        "git_commit": git_commit(),
        "trained_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    model = fit(x, y, sources, settings.C, provenance)
    first = ndcg(suite, val_lists, lambda r: r.scores)
    learned = ndcg(suite, val_lists, lambda r: model.score(r.columns, len(r.memory_ids)))
    provenance.update(
        {
            "val_nDCG@10_first_stage": first,
            "val_nDCG@10_learned": learned,
            "train_s": time.perf_counter() - started,
            "train_cpu_s": time.process_time() - cpu0,
        }
    )
    model.save(settings.output)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "training.json").write_text(json.dumps(model.to_json(), indent=2, default=str))
    print(
        f"learned fusion over {sources}: {len(train_lists)} train / {len(val_lists)} validation queries, "
        f"{len(y)} candidates; validation nDCG@10 {learned:.4f} (first stage {first:.4f}) "
        f"-> {settings.output}"
    )
    return provenance


@hydra_app("train_fusion", FusionSettings.from_config)
def main(settings: FusionSettings, job: Job) -> float:
    try:
        summary = train(settings, job.output_dir)
    except (SuiteError, PipelineConfigError, ModelNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    return float(summary["val_nDCG@10_learned"])


if __name__ == "__main__":
    setup()
    main()
