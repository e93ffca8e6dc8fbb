"""A live system gets the same answer stage on what it returned (issue 43, part 6): LoCoMo's fixture scored
through memeval-serve (a real subprocess, `variant=system system=memeval_serve`) with the answerer at a
loopback chat stub gives the answers the in-process bm25 run gives: the same questions, the same context ids
in the same order, the same prompts sent, the same per-query judge values."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.benchmarks.chat_stub import ChatStub
from tests.live.test_live_serve import served
from tests.support import DATA, REPO

pytestmark = pytest.mark.slow  # a real memeval-serve

LOCOMO = ["suite=locomo", f"suite.path={DATA / 'locomo' / 'locomo_fixture.json'}", "progress=false"]


def run(tmp: Path, name: str, stub: ChatStub, *overrides: str) -> Path:
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.run", *LOCOMO, *overrides, "tracking.enabled=false",
         f"hydra.run.dir={tmp / name}", f"cache_dir={tmp / 'cache'}", "answer=llm", "answer.model=stub",
         f"answer.endpoint.base_url={stub.base_url}", "answer.judges=[lexical]"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
        env={**os.environ, "MLFLOW_TRACKING_URI": "", "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp / name


def answers(run_dir: Path) -> list[dict]:
    records = [json.loads(line) for line in (run_dir / "answers.jsonl").read_text("utf-8").splitlines()]
    return [
        {k: r[k] for k in ("query_id", "context_ids", "answer", "prompt_sha256") if k in r} for r in records
    ]


def judged(run_dir: Path) -> dict[str, str]:
    with open(run_dir / "per_query.csv", newline="", encoding="utf-8") as f:
        return {row["query_id"]: row["answer.lexical.f1"] for row in csv.DictReader(f)}


def test_a_live_system_is_answered_from_what_it_returned_as_in_process(tmp_path):
    with ChatStub() as stub:
        local = run(tmp_path, "local", stub, "variant=bm25")
        sent_locally = [r["messages"] for r in stub.requests]
        with served(*LOCOMO, "variant=bm25", "tracking=none") as (url, _):
            live = run(
                tmp_path, "live", stub, "variant=system", "system=memeval_serve", f"system.base_url={url}"
            )
        sent_live = [r["messages"] for r in stub.requests[len(sent_locally) :]]
    assert answers(live) == answers(local) and len(answers(local)) > 0
    assert any(r["context_ids"] for r in answers(live))  # the system's hits reached the answerer
    assert sorted(map(json.dumps, sent_live)) == sorted(map(json.dumps, sent_locally))
    assert judged(live) == judged(local)
