"""Acceptance check 2 of issue 43 (LongMemEval's judge, exactly) and the other LLM prompt sets against
upstream's vendored code: the prompt memeval sends is upstream's, byte for byte, and each reply is read as
upstream reads it; a reply that cannot be read is `unparsed`, with its raw text, never a verdict. The
`chat` here is a recorder that answers with fixed replies: what is under test is the prompt and the parse,
not a model.
"""

from __future__ import annotations

import json
import random
import warnings

import numpy as np
import pytest

from experiments.answer.aggregates import upstream_aggregates
from experiments.answer.judges import find_judge, judge_names
from experiments.answer.types import AnswerItem, Verdict
from tests.support import DATA
from tests.upstream import beam_judge as beam_up
from tests.upstream import longmemeval_answer as lme_up
from tests.upstream import mem0_judge as mem0_up

REPLIES = ("Yes.", "yes", "no", "No.", "eyes", "YES", " yes ", "", "The correct answer is no.", "No, yes",
           "I cannot tell", "Yes, the response is correct.", "nO", "yes\n", "noyes", "Y")  # fmt: skip


class Recorder:
    """A chat that records what it is sent and answers with the given replies in turn."""

    def __init__(self, *replies: str):
        self.replies, self.sent = list(replies), []

    def __call__(self, messages, params):
        self.sent.append((list(messages), dict(params)))
        return self.replies[(len(self.sent) - 1) % len(self.replies)]


def lme_items(name: str, response: str = "It was Max.") -> list[tuple[dict, AnswerItem]]:
    entries = json.loads((DATA / "longmemeval" / name).read_text("utf-8"))
    return [
        (
            e,
            AnswerItem(
                query_id=e["question_id"],
                question=e["question"],
                answer=response,
                gold=str(e["answer"]),
                labels={"question_type": e["question_type"]},
            ),
        )
        for e in entries
    ]


def test_the_judges_are_found_by_name():
    assert set(judge_names()) == {"lexical", "llm", "longmemeval", "mem0", "beam", "strict"}
    with pytest.raises(KeyError, match="unknown judge 'gpt' .*known: beam, lexical"):
        find_judge("gpt")
    with pytest.raises(KeyError, match="unknown prompt set 'nope'"):
        find_judge("llm")(prompt_set="nope")
    assert find_judge("llm")(prompt_set="longmemeval").columns() == ("answer.llm_longmemeval.correct",)
    assert find_judge("lexical")(concurrency=4).columns() == (
        "answer.lexical.f1",
        "answer.lexical.exact_match",
    )
    with pytest.raises(ValueError, match=r"unknown option\(s\) for the lexical judge: \['temperature'\]"):
        find_judge("lexical")(temperature=0)
    with pytest.raises(ValueError, match="judge 'mem0' uses prompt set 'mem0', got 'beam'"):
        find_judge("mem0")(prompt_set="beam")


@pytest.mark.parametrize("name", ["longmemeval_fixture.json", "longmemeval_official_edges.json"])
def test_longmemeval_prompt_is_get_anscheck_prompts_for_every_question(name):
    pairs = lme_items(name)
    chat = Recorder("yes")
    find_judge("longmemeval")(protocol="official").judge([item for _, item in pairs], chat)
    assert len(chat.sent) == len(pairs)
    for (entry, _), (messages, params) in zip(pairs, chat.sent, strict=True):
        expected = lme_up.get_anscheck_prompt(
            entry["question_type"],
            entry["question"],
            entry["answer"],
            "It was Max.",
            "_abs" in entry["question_id"],
        )
        assert messages == [{"role": "user", "content": expected}]
        assert {k: params[k] for k in ("temperature", "max_tokens")} == {
            k: lme_up.JUDGE_KWARGS[k] for k in ("temperature", "max_tokens")
        }
    assert any("_abs" in e["question_id"] for e, _ in pairs)


def test_every_question_type_and_abstention_prompt_is_upstreams():
    types = ("single-session-user", "single-session-assistant", "multi-session", "temporal-reasoning",
             "knowledge-update", "single-session-preference")  # fmt: skip
    for kind in types:
        for qid in ("q1", "q1_abs", "q_abs_2"):
            item = AnswerItem(qid, "Q {0}?", "R {}", gold="G", labels={"question_type": kind})
            chat = Recorder("no")
            find_judge("longmemeval")().judge([item], chat)
            expected = lme_up.get_anscheck_prompt(kind, "Q {0}?", "G", "R {}", abstention="_abs" in qid)
            assert chat.sent[0][0][0]["content"] == expected


