"""Granularity as a suite option: a turn, a round (a user turn and its reply) or a session per memory.

Specification: evidence maps up (a round or session is relevant exactly when it holds an evidence
message, with the highest grade of its turns), nothing else in the suite changes, and the granularity is
stated in the suite's tags, so in every run's tags.json and MLflow tags.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest

from experiments.evaluate.metrics import per_query
from experiments.suites.beam import load_beam
from experiments.suites.granularity import regroup
from experiments.suites.suite import SuiteError
from tests.support import memory, query, tiny_suite

WORDS = ["lisbon", "budget", "flight", "hotel", "museum", "tram", "beach", "dinner", "train", "castle"]


def beam_conversation(root: Path) -> tuple[Path, dict[int, int], dict[str, list[int]]]:
    """A BEAM-format conversation: 3 batches (sessions) of 2-3 user/assistant turns, 4 questions.

    Returns the folder, each message's batch (read off the structure written here, not the loader), and
    each question's evidence message ids."""
    folder = root / "T" / "1"
    (folder / "probing_questions").mkdir(parents=True)
    chat, batch_of, mid = [], {}, 0
    for b, turns in enumerate((2, 3, 2), start=1):
        batch = {"batch_number": b, "time_anchor": f"March-{b}-2024", "turns": []}
        for _ in range(turns):
            pair = []
            for role in ("user", "assistant"):
                pair.append(
                    {"role": role, "id": mid, "content": f"{role} says {WORDS[mid % 10]} number {mid}"}
                )
                batch_of[mid] = b
                mid += 1
            batch["turns"].append(pair)
        chat.append(batch)
    evidence = {
        "information_extraction": [2],  # batch 1, the second round's user message
        "multi_session_reasoning": [1, 9],  # an assistant message in batch 1, a user message in batch 3
        "knowledge_update": {"original_info": [4], "updated_info": [12]},  # batch 2 and batch 3
        "temporal_reasoning": [5, 6],  # one round of batch 2 ... and the next round
    }
    questions = {a: [{"question": f"what about {a}?", "source_chat_ids": ids}] for a, ids in evidence.items()}
    (folder / "chat.json").write_text(json.dumps(chat))
    (folder / "probing_questions" / "probing_questions.json").write_text(json.dumps(questions))
    flat = {
        a: [x for part in (ids.values() if isinstance(ids, dict) else [ids]) for x in part]
        for a, ids in evidence.items()
    }
    return folder, batch_of, flat


def test_a_session_is_relevant_exactly_when_it_holds_an_evidence_message(tmp_path):
    folder, batch_of, evidence = beam_conversation(tmp_path)
    suite = load_beam(folder, granularity="session")
    sessions = [m.id for m in suite.memories]
    assert len(sessions) == 3 and suite.tags["granularity"] == "session"
    for q in suite.queries:
        holds = {f"T/1:b{batch_of[x]}" for x in evidence[q.labels["ability"]]}
        relevant = {mid for mid, grade in suite.qrels[q.id].items() if grade > 0}
        assert relevant == holds, q.id
        # Scored so: a run that returns one session finds the evidence (hit@1 = 1) exactly when it holds some.
        for session in sessions:
            scores = per_query(suite.qrels, {q.id: [session]}, ["hit@1"])
            assert scores.loc[q.id, "hit@1"] == float(session in holds), (q.id, session)


def test_a_round_is_a_user_message_and_its_reply(tmp_path):
    folder, _, evidence = beam_conversation(tmp_path)
    turns = load_beam(folder)
    rounds = load_beam(folder, granularity="round")
    assert len(rounds.memories) == len(turns.memories) // 2 == 7
    for unit in rounds.memories:
        members = [turns.memories[int(t.split(":")[1])] for t in unit.metadata["turns"]]
        assert [m.role for m in members] == ["user", "assistant"]
        assert unit.text == "\n".join(m.text for m in members)
    q = next(q for q in rounds.queries if q.labels["ability"] == "temporal_reasoning")
    assert sorted(rounds.qrels[q.id]) == ["T/1:b2#r1", "T/1:b2#r2"]  # messages 5 and 6: two rounds
    assert evidence["temporal_reasoning"] == [5, 6]


def test_turn_granularity_is_the_suite_as_before(beam_suite):
    # BEAM 100K's content hash at turn granularity is the one every earlier report names.
    assert beam_suite.content_hash.startswith("f5a70ee2582a")
    assert beam_suite.tags["granularity"] == "turn"


def test_a_unit_takes_the_highest_grade_of_its_turns():
    suite = tiny_suite()
    graded = type(suite)(
        name="g",
        memories=(
            memory("a", "one", role="user", metadata={"s": "1"}),
            memory("b", "two", role="assistant", metadata={"s": "1"}),
            memory("c", "three", role="user", metadata={"s": "2"}),
        ),
        queries=(query("q", "one"),),
        qrels={"q": {"a": 1, "b": 3, "c": 0}},
    )
    out = regroup(graded, "session", lambda m: f"s{m.metadata['s']}")
    assert out.qrels == {"q": {"s1": 3, "s2": 0}}


def test_an_unknown_granularity_is_refused_naming_the_option(tmp_path):
    folder, _, _ = beam_conversation(tmp_path)
    with pytest.raises(
        SuiteError, match="suite.granularity: must be one of turn, round, session, got 'sentence'"
    ):
        load_beam(folder, granularity="sentence")


@pytest.mark.slow
def test_the_granularity_is_in_tags_json_and_mlflow(tmp_path):
    folder, _, _ = beam_conversation(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.run",
            "suite=beam",
            f"suite.path={folder}",
            "suite.granularity=session",
            "variant=bm25",
            f"tracking.tracker.uri={uri}",
            "tracking.tracker.experiment=granularity",
            f"hydra.run.dir={tmp_path / 'run'}",
            "cache_dir=null",
            "progress=false",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "MLFLOW_TRACKING_URI": ""},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    tags = json.loads((tmp_path / "run" / "tags.json").read_text())
    assert tags["granularity"] == "session"
    runs = mlflow.MlflowClient(tracking_uri=uri).search_runs(
        [mlflow.MlflowClient(tracking_uri=uri).get_experiment_by_name("granularity").experiment_id]
    )
    assert [r.data.tags["granularity"] for r in runs] == ["session"]
