"""Synthetic BEAM: deterministic BEAM-format conversations of any size, with planted evidence.

What it models. BEAM (Tavakoli et al., 2025) probes an assistant's long-term memory with ten abilities
over long user/assistant chats. This module writes conversations in BEAM's own folder layout, with the
same keys, key order and evidence shapes as the real files, so the `beam` suite loader
(`experiments.suites.beam.load_beam`) reads them unchanged:

    OUT/<n>/chat.json                                  batches (sessions) of turns of messages
    OUT/<n>/probing_questions/probing_questions.json   {ability: [question, ...]} for the ten abilities
    OUT/<n>/topic.json                                 id, category, title, theme, subtopics

Each conversation belongs to one persona with a cast of entities (two software projects, a web
framework and a database, a bank and an index fund, two cities, a sport, a doctor, a book and its hero).
Filler turns come from templates over five topics (coding, finance, travel, health, writing) filled with
that same cast and with random numbers, so lexical and dense retrieval meet many near misses (the cast,
the filler templates and the planted facts are data, in beam_synth.yaml beside this module). Among
them sit planted user messages, the evidence of the probing questions:
- instruction_following / preference_following: a standing instruction or preference stated once, in
  the first 60% of the chat, probed by a task that shares almost no words with it (the EXP-05 case:
  "From now on, always include type hints ..." vs "Can you show me how to parse a CSV export?").
  Some instructions use the narrow marker words (always, never, from now on ...), some only the wider
  ones (do not, prefer, I'd like you to) and some none, so tagging coverage is worth measuring; filler
  also says "always"/"never" without instructing, so tagging precision is too.
- knowledge_update: a value stated, then changed in a later session; the question asks for the current one.
- contradiction_resolution: a "never" statement and a later or earlier message that contradicts it.
- temporal_reasoning: two dated events in different sessions; the question asks the time between them.
- event_ordering / summarization: a thread of 3-4 steps spread over the chat, asked in order / summarised
  (summarization evidence includes the assistant replies, as in BEAM).
- multi_session_reasoning: facts in different sessions that must be combined (a sum, a count, a list).
- information_extraction: one stated detail asked back.
- abstention: questions about things no message mentions (`ABSENT_TERMS` lists the words that prove it).
Questions paraphrase their evidence; they never copy its sentences.

Layout follows the real data: every turn's first user message is a `main_question` with index "b,k"
and ends with the probe marker ` ->-> b,k`; follow-ups carry `followup_question`/`answer_ai_question`;
the first user message of each batch carries the session's `time_anchor` ("March-15-2024"); sessions
are a few days apart, and dated evidence refers to its session's date. Message ids are 0-based and
unique per conversation; a batch holds about 80 messages (as in BEAM 500K).

Limits, said plainly: at most `MAX_QUESTIONS_PER_ABILITY` (4) questions per ability and conversation
(each kind of planted fact is used once); a conversation must have enough turns for the evidence
(a few dozen; 200 messages hold 4 per ability). Messages are shorter than BEAM's (about 180 characters
for users and 820 for the assistant, against roughly 700-1,150 and 4,000), which keeps 100,000
messages at ~60 MB.

Deterministic: every draw comes from a `random.Random` seeded from (seed, conversation number), and
the files are written in a fixed key order, so the same arguments give byte-identical files. Batches
are written one at a time, so 100,000 messages need little memory.

CLI: python -m experiments.suites.generators.beam_synth OUT --conversations 3 --messages 1000 --seed 0
"""

from __future__ import annotations

import argparse
import bisect
import datetime as dt
import itertools
import json
import math
import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from experiments.suites.beam import ABILITIES


def _frozen(value: Any) -> Any:
    """YAML lists as tuples, all the way down: the tables are shared by every conversation, read-only."""
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return {k: _frozen(v) for k, v in value.items()}
    return value


# The template data (cast, filler sentences, planted facts) lives beside this module, read once on import.
_DATA = _frozen(yaml.load(Path(__file__).with_name("beam_synth.yaml").read_text("utf-8"), yaml.CSafeLoader))


def _rows(table: str, fields: str) -> tuple[tuple, ...]:
    """A beam_synth.yaml table as tuples in `fields` order, the order its planter unpacks them.
    A row may leave out trailing fields (an instruction's acknowledgement), not others."""
    names, rows = fields.split(), []
    for row in _DATA[table]:
        present = [name for name in names if name in row]
        if present != names[: len(present)]:
            raise ValueError(f"beam_synth.yaml: a row of {table} lacks {names[len(present)]!r}: {row}")
        rows.append(tuple(row[name] for name in present))
    return tuple(rows)


TOPICS = ("coding", "finance", "travel", "health", "writing")
MESSAGES_PER_BATCH = 80