def test_longmemeval_reply_parse_is_yes_in_reply_lower():
    item = lme_items("longmemeval_fixture.json")[0][1]
    judge = find_judge("longmemeval")(protocol="official")
    verdicts = judge.judge([item] * len(REPLIES), Recorder(*REPLIES))
    for reply, verdict in zip(REPLIES, verdicts, strict=True):
        assert verdict.score == float(lme_up.parse_label(reply)), reply
        assert not verdict.unparsed and verdict.raw == (reply,)
    plain = [v.extra["plain_label"] for v in verdicts]
    assert 0 < sum(plain) < len(plain)  # the run can say how many replies were not a plain yes/no
    # memeval's protocol: only a plain yes/no is a verdict
    strict = find_judge("longmemeval")(protocol="memeval").judge([item] * len(REPLIES), Recorder(*REPLIES))
    for reply, verdict in zip(REPLIES, strict, strict=True):
        word = reply.strip().lower().rstrip(".").strip()
        assert verdict.unparsed == (word not in ("yes", "no")), reply
        assert verdict.score == (None if verdict.unparsed else float(word == "yes"))


def _print_qa_metrics_case(seed: int) -> tuple[list[dict], list[AnswerItem], list[Verdict], list[dict]]:
    rng = random.Random(seed)
    types = list(lme_up_types())
    refs, hyps, items, verdicts = [], [], [], []
    for i in range(90):
        kind = types[i % len(types)] if seed else rng.choice(types[:4])
        qid = f"q{i}" + ("_abs" if rng.random() < 0.2 else "")
        label = rng.random() < 0.6
        refs.append({"question_id": qid, "question_type": kind})
        hyps.append({"question_id": qid, "autoeval_label": {"model": "gpt-4o-2024-08-06", "label": label}})
        items.append(AnswerItem(qid, "q", "a", gold="g", labels={"question_type": kind}))
        verdicts.append(Verdict(score=float(label)))
    return hyps, items, verdicts, refs


def lme_up_types():
    return ("single-session-user", "single-session-preference", "single-session-assistant", "multi-session",
            "temporal-reasoning", "knowledge-update")  # fmt: skip


