"""LoCoMo: the loader on a hand-made file in its schema (fast) and on conversations 1-5 (../shared/locomo).

Specification: a memory per turn with its dia_id, speaker and session date-time; a scope per
conversation; categories named; category 5 read but not scored by default (upstream); every malformed
or unknown evidence id and every question with no evidence counted in `notes`, never dropped silently.
"""

from __future__ import annotations

import json
import re

import pytest

from experiments.suites.locomo import load_locomo
from experiments.suites.suite import SuiteError
from tests.support import DATA

FIXTURE = DATA / "locomo" / "locomo_fixture.json"


def test_turns_become_memories_with_dia_id_speaker_and_session_time():
    suite = load_locomo(FIXTURE)
    first = suite.memories[0]
    assert (first.id, first.role, first.created_at) == ("conv-t1:D1:1", "Ana", "2023-05-08T13:56:00")
    assert first.metadata["dia_id"] == "D1:1" and first.scope == {"conversation": "conv-t1"}
    photo = next(m for m in suite.memories if m.id == "conv-t1:D1:3")
    assert photo.text == (
        'Ana said, "She hides under the sofa, but she loves the window." '
        "and shared a photo of a grey cat on a windowsill"
    )
    assert all(q.now == "2023-06-27T10:37:00" for q in suite.queries)  # after the last session


def test_categories_are_named_and_memeval_reads_category_5_but_scores_it_only_when_asked():
    suite = load_locomo(FIXTURE, protocol="memeval")
    assert {q.labels["category"] for q in suite.queries} == {"single-hop", "temporal", "multi-hop"}
    assert any("1 category-5 (adversarial) question(s) read but not scored" in n for n in suite.notes)
    scored = load_locomo(FIXTURE, protocol="memeval", categories=[1, 2, 3, 4, 5])
    adversarial = next(q for q in scored.queries if q.labels["category"] == "adversarial")
    assert scored.qrels[adversarial.id] == {"conv-t1:D1:4": 1}


def test_memeval_splits_or_drops_evidence_problems_and_counts_them():
    suite = load_locomo(FIXTURE, protocol="memeval")
    assert suite.qrels["conv-t1:q2"] == {"conv-t1:D1:1": 1, "conv-t1:D1:4": 1}  # "D1:1; D1:4", split
    assert suite.qrels["conv-t1:q4"] == {"conv-t1:D2:3": 1}  # "D" and "D9:9" dropped
    assert "conv-t1:q3" not in {q.id for q in suite.queries}  # no evidence: cannot be scored
    assert json.loads(suite.tags["evidence_audit"]) == {
        "split": 1,
        "malformed": 1,
        "unknown": 1,
        "no_evidence": 1,
    }
    (audit,) = [n for n in suite.notes if n.startswith("LoCoMo evidence:")]
    assert "conv-t1:q4 'D'" in audit and "conv-t1:q4 'D9:9'" in audit and "conv-t1:q3" in audit


def test_session_granularity_is_a_session_per_memory_with_evidence_mapped_up():
    suite = load_locomo(FIXTURE, granularity="session")
    assert [m.id for m in suite.memories] == ["conv-t1:D1", "conv-t1:D2"]
    assert suite.qrels["conv-t1:q2"] == {"conv-t1:D1": 1}
    rounds = load_locomo(
        FIXTURE, granularity="round", protocol="memeval"
    )  # Ana opens session 1, Ben session 2
    assert [m.metadata["turns"] for m in rounds.memories][:2] == [
        ["conv-t1:D1:1", "conv-t1:D1:2"],
        ["conv-t1:D1:3", "conv-t1:D1:4"],
    ]


def test_a_bad_file_names_the_sample_and_field(tmp_path):
    data = json.loads(FIXTURE.read_text())
    data[0]["qa"][0]["category"] = 7
    data[0]["conversation"]["session_2"][1]["dia_id"] = "D3:2"
    path = tmp_path / "locomo10.json"
    path.write_text(json.dumps(data))
    with pytest.raises(SuiteError) as err:
        load_locomo(path)
    assert "[0].qa[0].category: must be one of 1-5, got 7" in str(err.value)
    assert "[0].conversation.session_2[1].dia_id: must be D2:<turn>, got 'D3:2'" in str(err.value)


# --- the real conversations 1-5: the loader's counts against a direct count of the file


def direct_counts(data: list) -> dict[str, int]:
    """Count evidence problems straight off the JSON, with no code from the loader."""
    counts = {"split": 0, "malformed": 0, "unknown": 0, "no_evidence": 0}
    for sample in data:
        conv = sample["conversation"]
        turns = {t["dia_id"] for key, v in conv.items() if re.fullmatch(r"session_\d+", key) for t in v}
        for qa in sample["qa"]:
            counts["no_evidence"] += not qa["evidence"]
            for value in qa["evidence"]:
                parts = [p.strip() for p in value.replace(",", ";").split(";") if p.strip()]
                counts["split"] += len(parts) > 1
                for part in parts:
                    if not re.fullmatch(r"D\d+:\d+", part):
                        counts["malformed"] += 1
                    elif part not in turns:
                        counts["unknown"] += 1
    return counts


def test_conversations_1_to_5_evidence_counts_match_a_direct_count(locomo_file):
    data = json.loads(locomo_file.read_text())
    suite = load_locomo(locomo_file, protocol="memeval")
    assert json.loads(suite.tags["evidence_audit"]) == direct_counts(data)
    assert direct_counts(data)["no_evidence"] == 2  # as the issue says: two questions have no evidence
    scored = [qa for s in data for qa in s["qa"] if qa["category"] != 5]
    unscorable = sum(1 for n in suite.notes if "no usable evidence" in n)
    assert len(suite.queries) == len(scored) - unscorable
    assert {m.scope["conversation"] for m in suite.memories} == {s["sample_id"] for s in data}
    assert suite.tags["dataset_release"].startswith("LoCoMo locomo10.json, conversations 1-5")
