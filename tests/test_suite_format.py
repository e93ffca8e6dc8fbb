"""The canonical suite format: round trip, content hash, and a clear error for every kind of bad file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.suites.jsonl import load_suite, save_suite
from experiments.suites.suite import SuiteError
from tests.support import REPO, tiny_suite


def write(dir: Path, memories: list, queries: list, qrels: str) -> Path:
    dir.mkdir(parents=True, exist_ok=True)
    (dir / "memories.jsonl").write_text(
        "".join(m if isinstance(m, str) else json.dumps(m) + "\n" for m in memories)
    )
    (dir / "queries.jsonl").write_text(
        "".join(q if isinstance(q, str) else json.dumps(q) + "\n" for q in queries)
    )
    (dir / "qrels.tsv").write_text(qrels)
    return dir


GOOD_M = {"id": "m1", "text": "always use type hints", "scope": {"user": "u1"}}
GOOD_M2 = {"id": "m2", "text": "the budget is 2000", "scope": {"user": "u1"}}
GOOD_Q = {"id": "q1", "text": "show me python code", "scope": {"user": "u1"}}


def test_round_trip_keeps_every_field_and_the_content_hash(tmp_path):
    suite = tiny_suite()
    loaded = load_suite(save_suite(suite, tmp_path / "tiny"))
    assert loaded.content_hash == suite.content_hash
    assert [m.text for m in loaded.memories] == [m.text for m in suite.memories]
    assert dict(loaded.qrels) == dict(suite.qrels)
    assert loaded.is_abstention("c2:q1") and not loaded.is_abstention("c1:q0")


def test_content_hash_changes_with_any_judgement(tmp_path):
    suite = tiny_suite()
    save_suite(suite, tmp_path / "a")
    qrels = (tmp_path / "a" / "qrels.tsv").read_text().replace("c1:q0 0 c1:0 1", "c1:q0 0 c1:0 2")
    (tmp_path / "a" / "qrels.tsv").write_text(qrels)
    assert load_suite(tmp_path / "a").content_hash != suite.content_hash


@pytest.mark.parametrize(
    "memories, queries, qrels, expected",
    [
        ([GOOD_M, '{"id": "m2", "text": oops}\n'], [GOOD_Q], "", "memories.jsonl:2: malformed JSON"),
        (
            [GOOD_M, {"id": "m2", "scope": {"user": "u1"}}],
            [GOOD_Q],
            "",
            "memories.jsonl:2: text: missing required field",
        ),
        ([{**GOOD_M, "text": "   "}], [GOOD_Q], "", "memories.jsonl:1: text: must be a non-empty string"),
        ([{**GOOD_M, "confidence": "high"}], [GOOD_Q], "", "memories.jsonl:1: confidence: must be a number"),
        ([{**GOOD_M, "importance": "urgent"}], [GOOD_Q], "", "memories.jsonl:1: importance: must be one of"),
        ([GOOD_M, {**GOOD_M2, "id": "m1"}], [GOOD_Q], "", "memories.jsonl:2: id: duplicate memory id 'm1'"),
        ([{**GOOD_M, "colour": "red"}], [GOOD_Q], "", "memories.jsonl:1: colour: unknown field"),
        (
            [{**GOOD_M, "metadata": {"fact_role": "instruction"}}],
            [GOOD_Q],
            "",
            "metadata.fact_role: reserved",
        ),
        ([GOOD_M], [{**GOOD_Q, "scope": "u1"}], "", "queries.jsonl:1: scope: must be a non-empty object"),
        (
            [GOOD_M],
            [{**GOOD_Q, "noise_patterns": ["(unclosed"]}],
            "",
            "queries.jsonl:1: noise_patterns: bad regex",
        ),
        ([GOOD_M], [GOOD_Q], "q1 0 m1 1\nq9 0 m1 1\n", "qrels.tsv:2: query_id: unknown query 'q9'"),
        ([GOOD_M], [GOOD_Q], "q1 0 m7 1\n", "qrels.tsv:1: memory_id: unknown memory 'm7'"),
        ([GOOD_M], [GOOD_Q], "q1 0 m1 high\n", "qrels.tsv:1: grade: must be an integer"),
        ([GOOD_M], [GOOD_Q], "q1 m1 1\n", "qrels.tsv:1: expected 4 columns"),
        ([GOOD_M], [GOOD_Q], "q1 0 m1 1\nq1 0 m1 2\n", "qrels.tsv:2: memory_id: 'q1' judges 'm1' twice"),
        ([{**GOOD_M, "scope": {"user": "u2"}}], [GOOD_Q], "q1 0 m1 1\n", "memory 'm1' of another scope"),
    ],
)
def test_bad_file_names_file_line_and_field(tmp_path, memories, queries, qrels, expected):
    with pytest.raises(SuiteError) as err:
        load_suite(write(tmp_path / "s", memories, queries, qrels))
    assert expected in str(err.value)


def test_non_utf8_bytes_are_reported_with_their_line(tmp_path):
    folder = write(tmp_path / "s", [GOOD_M], [GOOD_Q], "")
    with open(folder / "memories.jsonl", "ab") as fh:
        fh.write(b'{"id": "m2", "text": "caf\xe9", "scope": {"user": "u1"}}\n')
    with pytest.raises(SuiteError, match=r"memories.jsonl:2: not UTF-8"):
        load_suite(folder)


def test_every_problem_is_reported_at_once(tmp_path):
    with pytest.raises(SuiteError) as err:
        load_suite(write(tmp_path / "s", [GOOD_M, "{bad\n", {"id": "m3"}], [GOOD_Q], "q1 0 zz 1\n"))
    assert len(err.value.problems) >= 4  # malformed line, missing text, missing scope, unknown memory


def test_missing_directory_and_files_are_clear(tmp_path):
    with pytest.raises(SuiteError, match="does not exist"):
        load_suite(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SuiteError, match="memories.jsonl: file is missing"):
        load_suite(tmp_path / "empty")


def test_runner_exits_non_zero_on_a_bad_suite_before_any_work(tmp_path):
    folder = write(tmp_path / "s", [GOOD_M, '{"id": "m2", "text": oops}\n'], [GOOD_Q], "")
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.run",
            "suite=jsonl",
            f"suite.path={folder}",
            "variant=bm25",
            "tracking=none",
            f"hydra.run.dir={out}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "memories.jsonl:2: malformed JSON" in proc.stderr
    assert not (out / "metrics.json").exists()  # nothing half-written
