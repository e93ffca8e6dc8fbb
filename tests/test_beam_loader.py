"""The BEAM loader on the real data: counts, marker stripping, evidence shapes, scopes, labels."""

from __future__ import annotations

import json
import shutil

import pytest

from experiments.suites.beam import ABILITIES, evidence_ids, load_beam, strip_probe_marker
from experiments.suites.suite import SuiteError


def test_counts_match_the_published_100k_tier(beam_suite):
    s = beam_suite.summary()
    assert s["memories"] == 2432  # every message, none empty after stripping
    assert s["scopes"] == 10
    # 200 questions; one preference question in conversation 9 has no evidence: skipped and said so
    assert s["queries"] == 199 and len(beam_suite.notes) == 1 and "100K/9" in beam_suite.notes[0]
    assert set(s["labels"]["ability"]) == set(ABILITIES)
    assert s["abstention_queries"] == 20
    assert all(
        beam_suite.is_abstention(q.id) == (q.labels["ability"] == "abstention") for q in beam_suite.queries
    )


def test_probe_markers_and_generation_fields_never_reach_the_text(beam_suite, beam_100k):
    assert not any("->->" in m.text for m in beam_suite.memories)
    assert strip_probe_marker("Can you help? ->-> 1,25") == "Can you help?"
    assert strip_probe_marker("Help ->-> 5,14) Character & Relationship Labels: x") == "Help"
    assert strip_probe_marker("Plan ->-> 2,N/A") == "Plan"
    first = json.loads((beam_100k / "1" / "chat.json").read_text())[0]["turns"][0][0]
    assert (
        first["index"] == "1,1"
        and first["question_type"] == "main_question"
        and "->-> 1,1" in first["content"]
    )
    text = next(m.text for m in beam_suite.memories if m.id == "100K/1:0")
    assert "main_question" not in text and not text.endswith("1,1")


def test_evidence_in_every_shape_is_flattened():
    assert evidence_ids([4, 60, 116]) == [4, 60, 116]
    assert evidence_ids({"original_info": [86], "updated_info": [114]}) == [86, 114]
    assert evidence_ids([[136, 138], [140]]) == [136, 138, 140]
    assert evidence_ids({"first_event": [2], "second_event": [0, 2]}) == [2, 0]
    assert evidence_ids(None) == []


def test_dict_shaped_evidence_becomes_judgements(beam_suite):
    q = "100K/1:knowledge_update:0"
    assert set(beam_suite.qrels[q]) == {"100K/1:86", "100K/1:114"}
    assert set(beam_suite.qrels["100K/1:contradiction_resolution:0"]) == {"100K/1:58", "100K/1:24"}


def test_each_conversation_is_its_own_scope_and_roles_and_dates_are_kept(beam_suite):
    m = next(m for m in beam_suite.memories if m.id == "100K/1:0")
    assert dict(m.scope) == {"conversation": "100K/1"}
    assert m.role == "user" and m.created_at == "2024-03-15"
    assert m.metadata["position"] == 0 and m.metadata["time_anchor"] == "March-15-2024"
    assert {m.role for m in beam_suite.memories} == {"user", "assistant"}
    assert all(m.created_at for m in beam_suite.memories)
    for q in beam_suite.queries:
        assert all(mid.split(":")[0] == q.scope["conversation"] for mid in beam_suite.qrels.get(q.id, {}))


def test_a_single_conversation_folder_loads(beam_100k):
    suite = load_beam(beam_100k / "3")
    assert {m.scope["conversation"] for m in suite.memories} == {"100K/3"}
    assert len(suite.queries) == 20


def test_evidence_naming_a_missing_message_is_a_clear_error(beam_100k, tmp_path):
    conv = tmp_path / "T" / "1"
    shutil.copytree(beam_100k / "1", conv)
    path = conv / "probing_questions" / "probing_questions.json"
    data = json.loads(path.read_text())
    data["information_extraction"][0]["source_chat_ids"] = [99999]
    path.write_text(json.dumps(data))
    with pytest.raises(
        SuiteError, match=r"information_extraction\[0\]\.source_chat_ids: names messages not in chat.json"
    ):
        load_beam(conv)


def test_unknown_ability_and_missing_folder_are_clear_errors(beam_100k, tmp_path):
    conv = tmp_path / "T" / "1"
    shutil.copytree(beam_100k / "1", conv)
    path = conv / "probing_questions" / "probing_questions.json"
    data = json.loads(path.read_text())
    data["telepathy"] = []
    path.write_text(json.dumps(data))
    with pytest.raises(SuiteError, match="telepathy: unknown ability"):
        load_beam(conv)
    with pytest.raises(SuiteError, match="does not exist"):
        load_beam(tmp_path / "nowhere")