# ---------------------------------------------------------------------------------------------- cast
_NAMES = _DATA["cast"]["names"]
_PROJECTS = _DATA["cast"]["projects"]
_WEB = _DATA["cast"]["web"]
_DATABASES = _DATA["cast"]["databases"]
_MODULES = _DATA["cast"]["modules"]
_BANKS = _DATA["cast"]["banks"]
_FUNDS = _DATA["cast"]["funds"]
_STOCKS = _DATA["cast"]["stocks"]
_PLACES = _DATA["cast"]["places"]
_SPORTS = _DATA["cast"]["sports"]
_DOCTORS = _DATA["cast"]["doctors"]
_TITLES = _DATA["cast"]["titles"]
_CHARACTERS = _DATA["cast"]["characters"]
_PROFESSIONS = _DATA["cast"]["professions"]
_COLLEAGUES = _DATA["cast"]["colleagues"]
_GUESTHOUSES = _DATA["cast"]["guesthouses"]
_MONTHS = _DATA["cast"]["months"]


def _cast(rng: random.Random) -> dict[str, str]:
    (city, country), (city2, country2) = rng.sample(_PLACES, 2)
    project, project2 = rng.sample(_PROJECTS, 2)
    module, module2 = rng.sample(_MODULES, 2)
    return {
        "name": rng.choice(_NAMES),
        "project": project,
        "project2": project2,
        "lib": rng.choice(_WEB),
        "db": rng.choice(_DATABASES),
        "module": module,
        "module2": module2,
        "bank": rng.choice(_BANKS),
        "ticker": rng.choice(_FUNDS),
        "stock": rng.choice(_STOCKS),
        "city": city,
        "country": country,
        "city2": city2,
        "country2": country2,
        "sport": rng.choice(_SPORTS),
        "doctor": rng.choice(_DOCTORS),
        "title": rng.choice(_TITLES),
        "character": rng.choice(_CHARACTERS),
        "profession": rng.choice(_PROFESSIONS),
        "colleague": rng.choice(_COLLEAGUES),
        "guesthouse": rng.choice(_GUESTHOUSES),
        "pyver": rng.choice(("3.10", "3.11", "3.12")),
    }


def _numbers(rng: random.Random) -> dict[str, Any]:
    """Fresh numbers for one filler turn (so no two filler messages are the same)."""
    r = rng.randint
    return {
        "n": r(3, 60),
        "port": rng.choice((3000, 5000, 8000, 8080, 8443)),
        "ms": r(80, 900),
        "rows": r(10, 900) * 1000,
        "income": r(56, 180) * 50,
        "rate": f"{r(15, 52) / 10:.1f}",
        "pct": r(2, 35),
        "debt": r(20, 180) * 100,
        "sub": r(25, 140),
        "fee": r(5, 60),
        "goal": r(10, 80) * 100,
        "bonus": r(10, 90) * 100,
        "days": r(3, 12),
        "month": rng.choice(_MONTHS),
        "mins": r(10, 45),
        "hours": r(5, 8),
        "km": r(8, 30),
        "bpm": r(48, 75),
        "ch": r(2, 30),
        "words": r(30, 110) * 1000,
        "amount": r(20, 150) * 100,
        "step": r(1, 3),
        "premium": r(80, 260) * 5,
    }


# ---------------------------------------------------------------------------------------------- filler
_ASKS = _DATA["asks"]
_DETAILS = _DATA["details"]
_CONTEXT = _DATA["context"]
_HEADINGS = _DATA["headings"]
_REPLY_SENTENCES = _DATA["reply_sentences"]
_STEPS = _DATA["steps"]
_FOLLOWUPS = _DATA["followups"]
_USER_OPENERS = _DATA["user_openers"]
_REPLY_OPENERS = _DATA["reply_openers"]
_REPLY_CLOSERS = _DATA["reply_closers"]
_SNIPPETS = _DATA["snippets"]


def _filler_user(rng: random.Random, topic: str, values: dict[str, Any]) -> str:
    text = rng.choice(_USER_OPENERS)
    if rng.random() < 0.7:
        text += " ".join(rng.sample(_CONTEXT[topic], rng.randint(1, 2))) + " "
    text += rng.choice(_ASKS[topic])
    if rng.random() < 0.5:
        text += " " + rng.choice(_DETAILS[topic])
    if topic == "coding" and rng.random() < 0.3:
        text += " Here's what I have so far:\n" + rng.choice(_SNIPPETS)
    return text.format_map(values)