@pytest.mark.parametrize("seed", [1, 2, 0])  # seed 0: two types without a question (upstream prints nan)
def test_the_three_printed_accuracies_are_print_qa_metrics(seed):
    hyps, items, verdicts, refs = _print_qa_metrics_case(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # upstream's np.mean of an empty type
        printed = lme_up.print_qa_metrics(hyps, refs)
    found = {line[0]: line[1] for line in printed if len(line) >= 2 and isinstance(line[0], str)}
    ours = upstream_aggregates("longmemeval", items, {"longmemeval": verdicts})["longmemeval"]["printed"]
    for key, label in (("task_averaged", "\nTask-averaged Accuracy:"), ("overall", "Overall Accuracy:"),
                       ("abstention", "Abstention Accuracy:")):  # fmt: skip
        theirs = found[label]
        assert (ours[key] is None and np.isnan(theirs)) if ours[key] is None else ours[key] == theirs, key


def test_mem0_prompt_and_parse_are_upstreams():
    item = AnswerItem("conv-1:q2", "When did {x} go?", "On 7 May", gold="7 May 2023")
    replies = ('{"label": "CORRECT"}', '```json\n{"label": "WRONG"}\n```', 'So: {"label": "CORRECT"}',
               '{"label": "correct"}', "CORRECT", '{"verdict": "CORRECT"}', '{"label": "MAYBE"}')  # fmt: skip
    for protocol in ("official", "memeval"):
        chat = Recorder(*replies)
        verdicts = find_judge("mem0")(protocol=protocol).judge([item] * len(replies), chat)
        expected = mem0_up.ACCURACY_PROMPT.format(
            question=item.question, gold_answer=item.gold, generated_answer=item.answer
        )
        assert all(m == [{"role": "user", "content": expected}] for m, _ in chat.sent)
        for reply, verdict in zip(replies, verdicts, strict=True):
            try:
                upstream = mem0_up.parse_label(reply)
            except (ValueError, KeyError):
                assert verdict.unparsed and verdict.score is None and verdict.raw == (reply,)
                continue
            if protocol == "memeval" and json.loads(mem0_up.extract_json(reply))["label"] not in (
                "CORRECT",
                "WRONG",
            ):
                assert verdict.unparsed
            else:
                assert verdict.score == upstream and not verdict.unparsed


BEAM_REPLIES = ('{"score": 1.0, "reason": "ok"}', '{"score": 0.5, "reason": "partly"}',
                '```json\n{"score": 0.0, "reason": "no"}\n```', 'Here: {"score": 0.5} done')  # fmt: skip


@pytest.mark.parametrize("ability", ["information_extraction", "event_ordering"])
def test_beam_official_is_upstreams_prompt_and_score_defects_included(ability):
    rubric = ("LLM response should state: 42", "LLM response should not mention Paris")
    item = AnswerItem("c1:q1", "What is the answer?", "It is 42.", gold="42", rubric=rubric,
                      labels={"ability": ability})  # fmt: skip
    for start in range(len(BEAM_REPLIES) - 1):
        replies = BEAM_REPLIES[start : start + 2]
        chat, upstream = Recorder(*replies), Recorder(*replies)

        def model(prompt, upstream=upstream):
            return upstream([{"role": "user", "content": prompt}], {})

        if ability == "event_ordering":
            expected = beam_up.event_ordering_judge(list(rubric), item.answer, model)
        else:
            expected = beam_up.evaluate_abstention(list(rubric), item.answer, item.question, model)[
                "llm_judge_score"
            ]
        verdict = find_judge("beam")(protocol="official").judge([item], chat)[0]
        assert chat.sent == upstream.sent
        assert "<question>" in upstream.sent[0][0][0]["content"]  # upstream never fills it
        assert verdict.score == expected


def test_beam_memeval_differs_from_official_only_by_the_filled_question():
    item = AnswerItem("c1:q1", "Which city?", "Lisbon <question>", gold="Lisbon", rubric=("states Lisbon",),
                      labels={"ability": "knowledge_update"})  # fmt: skip
    official, memeval = Recorder('{"score": 0.5}'), Recorder('{"score": 0.5}')
    assert find_judge("beam")(protocol="official").judge([item], official)[0].score == 0.0  # int(0.5)
    assert find_judge("beam")(protocol="memeval").judge([item], memeval)[0].score == 0.5
    ours, theirs = memeval.sent[0][0][0]["content"], official.sent[0][0][0]["content"]
    assert ours != theirs
    assert ours == theirs.replace("<question>", "Which city?", 1)  # the template's one placeholder
    assert "Lisbon <question>" in ours  # the answer's own text is left as it is


def test_an_unreadable_reply_is_unparsed_with_its_raw_text_never_a_verdict():
    item = AnswerItem("c1:q1", "Q?", "A", gold="G", rubric=("r1", "r2"), labels={"ability": "summarization"})
    verdict = find_judge("beam")().judge([item], Recorder('{"score": 1}', "I think it is fine"))[0]
    assert verdict.unparsed and verdict.score is None
    assert verdict.raw == ('{"score": 1}', "I think it is fine")
    strict = find_judge("strict")().judge([item, item], Recorder("CORRECT.", "Probably correct"))
    assert strict[0].score == 1.0 and strict[1].unparsed and strict[1].raw == ("Probably correct",)


def test_an_llm_judge_refuses_bad_input_before_any_call():
    chat = Recorder("yes")
    good = AnswerItem("q1", "Q?", "A", gold="G", labels={"question_type": "multi-session"})
    bad = AnswerItem("q2", "Q?", "A", gold="G", labels={"question_type": "trivia"})
    with pytest.raises(ValueError, match="trivia"):
        find_judge("longmemeval")().judge([good, bad], chat)
    with pytest.raises(ValueError, match="q3: the beam prompt set needs a rubric"):
        find_judge("beam")().judge([AnswerItem("q3", "Q?", "A")], chat)
    with pytest.raises(ValueError, match="q4: the mem0 prompt set needs a gold answer"):
        find_judge("mem0")().judge([AnswerItem("q4", "Q?", "A")], chat)
    assert chat.sent == []
    with pytest.raises(ValueError, match="protocol must be one of official, memeval"):
        find_judge("mem0")(protocol="upstream")


def test_concurrent_judging_keeps_the_items_order():
    items = [AnswerItem(f"q{i}", "Q?", f"A{i}", gold="G") for i in range(20)]

    def chat(messages, params):
        return "CORRECT" if "A1" in messages[0]["content"] else "INCORRECT"

    verdicts = find_judge("strict")(concurrency=4).judge(items, chat)
    assert [v.score for v in verdicts] == [float("A1" in it.answer) for it in items]
