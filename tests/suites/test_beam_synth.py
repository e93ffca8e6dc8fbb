"""beam_synth writes BEAM-format conversations whose planted evidence is where the questions say it is."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from experiments.suites.beam import evidence_ids, load_beam
from experiments.suites.generators import beam_synth
from experiments.suites.generators.beam_synth import ABILITIES, ABSENT_TERMS, generate
from tests.support import BEAM_DIR, REPO

REAL = BEAM_DIR / "100K" / "1"
MARKER = re.compile(r"->->\s*\d+,\d+")


def _messages(folder: Path) -> list[dict]:
    chat = json.loads((folder / "chat.json").read_text())
    return [m for batch in chat for turn in batch["turns"] for m in turn]


def _questions(folder: Path) -> dict[str, list[dict]]:
    return json.loads((folder / "probing_questions" / "probing_questions.json").read_text())


def _all_questions(folder: Path) -> list[dict]:
    return [q for questions in _questions(folder).values() for q in questions]


def _files(folders: list[Path]) -> dict[str, bytes]:
    return {str(p.relative_to(f.parent)): p.read_bytes() for f in folders for p in sorted(f.rglob("*.json"))}


@pytest.fixture(scope="module")
def conversation(tmp_path_factory) -> Path:
    return generate(
        tmp_path_factory.mktemp("synth"),
        n_conversations=1,
        messages_per_conversation=600,
        seed=3,
        questions_per_ability=3,
    )[0]


# ------------------------------------------------------------ determinism
def test_same_seed_gives_byte_identical_files_and_another_seed_does_not(tmp_path):
    first = _files(generate(tmp_path / "a", n_conversations=2, messages_per_conversation=400, seed=7))
    again = _files(generate(tmp_path / "b", n_conversations=2, messages_per_conversation=400, seed=7))
    other = _files(generate(tmp_path / "c", n_conversations=2, messages_per_conversation=400, seed=8))
    assert len(first) == 6
    assert first == again
    assert first.keys() == other.keys()
    generated = [name for name in first if name.endswith(("chat.json", "probing_questions.json"))]
    assert all(first[name] != other[name] for name in generated)


def test_output_does_not_depend_on_the_process_hash_seed(tmp_path):
    outputs = []
    for hash_seed in ("1", "2"):
        out = tmp_path / hash_seed
        subprocess.run(
            [sys.executable, "-m", "experiments.suites.generators.beam_synth", str(out), "--messages", "300"],
            check=True,
            cwd=REPO,
            capture_output=True,
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
        )
        outputs.append(_files([out / "1"]))
    assert outputs[0] == outputs[1]


def test_conversations_of_one_run_differ_from_each_other(tmp_path):
    one, two = generate(tmp_path, n_conversations=2, messages_per_conversation=300, seed=0)
    assert (one / "chat.json").read_bytes() != (two / "chat.json").read_bytes()


# ------------------------------------------------------------ size and layout
@pytest.mark.parametrize("size", [200, 1001, 5000])
def test_message_count_is_the_requested_size(tmp_path, size):
    messages = _messages(generate(tmp_path, messages_per_conversation=size)[0])
    assert abs(len(messages) - size) <= 1
    assert [m["id"] for m in messages] == list(range(len(messages)))  # 0-based, unique, in order


def test_sessions_are_dated_on_their_first_user_message_and_move_forward(conversation):
    chat = json.loads((conversation / "chat.json").read_text())
    assert len(chat) >= 3
    anchors = []
    for number, batch in enumerate(chat, 1):
        assert list(batch) == ["batch_number", "turns", "time_anchor"] and batch["batch_number"] == number
        first = batch["turns"][0][0]
        assert first["role"] == "user" and "time_anchor" in first
        anchors.append(time.strptime(first["time_anchor"], "%B-%d-%Y"))
        assert sum("time_anchor" in m for turn in batch["turns"] for m in turn) == 1
    assert anchors == sorted(anchors) and len(set(anchors)) == len(anchors)


def test_main_user_messages_end_with_the_probe_marker_of_their_index(conversation):
    messages = _messages(conversation)
    mains = [m for m in messages if m.get("question_type") == "main_question"]
    assert len(mains) > 200
    for m in mains:
        assert m["role"] == "user"
        assert MARKER.search(m["content"])
        assert m["content"].endswith(f" ->-> {m['index']}")
    assert not any(MARKER.search(m["content"]) for m in messages if m.get("question_type") != "main_question")
    kinds = {m.get("question_type") for m in messages if m["role"] == "user"}
    assert kinds >= {"main_question", "followup_question"}


# ------------------------------------------------------------ evidence
def test_every_ability_has_the_requested_number_of_questions(conversation):
    questions = _questions(conversation)
    assert list(questions) == list(ABILITIES)
    assert all(len(qs) == 3 for qs in questions.values())


def test_every_evidence_id_exists_and_points_at_a_planted_user_statement(conversation):
    messages = {m["id"]: m for m in _messages(conversation)}
    for ability, questions in _questions(conversation).items():
        for q in questions:
            ids = evidence_ids(q.get("source_chat_ids"))
            assert (ability == "abstention") == (not ids), (ability, q["question"])
            if ability == "abstention":
                continue
            for i in ids:
                assert i in messages, (ability, i)
            users = [i for i in ids if messages[i]["role"] == "user"]
            assert users and all(messages[i]["question_type"] == "main_question" for i in users)


def test_evidence_is_referenced_by_the_ability_it_was_planted_for(conversation):
    text = {m["id"]: m["content"] for m in _messages(conversation)}
    questions = _questions(conversation)
    for q in questions["knowledge_update"]:
        src = q["source_chat_ids"]
        old = re.search(r"\(([^)]*)\) instead of", q["potential_confusion"]).group(1)
        assert old in text[src["original_info"][0]] and q["answer"] in text[src["updated_info"][0]]
        assert src["original_info"][0] < src["updated_info"][0]
    for q in questions["contradiction_resolution"]:
        never, other = re.findall(r'"([^"]*)"', q["ideal_answer"])
        src = q["source_chat_ids"]
        assert text[src["first_statement"][0]].startswith(never)
        assert text[src["second_statement"][0]].startswith(other)
    for q in questions["temporal_reasoning"]:
        src = q["source_chat_ids"]
        for key, point in zip(("first_event", "second_event"), q["time_points"], strict=True):
            assert point.split(":")[0] in text[src[key][0]]
    for q in questions["information_extraction"]:
        evidence = text[q["source_chat_ids"][0]]
        assert q["conversation_reference"].split(": ", 1)[1] in evidence
        assert set(re.findall(r"\w+", q["answer"].lower())) <= set(re.findall(r"\w+", evidence.lower()))
    for q in questions["event_ordering"] + questions["multi_session_reasoning"]:
        ids = q["source_chat_ids"]
        assert ids == sorted(ids) and len(ids) == (q.get("total_mentions") or q.get("sessions_required"))
    for q in questions["summarization"]:
        ids = q["source_chat_ids"]
        assert len(ids) % 2 == 0 and all(ids[k] + 1 == ids[k + 1] for k in range(0, len(ids), 2))
    for ability, key, table in (
        ("instruction_following", "instruction_being_tested", beam_synth._INSTRUCTIONS),
        ("preference_following", "preference_being_tested", beam_synth._PREFERENCES),
    ):
        statements = {row[3]: row[1] for row in table}
        for q in questions[ability]:
            pattern = re.escape(statements[q[key]]).replace(r"\{project\}", r"\w+")
            assert re.search(pattern, text[q["source_chat_ids"][0]]), (ability, q[key])


def test_no_two_questions_share_an_evidence_turn(conversation):
    ids = [i for q in _all_questions(conversation) for i in evidence_ids(q.get("source_chat_ids"))]
    assert len(ids) == len(set(ids))


def test_standing_instructions_come_early_and_probes_share_few_words_with_them(conversation):
    n = len(_messages(conversation))
    text = {m["id"]: m["content"] for m in _messages(conversation)}
    words = lambda s: {w for w in re.findall(r"[a-z]+", s.lower()) if len(w) > 3}  # noqa: E731
    for ability in ("instruction_following", "preference_following"):
        for q in _questions(conversation)[ability]:
            (i,) = q["source_chat_ids"]
            assert i < 0.75 * n
            statement = q.get("instruction_being_tested") or q["preference_being_tested"]
            assert len(words(q["question"]) & words(statement)) <= 1, (q["question"], statement)
            assert len(words(q["question"]) & words(text[i].split(" ->->")[0])) < len(words(q["question"]))


def test_questions_paraphrase_rather_than_copy_their_evidence(conversation):
    text = {m["id"]: m["content"].lower() for m in _messages(conversation)}

    def ngrams(s: str, n: int = 6) -> set[tuple[str, ...]]:
        tokens = re.findall(r"[a-z0-9']+", s.lower())
        return {tuple(tokens[k : k + n]) for k in range(len(tokens) - n + 1)}

    for questions in _questions(conversation).values():
        for q in questions:
            for i in evidence_ids(q.get("source_chat_ids")):
                assert not ngrams(q["question"]) & ngrams(text[i]), (q["question"], text[i][:120])


def test_abstention_topics_are_never_mentioned(conversation):
    corpus = "\n".join(m["content"].lower() for m in _messages(conversation))
    asked = [q["question"] for q in _questions(conversation)["abstention"]]
    for terms in ABSENT_TERMS:
        for term in terms:
            assert not re.search(rf"\b{re.escape(term)}", corpus), term
    assert all(any(t in q.lower() for terms in ABSENT_TERMS for t in terms) for q in asked)


def test_filler_mentions_the_same_entities_as_the_evidence(conversation):
    messages = _messages(conversation)
    evidence = {i for q in _all_questions(conversation) for i in evidence_ids(q.get("source_chat_ids"))}
    capitalised = Counter(
        w
        for m in messages
        if m["id"] not in evidence
        for w in re.findall(r"\b[A-Z][a-z]+[A-Z]?[a-z]+\b", m["content"])
    )
    planted = Counter(
        w
        for m in messages
        if m["id"] in evidence and m["role"] == "user"
        for w in re.findall(r"\b[A-Z][a-z]+[A-Z]?[a-z]+\b", m["content"])
    )
    shared = [w for w in planted if capitalised[w] >= 10]
    assert len(shared) >= 5  # project, city, person, bank ... names recur in the filler


# ------------------------------------------------------------ real BEAM shape
def _shape(source):
    if source is None:
        return None
    if isinstance(source, dict):
        return {key: type(value).__name__ for key, value in source.items()}
    return type(source).__name__


@pytest.mark.slow  # reads the real BEAM data (../shared): the slow tier's
def test_files_have_the_structure_of_real_beam(conversation):
    assert REAL.is_dir(), f"real BEAM data expected at {REAL} (set MEMEVAL_BEAM_DIR)"
    real_chat = json.loads((REAL / "chat.json").read_text())
    ours_chat = json.loads((conversation / "chat.json").read_text())
    assert type(ours_chat) is type(real_chat) is list
    assert {tuple(b) for b in ours_chat} == {tuple(b) for b in real_chat}
    real_keys = {tuple(m) for b in real_chat for t in b["turns"] for m in t}
    assert {tuple(m) for m in _messages(conversation)} <= real_keys
    assert {len(t) for b in ours_chat for t in b["turns"]} <= {len(t) for b in real_chat for t in b["turns"]}

    real_q = json.loads((REAL / "probing_questions" / "probing_questions.json").read_text())
    ours_q = _questions(conversation)
    assert list(ours_q) == list(real_q)
    for ability in real_q:
        real_key_sets = {tuple(q) for q in real_q[ability]}
        real_shapes = {json.dumps(_shape(q.get("source_chat_ids"))) for q in real_q[ability]}
        for q in ours_q[ability]:
            assert tuple(q) in real_key_sets, ability
            assert json.dumps(_shape(q.get("source_chat_ids"))) in real_shapes, ability
            for key in ("question", "difficulty", "rubric"):
                assert type(q[key]) is type(real_q[ability][0][key])
    real_topic = json.loads((REAL / "topic.json").read_text())
    ours_topic = json.loads((conversation / "topic.json").read_text())
    assert list(ours_topic) == list(real_topic)
    assert {k: type(v) for k, v in ours_topic.items()} == {k: type(v) for k, v in real_topic.items()}


# ------------------------------------------------------------ loader, CLI, limits
def test_the_beam_loader_reads_a_generated_suite_with_every_evidence_id_a_memory(tmp_path):
    folders = generate(tmp_path / "synth", n_conversations=3, messages_per_conversation=500, seed=11)
    suite = load_beam(tmp_path / "synth")
    assert len(suite.memories) == sum(len(_messages(f)) for f in folders)
    assert len(suite.queries) == 3 * len(ABILITIES) * 2
    memories = {m.id: m for m in suite.memories}
    for q in suite.queries:
        judged = suite.qrels.get(q.id, {})
        assert (q.labels["ability"] == "abstention") == (not judged)
        for memory_id in judged:
            assert memory_id in memories and memories[memory_id].scope_key == q.scope_key
    assert not any(MARKER.search(m.text) for m in suite.memories)


def test_cli_writes_the_conversations_and_says_so(tmp_path, capsys):
    assert beam_synth.main([str(tmp_path), "--conversations", "2", "--messages", "250", "--seed", "5"]) == 0
    printed = capsys.readouterr().out
    for n in ("1", "2"):
        assert (tmp_path / n / "probing_questions" / "probing_questions.json").is_file()
        assert str(tmp_path / n) in printed


def test_impossible_requests_fail_clearly(tmp_path):
    with pytest.raises(ValueError, match="questions_per_ability"):
        generate(tmp_path, questions_per_ability=beam_synth.MAX_QUESTIONS_PER_ABILITY + 1)
    with pytest.raises(ValueError, match="too short"):
        generate(tmp_path, messages_per_conversation=20)


def test_a_hundred_thousand_messages_generate_in_well_under_a_minute(tmp_path):
    start = time.process_time()  # CPU time: other jobs on a shared CI machine do not count against it
    (folder,) = generate(tmp_path, messages_per_conversation=100_000, seed=1)
    elapsed = time.process_time() - start
    assert elapsed < 30, elapsed  # ~5 s on a 2-core CI machine
    assert len(_messages(folder)) == 100_000