def _filler_reply(rng: random.Random, topic: str, values: dict[str, Any]) -> str:
    sentences = rng.sample(_REPLY_SENTENCES[topic], rng.randint(6, 9))
    headings = rng.sample(_HEADINGS, 2)
    parts = [rng.choice(_REPLY_OPENERS), headings[0] + "\n" + " ".join(sentences[:3])]
    if rng.random() < 0.6:
        steps = rng.sample(_STEPS[topic], rng.randint(3, 5))
        parts.append("Here's a plan:\n" + "\n".join(f"{i}. {s}" for i, s in enumerate(steps, 1)))
    if topic == "coding" and rng.random() < 0.4:
        parts.append("For example:\n" + rng.choice(_SNIPPETS))
    parts.append(headings[1] + "\n" + " ".join(sentences[3:]) + " " + rng.choice(_REPLY_CLOSERS))
    return "\n\n".join(parts).format_map(values)


# ---------------------------------------------------------------------------------------------- plants
@dataclass(frozen=True)
class Plant:
    """A probing question with its evidence turns: user texts in conversation order, their replies,
    and a builder that turns the user message ids into the question record."""

    ability: str
    user_texts: tuple[str, ...]
    reply_texts: tuple[str, ...]
    question: Callable[[list[int]], dict[str, Any]]


def _day(d: dt.date) -> str:
    return f"{d:%B} {d.day}, {d.year}"


def _refs(ids: list[int]) -> list[str]:
    return [f"chat_id: {i}" for i in ids]


def _state(text: str) -> str:
    return f"LLM response should state: {text}"


_INSTRUCTIONS = _rows(
    "instructions", "topic statement probe tested compliance indicators violations type acknowledgement"
)
_PREFERENCES = _rows("preferences", "topic statement probe tested compliance indicators violations type")


def _standing_rule(rng: random.Random, cast: dict, row: tuple, ability: str) -> Plant:
    topic, statement, probe, tested, compliance, indicators, violations, kind = row[:8]
    values = {**cast, **_numbers(rng)}
    statement, probe = statement.format_map(values), probe.format_map(values)
    lead = rng.choice(("", "", "Before we go on, one thing. ", "Small request for later. "))
    user = lead + statement + ("" if rng.random() < 0.4 else " " + _filler_user(rng, topic, values))
    ack = row[8] if len(row) > 8 else "Thanks, I'll keep that in mind."
    reply = ack + "\n\n" + _filler_reply(rng, topic, values)
    test_key = "instruction_being_tested" if ability == "instruction_following" else "preference_being_tested"
    type_key = "instruction_type" if ability == "instruction_following" else "preference_type"

    def question(ids: list[int]) -> dict[str, Any]:
        return {
            "question": probe,
            test_key: tested,
            "expected_compliance": compliance,
            "compliance_indicators": indicators,
            "non_compliance_signs": violations,
            "difficulty": "medium",
            type_key: kind,
            "source_chat_ids": ids,
            "rubric": [f"LLM response should contain: {i}" for i in indicators],
        }

    return Plant(ability, (user,), (reply,), question)


def _money(old_lo: int, old_hi: int, step: int, up: tuple[int, int]) -> Callable:
    def gen(rng: random.Random, d1: dt.date, d2: dt.date) -> tuple[str, str]:
        old = rng.randint(old_lo, old_hi) * step
        return f"${old:,}", f"${old + rng.randint(*up) * step:,}"

    return gen


def _count(lo: int, hi: int, delta: tuple[int, int], fmt: str = "{:,}") -> Callable:
    def gen(rng: random.Random, d1: dt.date, d2: dt.date) -> tuple[str, str]:
        old = rng.randint(lo, hi)
        return fmt.format(old), fmt.format(old + rng.randint(*delta))

    return gen


def _later_dates(rng: random.Random, d1: dt.date, d2: dt.date) -> tuple[str, str]:
    old = d2 + dt.timedelta(days=rng.randint(10, 30))
    return _day(old), _day(old + dt.timedelta(days=rng.randint(3, 21)))


# knowledge_update's old and new value, by the update's `what` in beam_synth.yaml
_UPDATE_VALUES = {
    "monthly rent": _money(24, 52, 50, (1, 6)),
    "API response time": lambda rng, a, b: (f"{rng.randint(40, 90) * 10}ms", f"{rng.randint(9, 35) * 10}ms"),
    "departure date": _later_dates,
    "weekly distance": _count(12, 25, (4, 15), "{} km"),
    "word count": _count(20_000, 45_000, (8_000, 30_000)),
    "savings target": _money(50, 120, 100, (10, 60)),
    "team size": _count(3, 7, (1, 4)),
    "resting heart rate": lambda rng, a, b: (str(rng.randint(66, 78)), str(rng.randint(52, 63))),
    "trip budget": _money(12, 30, 100, (3, 15)),
    "application deadline": _later_dates,
}
_UPDATES = tuple(
    (*row, _UPDATE_VALUES[row[-1]])
    for row in _rows("updates", "topic original update question update_type what")
)


