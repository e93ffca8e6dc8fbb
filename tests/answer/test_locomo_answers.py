"""Acceptance: retrieval reaches the answer, and CI replays it with no model. The committed cassette
(tests/data/answers/, recorded by experiments/benchmarks/locomo_answers.py against the offline SmolLM2
endpoint) is replayed over LoCoMo conversations 1-5: answer F1 from bm25's retrieved turns beats F1 from
random turns, and F1 where all the evidence was in the context beats F1 where none was. Point values
only: five conversations cannot make these differences significant (docs/metrics.md); the intervals are
in metrics.json beside them."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest

from experiments.benchmarks.locomo_answers import CASSETTE, LOCOMO, overrides
from tests.answer.test_answer_run import ROOT
from tests.upstream import locomo_answer as upstream

pytestmark = pytest.mark.slow  # ../shared/locomo


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("locomo_answers")
    sample = sum(1 for line in CASSETTE.read_text().splitlines() if '"op":"chat"' in line) // 2
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.run", *overrides(sample, 5, CASSETTE, "replay"),
         "tracking.enabled=false", "progress=false", f"hydra.run.dir={tmp / 'run'}",
         f"cache_dir={tmp / 'cache'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=900, env={**os.environ, "MLFLOW_TRACKING_URI": ""},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert LOCOMO.is_file()
    return json.loads((tmp / "run" / "metrics.json").read_text()), sample, tmp / "run"


def test_the_replay_asks_no_model_and_answers_every_sampled_question(replayed):
    metrics, sample, _ = replayed
    assert metrics["answer_calls"]["live"] == 0
    assert metrics["answer"]["n_judged"] == sample >= 40


def test_retrieved_context_beats_random_context(replayed):
    judges = replayed[0]["answer"]["judges"]["lexical"]
    assert judges["retrieved"]["mean"] > judges["random"]["mean"]
    difference = replayed[0]["answer"]["differences"]["retrieved-random"]["lexical"]
    assert difference["mean"] > 0 and difference["n"] == replayed[1]
    assert difference["ci95"] is not None or "unbounded" in difference["ci_reason"]


def test_all_the_evidence_in_context_beats_none_of_it(replayed):
    by_retrieval = replayed[0]["answer"]["judges"]["lexical"]["retrieved"]["by_retrieval"]
    assert by_retrieval["all"]["mean"] > by_retrieval["none"]["mean"]
    assert by_retrieval["all"]["n"] > 0 and by_retrieval["none"]["n"] > 0


def test_the_recorded_answers_score_as_upstreams_answer_f1(replayed):
    """Acceptance 1 on the answers the offline SmolLM2 gave: memeval's lexical F1 of each recorded answer is
    upstream's `eval_question_answering` value for it (1e-9)."""
    run = replayed[2]
    samples = {s["sample_id"]: s for s in json.loads(LOCOMO.read_text("utf-8"))}
    answers = [json.loads(line) for line in (run / "answers.jsonl").read_text("utf-8").splitlines()]
    lines = []
    for record in answers:
        sid, j = record["query_id"].rsplit(":q", 1)
        lines.append({**samples[sid]["qa"][int(j)], "prediction": record["answer"]})
    expected = upstream.eval_question_answering_answers(lines)
    with open(run / "per_query.csv", newline="", encoding="utf-8") as f:
        f1 = {row["query_id"]: row["answer.lexical.f1"] for row in csv.DictReader(f)}  # blank: not sampled
    got = [float(f1[record["query_id"]]) for record in answers]
    assert len(got) == replayed[1] and max(abs(g - e) for g, e in zip(got, expected, strict=True)) <= 1e-9
