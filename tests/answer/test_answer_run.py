"""memeval-run with the answer stage, end to end on the LoCoMo fixture against a loopback
OpenAI-compatible endpoint (experiments/benchmarks/chat_stub.py): record, replay with no endpoint, re-judge,
answers from a file, and a run without the stage writing what it always wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from experiments.benchmarks.chat_stub import ChatStub
from tests.support import DATA

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-never-recorded-42"
BASE = [
    "suite=locomo", f"suite.path={DATA / 'locomo' / 'locomo_fixture.json'}", "variant=bm25", "progress=false",
]  # fmt: skip


def run(
    tmp: Path,
    name: str,
    *overrides: str,
    stub: ChatStub | None = None,
    url: str | None = None,
    tracked: bool = False,
) -> subprocess.CompletedProcess:
    """memeval-run (F's modules or their stand-ins) on the LoCoMo fixture; the endpoint is the stub's,
    `url`, or port 9 where nothing answers."""
    url = url or (stub.base_url if stub is not None else "http://127.0.0.1:9/v1")
    answer = [f"answer.endpoint.base_url={url}"] if "answer=llm" in overrides else []
    tracking = (
        [f"tracking.tracker.uri=sqlite:///{tmp / 'mlflow.db'}", "tracking.tracker.experiment=answer"]
        if tracked
        else ["tracking.enabled=false"]
    )
    return subprocess.run(
        [sys.executable, "-m", "experiments.run", *BASE,
         f"hydra.run.dir={tmp / name}", f"cache_dir={tmp / 'cache'}", *tracking, *overrides, *answer],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "MEMEVAL_ANSWER_TEST_KEY": KEY, "MLFLOW_TRACKING_URI": ""},
    )  # fmt: skip


LLM = [
    "answer=llm", "answer.model=stub", "answer.endpoint.api_key_env=MEMEVAL_ANSWER_TEST_KEY",
    "answer.context=[retrieved,random,gold]", "answer.concurrency=3",
]  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("answer_runs")
    cassette = tmp / "answers.cassette.jsonl"
    with ChatStub() as stub:
        record = run(
            tmp,
            "record",
            *LLM,
            "answer.judges=[lexical]",
            "answer.mode=record",
            f"answer.cassette={cassette}",
            stub=stub,
        )
        assert record.returncode == 0, record.stderr[-3000:]
        recorded_calls = len(stub.requests)
        keys_seen = set(stub.authorization)
        rejudge = run(
            tmp,
            "rejudge",
            *LLM,
            "answer.judges=[lexical,strict]",
            "answer.mode=record",
            f"answer.cassette={cassette}",
            stub=stub,
            tracked=True,
        )
        assert rejudge.returncode == 0, rejudge.stderr[-3000:]
        rejudge_requests = stub.requests[recorded_calls:]
    replay = run(
        tmp,
        "replay",
        *LLM,
        "answer.judges=[lexical,strict]",
        "answer.mode=replay",
        f"answer.cassette={cassette}",
    )
    assert replay.returncode == 0, replay.stderr[-3000:]
    plain = run(tmp, "plain")
    assert plain.returncode == 0, plain.stderr[-3000:]
    return {"tmp": tmp, "cassette": cassette, "recorded_calls": recorded_calls, "keys": keys_seen,
            "rejudge_requests": rejudge_requests}  # fmt: skip


def _answer_columns(folder: Path) -> pd.DataFrame:
    frame = pd.read_csv(folder / "per_query.csv", index_col="query_id")
    return frame[[c for c in frame.columns if c.startswith("answer")]]


def test_a_replay_with_no_endpoint_writes_the_recorded_runs_answers_byte_for_byte(runs):
    tmp = runs["tmp"]
    for name in ("answers.jsonl", "answers.random.jsonl", "answers.gold.jsonl"):
        assert (tmp / "rejudge" / name).read_bytes() == (tmp / "replay" / name).read_bytes()
    pd.testing.assert_frame_equal(_answer_columns(tmp / "rejudge"), _answer_columns(tmp / "replay"))
    recorded, replayed = (json.loads((tmp / n / "metrics.json").read_text()) for n in ("rejudge", "replay"))
    assert json.dumps(recorded["answer"], sort_keys=True) == json.dumps(replayed["answer"], sort_keys=True)
    assert replayed["answer_calls"]["live"] == 0 and replayed["answer_calls"]["cassette"] > 0
    tags = json.loads((tmp / "replay" / "tags.json").read_text())
    assert (
        tags["memeval.answer_cassette_sha256"]
        == json.loads((tmp / "rejudge" / "tags.json").read_text())["memeval.answer_cassette_sha256"]
    )


def test_a_new_judge_runs_over_the_recorded_answers_without_asking_the_answerer_again(runs):
    tmp = runs["tmp"]
    assert runs["rejudge_requests"], "the new judge asked nothing"
    strict = "Reply with one word: CORRECT or INCORRECT."  # only the strict judge's prompts were sent
    assert all(strict in r["messages"][-1]["content"] for r in runs["rejudge_requests"])
    first = [json.loads(line) for line in (tmp / "record" / "answers.jsonl").read_text().splitlines()]
    again = [json.loads(line) for line in (tmp / "rejudge" / "answers.jsonl").read_text().splitlines()]
    assert [{k: v for k, v in r.items() if k != "verdicts"} for r in first] == [
        {k: v for k, v in r.items() if k != "verdicts"} for r in again
    ]
    assert {"answer.llm_strict.correct", "answer.lexical.f1"} <= set(_answer_columns(tmp / "rejudge").columns)


def test_the_key_reaches_the_endpoint_and_nothing_the_run_writes(runs):
    assert runs["keys"] == {f"Bearer {KEY}"}
    for folder in ("record", "rejudge", "replay"):
        for path in (runs["tmp"] / folder).rglob("*"):
            if path.is_file():
                assert KEY not in path.read_text(errors="replace"), path
    assert KEY not in runs["cassette"].read_text()


def test_answers_jsonl_holds_prompt_digest_context_usage_and_latency(runs):
    records = [
        json.loads(line) for line in (runs["tmp"] / "record" / "answers.jsonl").read_text().splitlines()
    ]
    metrics = json.loads((runs["tmp"] / "record" / "metrics.json").read_text())
    trec = (runs["tmp"] / "record" / "run.trec").read_text().splitlines()
    top = {}
    for line in trec:
        qid, _, mid, rank, *_ = line.split()
        top.setdefault(qid, []).append(mid)
    for r in records:
        assert len(r["prompt_sha256"]) == 64 and r["latency_ms"] > 0 and r["prompt_tokens"] > 0
        assert r["context_ids"] == top.get(r["query_id"], [])[: metrics["answer"]["k"]]
    assert len(records) == metrics["answer"]["n_judged"] == metrics["n_queries"]
    assert (
        metrics["overall"]["answer_acc_lexical"]
        == metrics["answer"]["judges"]["lexical"]["retrieved"]["mean"]
    )
    assert set(metrics["answer"]["differences"]) == {"gold-retrieved", "retrieved-random"}


def test_a_run_without_the_answer_stage_writes_what_it_always_wrote(runs):
    tmp = runs["tmp"]
    assert (tmp / "plain" / "run.trec").read_bytes() == (tmp / "record" / "run.trec").read_bytes()
    plain, answered = (json.loads((tmp / n / "metrics.json").read_text()) for n in ("plain", "record"))
    assert plain["suite"]["content_hash"] == answered["suite"]["content_hash"]
    assert "answer" not in plain and "answer:" not in (tmp / "plain" / "config.yaml").read_text()
    volatile = ("latency", "answer_")  # the answer stage's own numbers: answer_acc_*, answer_lafs_gain_*
    same = {k: v for k, v in plain["overall"].items() if not k.startswith(volatile)}
    assert same == {k: v for k, v in answered["overall"].items() if not k.startswith(volatile)}
    assert not (tmp / "plain" / "answers.jsonl").exists()
    frame = pd.read_csv(tmp / "plain" / "per_query.csv")
    assert not [c for c in frame.columns if c.startswith("answer")]


def test_a_replay_miss_names_the_query_and_the_call(runs, tmp_path):
    lines = runs["cassette"].read_text().splitlines()
    short = tmp_path / "short.jsonl"
    short.write_text("\n".join(lines[:3]) + "\n")  # the model list and the first two calls: a valid prefix
    proc = run(
        tmp_path, "miss", *LLM, "answer.concurrency=1", "answer.mode=replay", f"answer.cassette={short}"
    )
    assert proc.returncode == 2
    assert (
        "replay miss: query conv-t1:q" in proc.stderr
        and str(short) in proc.stderr
        and "(answer" in proc.stderr
    )
    assert not (tmp_path / "miss" / "metrics.json").exists()


def test_answers_from_a_file_are_judged_as_the_same_answers_asked_live(runs, tmp_path):
    records = [
        json.loads(line) for line in (runs["tmp"] / "record" / "answers.jsonl").read_text().splitlines()
    ]
    answers = tmp_path / "theirs.jsonl"
    answers.write_text(
        "".join(json.dumps({"query_id": r["query_id"], "answer": r["answer"]}) + "\n" for r in records)
    )
    proc = run(tmp_path, "file", "answer=file", f"answer.path={answers}", "answer.judges=[lexical]")
    assert proc.returncode == 0, proc.stderr[-3000:]
    theirs, ours = _answer_columns(tmp_path / "file"), _answer_columns(runs["tmp"] / "record")
    pd.testing.assert_series_equal(theirs["answer.lexical.f1"], ours["answer.lexical.f1"])
    assert (theirs["answer"] == ours["answer"]).all()


def test_a_suite_without_gold_answers_is_refused_before_any_call(tmp_path):
    with ChatStub() as stub:
        proc = run(
            tmp_path,
            "spark",
            "suite=spark25",
            "suite.path=datasets/spark25",
            "answer=llm",
            "answer.model=stub",
            stub=stub,
        )
        assert stub.requests == []
    assert proc.returncode == 2 and "spark25" in proc.stderr and "no gold answers" in proc.stderr
    assert not (tmp_path / "spark").exists()


def test_the_gate_takes_an_answer_metric_as_primary(runs, tmp_path):
    from experiments.gate import Baseline, GateConfig, check_run
    from experiments.track.finished_runs import load_run_dir

    config = tmp_path / "answer_gate.yaml"
    config.write_text(
        "name: answer\nmetrics: [answer.lexical.f1, R@10]\ntolerance: 0.0\n"
        "allow_few_clusters: true\nallow_tolerance_below_mde: true\n"
    )
    gate = GateConfig.load(str(config))
    baseline = Baseline.from_run(load_run_dir(runs["tmp"] / "rejudge"), gate, command="test")
    assert set(baseline.per_query["answer.lexical.f1"]) == set(
        load_run_dir(runs["tmp"] / "replay").per_query.index
    )
    result = check_run(load_run_dir(runs["tmp"] / "replay"), baseline, gate, tmp_path / "baseline.json")
    assert result.passed
    assert "answer.lexical.f1" in load_run_dir(runs["tmp"] / "replay").metrics


def test_mlflow_gets_answer_acc_per_judge_and_the_cassette_digest(runs):
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{runs['tmp'] / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("answer").experiment_id])
    metrics = json.loads((runs["tmp"] / "rejudge" / "metrics.json").read_text())
    assert run.data.metrics["answer_acc_lexical"] == pytest.approx(metrics["overall"]["answer_acc_lexical"])
    assert run.data.metrics["answer_acc_strict"] == pytest.approx(metrics["overall"]["answer_acc_strict"])
    assert (
        run.data.tags["memeval.answer_cassette_sha256"]
        == json.loads((runs["tmp"] / "rejudge" / "tags.json").read_text())["memeval.answer_cassette_sha256"]
    )


def test_under_official_the_run_is_scored_as_a_longmemeval_v2_operating_point(runs, tmp_path):
    """answer.protocol=official: each judge's accuracy against the mean retrieval seconds, scored by
    upstream's compute_lafs.py (vendored) from the run's own per_query.csv, equal to 1e-12, and in MLflow's
    numbers (metrics.json overall)."""
    from tests.upstream import longmemeval_v2_compute_lafs as upstream

    records = [
        json.loads(line) for line in (runs["tmp"] / "record" / "answers.jsonl").read_text().splitlines()
    ]
    answers = tmp_path / "theirs.jsonl"
    answers.write_text(
        "".join(json.dumps({"query_id": r["query_id"], "answer": r["answer"]}) + "\n" for r in records)
    )
    proc = run(
        tmp_path, "official", "answer=file", f"answer.path={answers}", "answer.judges=[lexical]",
        "answer.protocol=official",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((tmp_path / "official" / "metrics.json").read_text())
    scored = metrics["answer"]["lafs_lme_v2"]["by_judge"]["lexical"]
    frame = pd.read_csv(tmp_path / "official" / "per_query.csv", index_col="query_id")
    judged = frame.dropna(subset=["answer.lexical.f1"])
    point = upstream.Point(
        "run", acc=100 * judged["answer.lexical.f1"].mean(), latency=(judged["latency_ms"] / 1000).mean()
    )
    assert 0 < point.acc < 100 and 0 < point.latency < 1
    for tier in ("small", "medium"):
        theirs = upstream.lafs_summary_for_submission(tier, [point])
        assert abs(scored["tiers"][tier]["lafs_gain"] - theirs["lafs_gain"]) <= 1e-9
        assert abs(scored["tiers"][tier]["submission_lafs"] - theirs["submission_lafs"]) <= 1e-9
        assert metrics["overall"][f"answer_lafs_gain_{tier}_lexical"] == pytest.approx(theirs["lafs_gain"])
    # under the memeval protocol the run states no LongMemEval-V2 point
    proc = run(
        tmp_path, "memeval", "answer=file", f"answer.path={answers}", "answer.judges=[lexical]",
        "answer.protocol=memeval",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "lafs_lme_v2" not in json.loads((tmp_path / "memeval" / "metrics.json").read_text())["answer"]