def _knowledge_update(rng: random.Random, cast: dict, row: tuple, dates: list[dt.date]) -> Plant:
    topic, original, update, ask, update_type, what, gen = row
    old, new = gen(rng, dates[0], dates[1])
    values = {**cast, **_numbers(rng)}
    texts = tuple(
        (t.format_map({**cast, "old": old, "new": new}) + " " + _filler_user(rng, topic, values))
        for t in (original, update)
    )
    replies = tuple(_filler_reply(rng, topic, values) for _ in texts)

    def question(ids: list[int]) -> dict[str, Any]:
        return {
            "question": ask.format_map(cast),
            "answer": new,
            "difficulty": "easy",
            "update_type": update_type,
            "tests_retention_of": f"updated {what}",
            "conversation_references": _refs(ids),
            "potential_confusion": f"LLM might recall the original {what} ({old}) instead of {new}",
            "source_chat_ids": {"original_info": [ids[0]], "updated_info": [ids[1]]},
            "rubric": [_state(new)],
        }

    return Plant("knowledge_update", texts, replies, question)


_CONTRADICTIONS = _rows("contradictions", "topic never contradiction question topic_questioned")


def _contradiction(rng: random.Random, cast: dict, row: tuple, dates: list[dt.date]) -> Plant:
    topic, never, other, ask, topic_questioned = row
    values = {**cast, **_numbers(rng)}
    never, other = never.format_map(values), other.format_map(values)
    never_first = rng.random() < 0.5
    ordered = (never, other) if never_first else (other, never)
    texts = tuple(t + " " + _filler_user(rng, topic, values) for t in ordered)
    replies = tuple(_filler_reply(rng, topic, values) for _ in texts)

    def question(ids: list[int]) -> dict[str, Any]:
        first, second = (ids[0], ids[1]) if never_first else (ids[1], ids[0])
        return {
            "question": ask.format_map(cast),
            "ideal_answer": "I notice you've mentioned contradictory information about this. You said "
            f'"{never}", but you also said "{other}". Could you clarify which is correct?',
            "difficulty": "clear",
            "contradiction_type": "never_statement_violation",
            "topic_questioned": topic_questioned,
            "conversation_references": _refs([first, second]),
            "tests_for": "LLM should detect contradiction and request clarification instead of giving "
            "definitive answer",
            "source_chat_ids": {"first_statement": [first], "second_statement": [second]},
            "rubric": [
                "LLM response should state: there is contradictory information",
                f"LLM response should mention: {never}",
                f"LLM response should mention: {other}",
            ],
        }

    return Plant("contradiction_resolution", texts, replies, question)


_TEMPORAL = _rows("temporal", "topic first second question labels")


def _temporal(rng: random.Random, cast: dict, row: tuple, dates: list[dt.date]) -> Plant:
    topic, first, second, ask, labels = row
    d1 = dates[0] - dt.timedelta(days=rng.randint(0, 2))
    d2 = max(dates[1] - dt.timedelta(days=rng.randint(0, 2)), d1 + dt.timedelta(days=1))
    values = {**cast, **_numbers(rng), "d1": _day(d1), "d2": _day(d2)}
    texts = tuple(t.format_map(values) + " " + _filler_user(rng, topic, values) for t in (first, second))
    replies = tuple(_filler_reply(rng, topic, values) for _ in texts)
    days = (d2 - d1).days

    def question(ids: list[int]) -> dict[str, Any]:
        return {
            "question": ask.format_map(cast),
            "answer": f"{days} days, from {_day(d1)} ({labels[0]}) to {_day(d2)} ({labels[1]}).",
            "difficulty": "easy" if days < 60 else "medium",
            "temporal_type": "duration_calculation",
            "time_points": [f"{_day(d1)}: {labels[0]}", f"{_day(d2)}: {labels[1]}"],
            "conversation_references": _refs(ids),
            "calculation_required": f"{_day(d2)} - {_day(d1)} = {days} days",
            "source_chat_ids": {"first_event": [ids[0]], "second_event": [ids[1]]},
            "rubric": [_state(f"{days} days"), _state(f"from {_day(d1)} till {_day(d2)}")],
        }

    return Plant("temporal_reasoning", texts, replies, question)


_THREADS = _rows("threads", "topic thread steps ordering_question summary_question")
_THREAD_REPLIES = _DATA["thread_replies"]


