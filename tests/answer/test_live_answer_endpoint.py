"""The answer stage against the real offline endpoint (llama_cpp.server + SmolLM2-135M): a recorded run,
its replay with no server, and a second live run give the same answers. The model is used for the
plumbing only (requests, usage, cassettes, replay), never to assert an answer's quality. 12 model calls
at 2 memories of context and 16 tokens each (the issue's budget: <= 20 in the whole tier)."""

from __future__ import annotations

import json

import pytest

from experiments.answer.offline_model import smollm2_gguf
from tests.answer.test_answer_run import run

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def test_a_recorded_run_replays_byte_for_byte_and_a_second_live_run_answers_the_same(llama_server, tmp_path):
    live = [
        "answer=llm", "answer.model=smollm2", f"answer.endpoint.model_file={smollm2_gguf()}",
        "answer.k=2", "answer.max_tokens=16", "answer.window_tokens=4096", "answer.judges=[lexical]",
    ]  # fmt: skip
    url = llama_server.base_url
    cassette = tmp_path / "smollm2.jsonl"
    record = run(tmp_path, "record", *live, "answer.mode=record", f"answer.cassette={cassette}", url=url)
    assert record.returncode == 0, record.stderr[-3000:]
    replay = run(tmp_path, "replay", *live, "answer.mode=replay", f"answer.cassette={cassette}")
    assert replay.returncode == 0, replay.stderr[-3000:]
    again = run(tmp_path, "again", *live, "answer.mode=live", url=url)
    assert again.returncode == 0, again.stderr[-3000:]
    recorded = (tmp_path / "record" / "answers.jsonl").read_bytes()
    assert recorded == (tmp_path / "replay" / "answers.jsonl").read_bytes()
    answers = [json.loads(line) for line in recorded.decode().splitlines()]
    assert [r["answer"] for r in answers] == [
        json.loads(line)["answer"] for line in (tmp_path / "again" / "answers.jsonl").read_text().splitlines()
    ]
    assert all(r["prompt_tokens"] > 0 and r["completion_tokens"] > 0 for r in answers)
    lines = [json.loads(line) for line in cassette.read_text().splitlines()]
    assert lines[0]["op"] == "models" and lines[0]["response"] == llama_server.model_id()
    assert sum(line["op"] == "chat" for line in lines) == len(answers) == 6
