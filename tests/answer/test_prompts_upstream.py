"""Acceptance check 3 of issue 43: the answerer's prompts under protocol=official are upstream's, byte for
byte.

LoCoMo: for seeded "retrieved" turns of every question of conversations 1-5, memeval's prompt from the
loader's memories equals the one upstream's evaluate_gpts.py (RAG dialog mode;
tests/upstream/locomo_answer.py) builds for the same dia_ids: context lines, QA_PROMPT, the category-2
suffix, category 5's two options in the order memeval drew. LongMemEval: the prompt equals
run_generation.py's prepare_prompt (flat-turn, json, con) on the fixtures' retrieved turns. BEAM's rubric
prompt: tests/answer/test_llm_judges.py."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from types import MappingProxyType, SimpleNamespace

import pytest

from experiments.answer.prompts import (
    LOCOMO_NOT_MENTIONED,
    answer_messages,
    check_template,
    locomo_cat5_answer,
    locomo_cat5_options,
    with_raw_texts,
)
from experiments.suites.locomo import load_locomo, raw_texts
from experiments.suites.longmemeval import load_longmemeval
from tests.support import DATA
from tests.upstream import locomo_answer as locomo_up
from tests.upstream import longmemeval_answer as lme_up


class FixedDraw:
    """Upstream draws category 5's option order with random.random(); this gives the order memeval drew."""

    def __init__(self, not_mentioned_first: bool):
        self.value = 0.0 if not_mentioned_first else 0.9

    def random(self) -> float:
        return self.value


def build_locomo_cases(path) -> list[tuple]:
    """(upstream prompt, memeval's prompt given the raw turn and question texts, memeval's prompt from today's
    loader, whether today's loader has them: no retrieved turn with an image or surrounding spaces and no
    question with surrounding spaces; the loaded query, memories and distractor) for every question, with
    1-10 seeded retrieved turns of its conversation."""
    raw = {s["sample_id"]: s for s in json.loads(path.read_text("utf-8"))}
    suite = load_locomo(path)
    by_id = {m.id: m for m in suite.memories}
    rng, out = random.Random(3), []
    for query in suite.queries:
        sid, j = query.id.rsplit(":q", 1)
        sample, qa = raw[sid], dict(raw[sid]["qa"][int(j)])
        conversation = {  # upstream reads `clean_text`; the released file names it `text`
            k: [{**t, "clean_text": t["text"]} for t in v] if isinstance(v, list) else v
            for k, v in sample["conversation"].items()
        }
        database = locomo_up.dialog_database(conversation)
        order = rng.sample(range(len(database["dia_id"])), rng.randint(1, min(10, len(database["dia_id"]))))
        args = SimpleNamespace(top_k=len(order), rag_mode="dialog")
        context, ids = locomo_up.rag_context(database, order, args)
        if qa["category"] == 5:
            qa["answer"] = qa["adversarial_answer"]  # locomo PR #41
        options = locomo_cat5_options(query, 7, qa.get("adversarial_answer")) if qa["category"] == 5 else {}
        expected, answer_key = locomo_up.question_and_prompt(
            qa, context, rng=FixedDraw(options.get("a") == LOCOMO_NOT_MENTIONED)
        )
        assert answer_key in (None, options)
        memories = [by_id[f"{sid}:{d}"] for d in ids]
        turns = {t["dia_id"]: t for v in sample["conversation"].values() if isinstance(v, list) for t in v}
        with_text = [
            replace(m, metadata=MappingProxyType({**m.metadata, "text": turns[m.metadata["dia_id"]]["text"]}))
            for m in memories
        ]
        kwargs = {
            "benchmark": "locomo",
            "protocol": "official",
            "seed": 7,
            "adversarial": qa.get("adversarial_answer"),
        }
        plain = {t["text"] == t["text"].strip() and "blip_caption" not in t for t in (turns[d] for d in ids)}
        out.append(
            (
                expected,
                answer_messages(replace(query, text=qa["question"]), with_text, **kwargs),
                answer_messages(query, memories, **kwargs),
                plain == {True} and qa["question"] == qa["question"].strip(),
                (query, memories, qa.get("adversarial_answer")),
            )
        )
    return out


@pytest.fixture(scope="module")
def locomo_cases(locomo_file):
    return build_locomo_cases(locomo_file)


def test_locomo_rag_prompt_is_upstreams_on_the_committed_fixture():
    """The fast tier's version, on tests/data/locomo/locomo_fixture.json (all five categories)."""
    cases = build_locomo_cases(DATA / "locomo" / "locomo_fixture.json")
    assert len(cases) == 6
    for expected, messages, *_ in cases:
        assert messages == [{"role": "user", "content": expected}]


def test_locomo_rag_prompt_is_upstreams_for_every_question(locomo_cases):
    assert len(locomo_cases) > 900
    for expected, messages, *_ in locomo_cases:
        assert messages == [{"role": "user", "content": expected}]