def _thread(rng: random.Random, cast: dict, row: tuple, dates: list[dt.date], ability: str) -> Plant:
    topic, thread, steps, order_ask, summary_ask = row
    values = {**cast, **_numbers(rng)}
    thread = thread.format_map(values)
    statements = [s.format_map(values) for s, _ in steps]
    labels = [label.format_map(values) for _, label in steps]
    texts = tuple(s + " " + _filler_user(rng, topic, values) for s in statements)
    replies = tuple(
        rng.choice(_THREAD_REPLIES).format(thread=thread, step=label)
        + "\n\n"
        + _filler_reply(rng, topic, values)
        for label in labels
    )

    def ordering(ids: list[int]) -> dict[str, Any]:
        ordinals = ("1st", "2nd", "3rd", "4th")
        return {
            "question": order_ask.format_map(cast),
            "answer": "You mentioned them in this order: "
            + ", ".join(f"{i}) {label}" for i, label in enumerate(labels, 1))
            + ".",
            "difficulty": "medium",
            "ordering_type": "mention_sequence",
            "total_mentions": len(ids),
            "conversation_references": [
                f"Session {i}: {label}" for i, label in zip(ids, labels, strict=True)
            ],
            "ordering_tested": [f"{o}: {label}" for o, label in zip(ordinals, labels, strict=False)],
            "source_chat_ids": ids,
            "rubric": labels,
        }

    def summary(ids: list[int]) -> dict[str, Any]:
        both = sorted(ids + [i + 1 for i in ids])
        return {
            "question": summary_ask.format_map(cast),
            "ideal_summary": f"Over the conversation, {thread} went through these stages: "
            + "; ".join(label.lower() for label in labels)
            + ".",
            "difficulty": rng.choice(("easy", "medium", "hard")),
            "summarization_type": "chronological_development",
            "bullet_points_covered": len(labels),
            "conversation_sessions": both,
            "key_elements_tested": labels,
            "synthesis_required": f"Integrating the steps of {thread} into one chronological narrative",
            "source_chat_ids": both,
            "rubric": [f"LLM response should contain: {label}" for label in labels],
        }

    return Plant(ability, texts, replies, ordering if ability == "event_ordering" else summary)


def _msr_trip(rng: random.Random) -> tuple:
    a, b, c = rng.randint(30, 90) * 10, rng.randint(40, 120) * 10, rng.randint(8, 30) * 10
    return (
        [
            f"The return flights to {{city}} came to ${a} in the end.",
            f"The guesthouse in {{city}} is ${b} for the whole stay.",
            f"I picked up a regional rail pass for {{country}}: ${c}.",
        ],
        "What have I spent on the {city} trip so far, all told?",
        f"${a + b + c:,}",
        "numeric_aggregation",
        ["Find the flight cost", "Find the accommodation cost", "Find the rail pass cost", "Add them up"],
    )


def _msr_columns(rng: random.Random) -> tuple:
    return (
        [
            "For {project}, I want to add a 'category' column to the transactions table.",
            "We also need a 'notes' text column on transactions in {project}.",
        ],
        "How many new fields did I ask for on the {project} transactions table, and which?",
        "Two: 'category' and 'notes'.",
        "simple_cross_session_facts",
        ["Find the first column request", "Find the second column request", "Count them"],
    )


def _msr_savings(rng: random.Random) -> tuple:
    a, b, c = rng.randint(20, 90) * 100, rng.randint(10, 60) * 100, rng.randint(5, 40) * 100
    return (
        [
            f"My savings account at {{bank}} holds ${a:,} right now.",
            f"The brokerage account is worth about ${b:,} after this month.",
            f"My Roth IRA balance is ${c:,}.",
        ],
        "Across all my accounts, how much have I put away?",
        f"${a + b + c:,}",
        "numeric_aggregation",
        ["Find each account balance", "Add the three balances"],
    )


def _msr_chapters(rng: random.Random) -> tuple:
    a, b = rng.randint(25, 60) * 100, rng.randint(25, 60) * 100
    return (
        [
            f"Chapter one of '{{title}}' came out at {a:,} words.",
            f"Chapter two of '{{title}}' ended up at {b:,} words.",
        ],
        "How long are the first two chapters of my book combined?",
        f"{a + b:,} words",
        "numeric_aggregation",
        ["Find chapter one's length", "Find chapter two's length", "Add them"],
    )


def _msr_bugs(rng: random.Random) -> tuple:
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    return (
        [
            f"I closed {a} bugs in the {{module}} module of {{project}} today.",
            f"Another {b} bugs fixed, this time in {{module2}}.",
        ],
        "How many defects have I fixed in total across the modules I told you about?",
        str(a + b),
        "numeric_aggregation",
        ["Find each batch of fixes", "Add them"],
    )


def _msr_advice(rng: random.Random) -> tuple:
    return (
        [
            "{doctor} wants me to cut back on salt.",
            "At the follow-up, {doctor} suggested a daily 20-minute walk.",
            "{doctor} also recommended I stop eating late at night.",
        ],
        "What lifestyle changes has my doctor recommended across my visits?",
        "Less salt, a daily 20-minute walk, and no late-night eating.",
        "list_aggregation",
        ["Collect each recommendation", "List them together"],
    )


_MULTI_SESSION = (
    ("travel", _msr_trip),
    ("coding", _msr_columns),
    ("finance", _msr_savings),
    ("writing", _msr_chapters),
    ("coding", _msr_bugs),
    ("health", _msr_advice),
)


