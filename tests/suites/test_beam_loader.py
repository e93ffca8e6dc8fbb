"""The BEAM loader on the real data: counts, marker stripping, evidence shapes, scopes, labels."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from experiments.suites.beam import ABILITIES, evidence_ids, load_beam, strip_probe_marker
from experiments.suites.suite import SuiteError
from tests.support import DATA


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


def test_a_generated_conversation_folder_loads_as_its_own_scope(beam_synth_dir):
    suite = load_beam(beam_synth_dir / "2")
    assert {m.scope["conversation"] for m in suite.memories} == {f"{beam_synth_dir.name}/2"}
    assert {m.role for m in suite.memories} == {"user", "assistant"}
    assert all(m.created_at for m in suite.memories)
    for q in suite.queries:
        assert all(mid.split(":")[0] == q.scope["conversation"] for mid in suite.qrels.get(q.id, {}))


def test_evidence_naming_a_missing_message_is_a_clear_error(beam_synth_dir, tmp_path):
    conv = tmp_path / "T" / "1"
    shutil.copytree(beam_synth_dir / "1", conv)
    path = conv / "probing_questions" / "probing_questions.json"
    data = json.loads(path.read_text())
    data["information_extraction"][0]["source_chat_ids"] = [99999]
    path.write_text(json.dumps(data))
    with pytest.raises(
        SuiteError, match=r"information_extraction\[0\]\.source_chat_ids: names messages not in chat.json"
    ):
        load_beam(conv)


def test_unknown_ability_and_missing_folder_are_clear_errors(beam_synth_dir, tmp_path):
    conv = tmp_path / "T" / "1"
    shutil.copytree(beam_synth_dir / "1", conv)
    path = conv / "probing_questions" / "probing_questions.json"
    data = json.loads(path.read_text())
    data["telepathy"] = []
    path.write_text(json.dumps(data))
    with pytest.raises(SuiteError, match="telepathy: unknown ability"):
        load_beam(conv)
    with pytest.raises(SuiteError, match="does not exist"):
        load_beam(tmp_path / "nowhere")


# --- bad BEAM input: each problem named with its file and field, all of them at once

BAD = DATA / "bad_suites"
BEAM_CASES = sorted(p.name for p in BAD.iterdir() if p.name.startswith("beam_"))


def small_conversation(root: Path, name: str = "1", chat=None, questions=None, raw=None) -> Path:
    """A valid 4-message conversation (from the bad-input corpus, repaired), then edited by the callables."""
    folder = root / "T" / name
    shutil.copytree(BAD / "beam_missing_evidence_id", folder)
    (folder / "expected.txt").unlink()
    pq = folder / "probing_questions" / "probing_questions.json"
    data = json.loads(pq.read_text())
    data["knowledge_update"][0]["source_chat_ids"] = {"original_info": [2], "updated_info": [3]}
    messages = json.loads((folder / "chat.json").read_text())
    if chat:
        chat(messages)
    if questions:
        questions(data)
    pq.write_text(json.dumps(data, indent=2))
    text = json.dumps(messages, indent=2)
    (folder / "chat.json").write_text(raw(text) if raw else text)
    return folder


def message(n: int):
    """The n-th message of the small conversation's one batch (two turns of two)."""
    return lambda chat: chat[0]["turns"][n // 2][n % 2]


def test_the_small_conversation_is_valid(tmp_path):
    suite = load_beam(small_conversation(tmp_path))
    assert len(suite.memories) == 4 and len(suite.queries) == 3 and suite.notes == ()
    assert suite.qrels["T/1:knowledge_update:0"] == {"T/1:2": 1, "T/1:3": 1}
    assert suite.label_names == ("ability", "difficulty")


@pytest.mark.parametrize("case", BEAM_CASES)
def test_every_bad_beam_case_of_the_corpus_fails_in_process_with_its_message(case):
    expected = (BAD / case / "expected.txt").read_text().strip()
    with pytest.raises(SuiteError) as err:
        load_beam(BAD / case)
    assert expected in str(err.value)


def _set(pick, field, value):
    return lambda chat: pick(chat).__setitem__(field, value)


def _evidence(value):
    return lambda q: q["information_extraction"][0].__setitem__("source_chat_ids", value)


@pytest.mark.parametrize(
    "edits, expected",
    [
        (
            {"chat": _set(message(3), "content", None)},
            "chat.json: message.content: must be a string, got None",
        ),
        ({"chat": _set(message(1), "content", 42)}, "chat.json: message.content: must be a string, got 42"),
        ({"chat": _set(message(1), "role", None)}, "chat.json: message.role: must be a string, got None"),
        (
            {"chat": _set(message(1), "id", "1")},
            "chat.json: message.id: must be a message id (an integer >= 0)",
        ),
        ({"chat": _set(message(1), "id", True)}, "chat.json: message.id: must be a message id"),
        (
            {"questions": _evidence([True])},
            "source_chat_ids: must hold message ids (integers >= 0), got [True]",
        ),
        ({"questions": _evidence(["0"])}, "information_extraction[0].source_chat_ids: must hold message ids"),
        (
            {"questions": _evidence({"first_event": [1.0]})},
            "must hold message ids (integers >= 0), got [1.0]",
        ),
        ({"questions": lambda q: q.__setitem__("summarization", {"q": 1})}, "summarization: must be a list"),
        (
            {"raw": lambda t: t.replace('"id": 3', '"id": NaN')},
            "chat.json: [0].turns[1][1].id: not valid JSON: NaN is not a JSON number",
        ),
        (
            {"raw": lambda t: t.replace('"id": 3', '"id": 1e400')},
            "[0].turns[1][1].id: not valid JSON: 1e400 is too large",
        ),
        (
            {"raw": lambda t: t.replace("enough for a week", "enough \\ud800")},
            "chat.json: [0].turns[1][1].content: contains a lone surrogate U+D800",
        ),
    ],
)
def test_bad_beam_input_is_a_clear_error(tmp_path, edits, expected):
    with pytest.raises(SuiteError) as err:
        load_beam(small_conversation(tmp_path, **edits))
    assert expected in str(err.value)


def test_a_conversation_folder_name_with_whitespace_is_refused(tmp_path):
    folder = small_conversation(tmp_path, name="conv 1")
    with pytest.raises(SuiteError, match=r"conversation \(folder name\): must not contain whitespace"):
        load_beam(folder.parent)


def test_every_problem_of_every_conversation_is_reported_at_once(tmp_path):
    small_conversation(tmp_path, "1", chat=_set(message(3), "content", None))
    small_conversation(tmp_path, "2", questions=_evidence([0.0]))
    with pytest.raises(SuiteError) as err:
        load_beam(tmp_path / "T")
    assert [p.file.split("/T/")[1] for p in err.value.problems] == [
        "1/chat.json",
        "2/probing_questions/probing_questions.json",
    ]


def test_evidence_that_is_only_a_probe_marker_is_skipped_with_a_note_not_made_an_abstention(tmp_path):
    only_marker = small_conversation(tmp_path, chat=_set(message(0), "content", "->-> 1,1"))
    suite = load_beam(only_marker)
    assert "T/1:information_extraction:0" not in {q.id for q in suite.queries}  # not an abstention query
    assert any("T/1:information_extraction:0: its evidence [0] is only messages" in n for n in suite.notes)
    assert any("1 message(s) with no text" in n for n in suite.notes)
    assert suite.summary()["abstention_queries"] == 1  # only the real abstention question


def test_evidence_partly_in_a_marker_only_message_is_judged_on_the_rest_with_a_note(tmp_path):
    partly = small_conversation(tmp_path, chat=_set(message(2), "content", "   ->-> 1,2"))
    suite = load_beam(partly)
    assert suite.qrels["T/1:knowledge_update:0"] == {"T/1:3": 1}
    assert any("T/1:knowledge_update:0: evidence [2] has no text" in n for n in suite.notes)


def test_a_beam_path_that_is_a_file_says_it_is_not_a_directory(tmp_path):
    (tmp_path / "chat.json").write_text("[]")
    with pytest.raises(SuiteError) as err:
        load_beam(tmp_path / "chat.json")
    assert "is not a directory" in str(err.value) and "does not exist" not in str(err.value)


def test_an_unreadable_chat_json_is_named(tmp_path):
    folder = small_conversation(tmp_path)
    (folder / "chat.json").unlink()
    (folder / "chat.json").symlink_to(folder / "chat.json")
    with pytest.raises(
        SuiteError, match=r"chat.json: cannot read .*chat.json: Too many levels of symbolic links"
    ):
        load_beam(folder)


def test_a_beam_k_from_the_config_is_validated(tmp_path):
    with pytest.raises(SuiteError, match=r"suite config \(suite.k\): k: must be a positive integer, got 0"):
        load_beam(small_conversation(tmp_path), k=0)