def test_locomo_prompt_from_the_loaded_suite_is_upstreams_with_the_files_raw_texts(locomo_cases, locomo_file):
    """The loader keeps a turn's text (and a question) stripped, and a turn's image caption appended to its
    text; the answer stage reads the file's raw texts (`raw_texts`, what a run under `official` does), and
    then every question's prompt from the loaded suite's memories is upstream's, byte for byte."""
    raw = raw_texts(locomo_file)
    kwargs = {"benchmark": "locomo", "protocol": "official", "seed": 7}
    assert any(not plain for _, _, _, plain, _ in locomo_cases)  # the raw texts matter: some turns differ
    for expected, _, _, _, (query, memories, adversarial) in locomo_cases:
        messages = answer_messages(*with_raw_texts(query, memories, raw), adversarial=adversarial, **kwargs)
        assert messages == [{"role": "user", "content": expected}], query.id


def test_category_5_option_order_comes_from_the_seed(locomo_file):
    suite = load_locomo(locomo_file)
    adversarial = [q for q in suite.queries if q.labels["category"] == "adversarial"]
    first = [locomo_cat5_options(q, 7, "x")["a"] == LOCOMO_NOT_MENTIONED for q in adversarial]
    assert first == [locomo_cat5_options(q, 7, "x")["a"] == LOCOMO_NOT_MENTIONED for q in adversarial]
    assert 0.3 < sum(first) / len(first) < 0.7  # both orders occur
    assert first != [locomo_cat5_options(q, 8, "x")["a"] == LOCOMO_NOT_MENTIONED for q in adversarial]


def test_category_5_reply_maps_as_upstreams_get_cat_5_answer():
    options = {"a": "self-care", "b": LOCOMO_NOT_MENTIONED}
    for reply in ("a", "B", "(a)", "(b)", " (A) ", "Not mentioned in the conversation", "b) x", "ab"):
        assert locomo_cat5_answer(reply, options) == locomo_up.get_cat_5_answer(reply, options)


class WordTokenizer:
    """prepare_prompt truncates the history with the reader's tokenizer; these prompts are far below it."""

    def encode(self, text, allowed_special=None):
        return text.split()


def _longmemeval_prompt(entry: dict, corpus_ids: list[str]) -> str:
    entry = json.loads(json.dumps(entry))  # prepare_prompt pops has_answer from the turns it reads
    entry["retrieval_results"] = {"ranked_items": [{"corpus_id": c} for c in corpus_ids]}
    return lme_up.prepare_prompt(
        entry, "flat-turn", len(corpus_ids), False, "json", True, WordTokenizer(), "openai", 10**9, "none"
    )


@pytest.mark.parametrize("name", ["longmemeval_fixture.json", "longmemeval_official_edges.json"])
def test_longmemeval_prompt_is_run_generations_for_a_sessions_last_turns(name):
    """Upstream expands a retrieved turn into its round (the turn and the next one); a session's last turn
    has no next one, so there the two prompts must be byte-identical."""
    path = DATA / "longmemeval" / name
    suite = load_longmemeval(path, roles="all", protocol="memeval")
    by_id = {m.id: m for m in suite.memories}
    checked = 0
    for entry in json.loads(path.read_text("utf-8")):
        query = next((q for q in suite.queries if q.id == entry["question_id"]), None)
        if query is None:
            continue
        last = [
            f"{sid}_{len(session)}"
            for sid, session in zip(entry["haystack_session_ids"], entry["haystack_sessions"], strict=True)
            if f"{entry['question_id']}:{sid}_{len(session)}" in by_id
        ][::-1]  # ranked in reverse, so the date sort has something to do
        memories = [by_id[f"{entry['question_id']}:{c}"] for c in last]
        messages = answer_messages(query, memories, benchmark="longmemeval", protocol="official", seed=0)
        assert messages == [{"role": "user", "content": _longmemeval_prompt(entry, last)}]
        checked += 1
    assert checked >= 4


def test_longmemeval_prompt_lacks_only_the_reply_upstream_appends_to_a_user_turn():
    path = DATA / "longmemeval" / "longmemeval_fixture.json"
    entry = json.loads(path.read_text("utf-8"))[0]
    suite = load_longmemeval(path, roles="all", protocol="memeval")
    sid = entry["haystack_session_ids"][0]
    memory = next(m for m in suite.memories if m.id == f"{entry['question_id']}:{sid}_1")
    query = next(q for q in suite.queries if q.id == entry["question_id"])
    ours = answer_messages(query, [memory], benchmark="longmemeval", protocol="official", seed=0)[0][
        "content"
    ]
    reply = {k: v for k, v in entry["haystack_sessions"][0][1].items() if k != "has_answer"}
    theirs = _longmemeval_prompt(entry, [f"{sid}_1"])
    assert ours != theirs
    assert ours.replace("}]", "}, " + json.dumps(reply) + "]", 1) == theirs


def test_other_suites_take_a_template_and_unknown_placeholders_are_refused(tiny):
    query, memories = tiny.queries[0], list(tiny.memories[:2])
    messages = answer_messages(
        query, memories, benchmark="beam", protocol="memeval", seed=0, template="Q: {question}\n{context}"
    )
    assert messages[0]["content"].startswith(f"Q: {query.text}\n")
    assert memories[1].text in messages[0]["content"]
    with pytest.raises(ValueError, match=r"answer.template: unknown placeholder\(s\) \{answer\}"):
        check_template("{question} {answer}")
    with pytest.raises(ValueError, match="answer.template"):
        check_template("{question")