def _multi_session(rng: random.Random, cast: dict, row: tuple, dates: list[dt.date]) -> Plant:
    topic, build = row
    statements, ask, answer, reasoning, steps = build(random.Random(rng.getrandbits(64)))
    values = {**cast, **_numbers(rng)}
    texts = tuple(s.format_map(cast) + " " + _filler_user(rng, topic, values) for s in statements)
    replies = tuple(_filler_reply(rng, topic, values) for _ in texts)

    def question(ids: list[int]) -> dict[str, Any]:
        return {
            "question": ask.format_map(cast),
            "answer": answer,
            "difficulty": "easy" if len(ids) < 3 else "medium",
            "reasoning_type": reasoning,
            "sessions_required": len(ids),
            "conversation_references": _refs(ids),
            "reasoning_steps": steps,
            "source_chat_ids": ids,
            "rubric": [_state(answer)],
        }

    return Plant("multi_session_reasoning", texts, replies, question)


_FACTS = _rows("facts", "topic statement question answer question_type fact")


def _extraction(rng: random.Random, cast: dict, row: tuple, dates: list[dt.date]) -> Plant:
    topic, statement, ask, answer, qtype, fact = row
    values = {**cast, **_numbers(rng)}
    statement, answer = statement.format_map(values), answer.format_map(values)
    user = (
        _filler_user(rng, topic, values) + " By the way: " + statement
        if rng.random() < 0.5
        else statement + " " + _filler_user(rng, topic, values)
    )

    def question(ids: list[int]) -> dict[str, Any]:
        return {
            "question": ask.format_map(values),
            "answer": answer,
            "difficulty": "easy",
            "question_type": qtype,
            "conversation_reference": f"chat_id {ids[0]}: {statement}",
            "key_facts_tested": [fact],
            "source_chat_ids": ids,
            "rubric": [_state(answer)],
        }

    return Plant("information_extraction", (user,), (_filler_reply(rng, topic, values),), question)


_ABSTENTIONS = _rows("abstentions", "question type why")
ABSENT_TERMS = tuple(row["absent_terms"] for row in _DATA["abstentions"])  # words no message may contain


def _abstention(rng: random.Random, cast: dict, row: tuple, dates: list[dt.date]) -> Plant:
    ask, kind, why = row
    response = "Based on the provided chat, there is no information related to that."

    def question(ids: list[int]) -> dict[str, Any]:
        return {
            "question": ask,
            "ideal_response": response,
            "difficulty": rng.choice(("easy", "medium", "hard")),
            "abstention_type": kind,
            "why_unanswerable": why,
            "plan_reference": "none",
            "rubric": [response],
        }

    return Plant("abstention", (), (), question)


# ability -> (kinds, number of evidence turns of a kind, placement rule, renderer)
_PLANTERS: dict[str, tuple[tuple, Callable[[tuple], int], str, Callable]] = {
    "abstention": (_ABSTENTIONS, lambda row: 0, "any", _abstention),
    "contradiction_resolution": (_CONTRADICTIONS, lambda row: 2, "any", _contradiction),
    "event_ordering": (
        _THREADS,
        lambda row: len(row[2]),
        "spread",
        lambda rng, cast, row, dates: _thread(rng, cast, row, dates, "event_ordering"),
    ),
    "information_extraction": (_FACTS, lambda row: 1, "any", _extraction),
    "instruction_following": (
        _INSTRUCTIONS,
        lambda row: 1,
        "early",
        lambda rng, cast, row, dates: _standing_rule(rng, cast, row, "instruction_following"),
    ),
    "knowledge_update": (_UPDATES, lambda row: 2, "spread", _knowledge_update),
    "multi_session_reasoning": (
        _MULTI_SESSION,
        lambda row: len(row[1](random.Random(0))[0]),
        "spread",
        _multi_session,
    ),
    "preference_following": (
        _PREFERENCES,
        lambda row: 1,
        "early",
        lambda rng, cast, row, dates: _standing_rule(rng, cast, row, "preference_following"),
    ),
    "summarization": (
        _THREADS,
        lambda row: len(row[2]),
        "spread",
        lambda rng, cast, row, dates: _thread(rng, cast, row, dates, "summarization"),
    ),
    "temporal_reasoning": (_TEMPORAL, lambda row: 2, "spread", _temporal),
}
# event ordering and summarization split the threads between them
MAX_QUESTIONS_PER_ABILITY = min(len(_THREADS) // 2, *(len(kinds) for kinds, *_ in _PLANTERS.values()))


# ---------------------------------------------------------------------------------------------- layout
@dataclass(frozen=True)
class Layout:
    """Turn sizes, first message id per turn, batch boundaries (in turns) and session dates."""

    sizes: list[int]
    first_ids: list[int]
    batch_starts: list[int]  # turn index where each batch starts, plus the total number of turns
    dates: list[dt.date]

    def batch_of(self, turn: int) -> int:
        return bisect.bisect_right(self.batch_starts, turn) - 1


def _layout(rng: random.Random, n_messages: int) -> Layout:
    target = n_messages + n_messages % 2  # turns hold pairs of messages
    sizes, total = [], 0
    while total < target:
        size = min(rng.choices((2, 4, 6), weights=(85, 12, 3))[0], target - total)
        sizes.append(size)
        total += size
    n_batches = min(len(sizes), max(3, round(target / MESSAGES_PER_BATCH)))
    starts = [round(b * len(sizes) / n_batches) for b in range(n_batches + 1)]
    max_step = max(1, min(21, 3650 // n_batches))  # sessions days to weeks apart, ten years at most
    day = dt.date(2023, 1, 2) + dt.timedelta(days=rng.randint(0, 365))
    dates = []
    for _ in range(n_batches):
        dates.append(day)
        day += dt.timedelta(days=rng.randint(max(1, max_step // 3), max_step))
    first_ids = list(itertools.accumulate(sizes, initial=0))[:-1]
    return Layout(sizes, first_ids, starts, dates)


def _place(rng: random.Random, layout: Layout, taken: bytearray, n_slots: int, rule: str) -> list[int]:
    """Pick free turns for a plant's evidence, in distinct batches where there are enough, in order."""
    n_batches = len(layout.dates)
    hi = max(1, math.ceil(0.6 * n_batches)) if rule == "early" else n_batches
    pool = range(hi)
    batches = sorted(rng.sample(pool, n_slots) if n_slots <= len(pool) else rng.choices(pool, k=n_slots))
    turns = []
    for b in batches:
        start, end = layout.batch_starts[b], layout.batch_starts[b + 1]
        candidates = [rng.randrange(start, end) for _ in range(30)] if end > start else []
        turn = next((t for t in candidates if not taken[t]), None)
        if turn is None:
            turn = next(
                (t for t in itertools.chain(range(start, end), range(len(taken))) if not taken[t]), None
            )
        if turn is None:
            raise ValueError("conversation too short for the requested questions; ask for more messages")
        taken[turn] = 1
        turns.append(turn)
    return sorted(turns)


def _plant_all(
    rng: random.Random, cast: dict, layout: Layout, per_ability: int
) -> tuple[dict[int, tuple[str, str]], dict[str, list[dict]]]:
    taken = bytearray(len(layout.sizes))
    evidence: dict[int, tuple[str, str]] = {}
    questions: dict[str, list[dict]] = {}
    threads = rng.sample(
        range(len(_THREADS)), len(_THREADS)
    )  # event ordering and summarization never share one
    for ability in ABILITIES:
        kinds, slots, rule, render = _PLANTERS[ability]
        if ability in ("event_ordering", "summarization"):
            half = len(threads) // 2
            picks = threads[:half] if ability == "event_ordering" else threads[half:]
            if per_ability > len(picks):
                raise ValueError(f"at most {len(picks)} {ability} questions per conversation")
            chosen = [kinds[i] for i in picks[:per_ability]]
        else:
            chosen = rng.sample(kinds, per_ability)
        questions[ability] = []
        for row in chosen:
            turns = _place(rng, layout, taken, slots(row), rule)
            plant = render(rng, cast, row, [layout.dates[layout.batch_of(t)] for t in turns])
            for turn, user, reply in zip(turns, plant.user_texts, plant.reply_texts, strict=True):
                evidence[turn] = (user, reply)
            questions[ability].append(plant.question([layout.first_ids[t] for t in turns]))
    return evidence, questions


# ---------------------------------------------------------------------------------------------- writing
def _batch(
    rng: random.Random,
    cast: dict,
    layout: Layout,
    b: int,
    main_topic: str,
    evidence: dict[int, tuple[str, str]],
) -> dict[str, Any]:
    turns = []
    for k, t in enumerate(range(layout.batch_starts[b], layout.batch_starts[b + 1]), 1):
        topic = main_topic if rng.random() < 0.5 else rng.choice(TOPICS)
        values = {**cast, **_numbers(rng)}
        user, reply = evidence.get(t) or (_filler_user(rng, topic, values), _filler_reply(rng, topic, values))
        mid = layout.first_ids[t]
        first: dict[str, Any] = {"role": "user", "id": mid}
        if k == 1:
            first["time_anchor"] = f"{layout.dates[b]:%B-%d-%Y}"
        first |= {
            "index": f"{b + 1},{k}",
            "question_type": "main_question",
            "content": f"{user} ->-> {b + 1},{k}",
        }
        turn = [first, {"role": "assistant", "id": mid + 1, "content": reply}]
        for extra in range(1, layout.sizes[t] // 2):
            kind = "answer_ai_question" if rng.random() < 0.4 else "followup_question"
            follow = rng.choice(_FOLLOWUPS[topic]).format_map(values)
            turn.append({"role": "user", "id": mid + 2 * extra, "question_type": kind, "content": follow})
            answer = _filler_reply(rng, topic, values)
            turn.append({"role": "assistant", "id": mid + 2 * extra + 1, "content": answer})
        turns.append(turn)
    return {"batch_number": b + 1, "turns": turns, "time_anchor": None}


_TOPIC_CARDS = {topic: (c["category"], c["title"], c["theme"]) for topic, c in _DATA["topic_cards"].items()}


def _write_conversation(folder: Path, number: int, seed: int, n_messages: int, per_ability: int) -> int:
    rng = random.Random(f"beam_synth:{seed}:{number}")  # str seeds hash with sha512: stable across processes
    cast = _cast(rng)
    main_topic = rng.choice(TOPICS)
    layout = _layout(rng, n_messages)
    evidence, questions = _plant_all(rng, cast, layout, per_ability)
    (folder / "probing_questions").mkdir(parents=True, exist_ok=True)
    with open(folder / "chat.json", "w", encoding="utf-8") as out:  # one batch in memory at a time
        out.write("[\n")
        for b in range(len(layout.dates)):
            text = json.dumps(_batch(rng, cast, layout, b, main_topic, evidence), indent=2)
            out.write(("" if b == 0 else ",\n") + "  " + text.replace("\n", "\n  "))
        out.write("\n]")
    with open(folder / "probing_questions" / "probing_questions.json", "w", encoding="utf-8") as out:
        json.dump(questions, out, indent=4)
    category, title, theme = _TOPIC_CARDS[main_topic]
    topic = {
        "id": number,
        "category": category,
        "title": title.format_map(cast),
        "theme": theme.format_map(cast),
        "subtopics": [s.format_map(cast) for s in _STEPS[main_topic]],
    }
    with open(folder / "topic.json", "w", encoding="utf-8") as out:
        json.dump(topic, out, indent=4)
    return sum(layout.sizes)


def generate(
    out_dir: Path,
    n_conversations: int = 1,
    messages_per_conversation: int = 300,
    seed: int = 0,
    questions_per_ability: int = 2,
) -> list[Path]:
    """Write conversations `out_dir/1 .. out_dir/n` in BEAM's layout; return their folders."""
    if n_conversations < 1 or messages_per_conversation < 2:
        raise ValueError("need at least one conversation of at least two messages")
    if not 1 <= questions_per_ability <= MAX_QUESTIONS_PER_ABILITY:
        raise ValueError(f"questions_per_ability must be between 1 and {MAX_QUESTIONS_PER_ABILITY}")
    folders = []
    for number in range(1, n_conversations + 1):
        folder = Path(out_dir) / str(number)
        _write_conversation(folder, number, seed, messages_per_conversation, questions_per_ability)
        folders.append(folder)
    return folders


def sample_texts(n_messages: int = 240, seed: int = 0) -> list[str]:
    """BEAM-like texts of all lengths from one generated conversation, written nowhere else: e.g. the
    calibration set of int8 quantization (retrieval/backends.py), which must not be the benchmark's data.

    The first half of the messages as they are, the second half joined three at a time (as long as
    BEAM's ~320-word messages, so the activations past 128 tokens are calibrated too), then every
    question."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = generate(Path(tmp), 1, n_messages, seed)[0]
        chat = json.loads((folder / "chat.json").read_text(encoding="utf-8"))
        questions = json.loads((folder / "probing_questions" / "probing_questions.json").read_text("utf-8"))
    messages = [m["content"] for batch in chat for turn in batch["turns"] for m in turn]
    half = len(messages) // 2
    joined = [" ".join(messages[i : i + 3]) for i in range(half, len(messages), 3)]
    return messages[:half] + joined + [q["question"] for qs in questions.values() for q in qs]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Write synthetic BEAM-format conversations with planted evidence."
    )
    parser.add_argument("out", type=Path, help="output folder (conversations go to OUT/1, OUT/2, ...)")
    parser.add_argument("--conversations", type=int, default=1)
    parser.add_argument("--messages", type=int, default=300, help="messages per conversation")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--questions-per-ability", type=int, default=2)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        folders = generate(args.out, args.conversations, args.messages, args.seed, args.questions_per_ability)
    except ValueError as err:
        print(f"beam_synth: {err}", file=sys.stderr)
        return 2
    for folder in folders:
        size = sum(f.stat().st_size for f in folder.rglob("*.json"))
        print(
            f"wrote {folder}: chat.json, probing_questions/probing_questions.json, topic.json "
            f"({size / 1e6:.1f} MB)"
        )
    print(
        f"{len(folders)} conversation(s) of ~{args.messages} messages, seed {args.seed}, "
        f"{time.perf_counter() - start:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
