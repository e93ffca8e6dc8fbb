"""The answerer's messages: a query and its context memories as the chat the answerer model is sent.

Under `protocol=official` the prompt is upstream's, byte for byte (tests/answer/test_prompts_upstream.py
checks it against the vendored upstream code):
- LoCoMo, RAG dialog mode (task_eval/evaluate_gpts.py, later task_eval/gpt_utils.py): each memory as `<session
  date_time>: <Speaker> said, "<text>"`, joined by newlines, then `QA_PROMPT` with the question; category 2
  (temporal) adds " Use DATE of CONVERSATION to answer with an approximate date."; category 5 (adversarial)
  asks upstream's two-option question, "(a) Not mentioned in the conversation (b) <distractor>" or the other
  way round, the order drawn from `seed` and the query id (upstream: `random.random()`), under
  `QA_PROMPT_CAT_5`. One user message (upstream sends gpt-4 models a user message, gpt-3.5 a system one).
  `locomo_cat5_answer` maps a reply of "a"/"(b)" back to the option's text, as upstream's get_cat_5_answer.
- LongMemEval (src/generation/run_generation.py, `prepare_prompt`, with the settings its run_generation.sh
  defaults to: history_format=json, useronly=false, reading method `con`): "I will give you several history
  chats between you and a user…", each memory a `### Session <i>:` block holding its session date and the turn
  as JSON, the blocks sorted by date, then `Current Date:` (the question date) and the question. Upstream
  expands a retrieved user turn into its round (the turn and the reply after it); a memeval memory is one
  turn, so the reply is not there (docs/judges.md). Other benchmarks and protocols take `template` (config
  `answer.template`) with the placeholders `{question}`, `{context}` (the memories, one per line) and `{now}`;
  without one, memeval's DEFAULT_TEMPLATE.
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from types import MappingProxyType

from retrieval.types import Memory, Query

# task_eval/evaluate_gpts.py:32-43 (LoCoMo), verbatim.
LOCOMO_QA_PROMPT = (
    "\nBased on the above context, write an answer in the form of a short phrase for the following question. "
    "Answer with exact words from the context whenever possible.\n\nQuestion: {} Short answer:\n"
)
LOCOMO_QA_PROMPT_CAT_5 = (
    "\nBased on the above context, answer the following question.\n\nQuestion: {} Short answer:\n"
)
LOCOMO_CAT_2_SUFFIX = " Use DATE of CONVERSATION to answer with an approximate date."
LOCOMO_CAT_5_QUESTION = " Select the correct answer: (a) {} (b) {}. "
LOCOMO_NOT_MENTIONED = "Not mentioned in the conversation"

# src/generation/run_generation.py:55 (LongMemEval, cot=true, no key expansion), verbatim.
LONGMEMEVAL_TEMPLATE = (
    "I will give you several history chats between you and a user. Please answer the question based on the "
    "relevant chat history. Answer the question step by step: first extract all the relevant information, "
    "and "
    "then reason over the information to get the answer.\n\n\nHistory Chats:\n\n{}\n\nCurrent Date: {}\n"
    "Question: {}\nAnswer (step by step):"
)
LONGMEMEVAL_SESSION = "\n### Session {}:\nSession Date: {}\nSession Content:\n{}\n"

DEFAULT_TEMPLATE = (
    "Here are memories from earlier conversations, one per line, each with its date when "
    "known:\n\n{context}\n\n"
    "Current date: {now}\nUsing only these memories, answer the question in a short phrase.\n"
    "Question: {question}\nAnswer:"
)
PLACEHOLDERS = frozenset({"question", "context", "now"})
LOCOMO_CATEGORY = {"multi-hop": 1, "temporal": 2, "open-domain": 3, "single-hop": 4, "adversarial": 5}


def answer_messages(
    query: Query,
    memories: Sequence[Memory],
    *,
    benchmark: str,
    protocol: str,
    seed: int,
    template: str | None = None,
    adversarial: str | None = None,
) -> list[dict[str, str]]:
    """The chat messages asking the answerer `query` from `memories` (ranked, already cut to `answer.k`).

    `adversarial` is LoCoMo category 5's distractor answer (else read from the query's context or labels,
    key `adversarial_answer`)."""
    if protocol == "official" and benchmark == "locomo":
        prompt = locomo_prompt(query, memories, seed=seed, adversarial=adversarial)
    elif protocol == "official" and benchmark == "longmemeval":
        prompt = longmemeval_prompt(query, memories)
    else:
        prompt = template_prompt(query, memories, template or DEFAULT_TEMPLATE)
    return [{"role": "user", "content": prompt}]


def with_raw_texts(
    query: Query, memories: Sequence[Memory], raw: tuple[Mapping[str, str], Mapping[str, str]]
) -> tuple[Query, list[Memory]]:
    """`query` and `memories` carrying upstream's raw texts (LoCoMo: `experiments.suites.locomo.raw_texts`):
    the question as written, each turn's text in `metadata["text"]`, where `locomo_line` reads it."""
    turns, questions = raw
    query = replace(query, text=questions.get(query.id, query.text))
    return query, [
        replace(m, metadata=MappingProxyType({**m.metadata, "text": turns[m.id]})) if m.id in turns else m
        for m in memories
    ]


def check_template(template: str, where: str = "answer.template") -> None:
    """ValueError naming `where` when `template` has a placeholder other than {question}, {context}, {now}."""
    try:
        names = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as err:
        raise ValueError(f"{where}: not a valid template ({err})") from None
    unknown = sorted(names - PLACEHOLDERS)
    if unknown:
        raise ValueError(
            f"{where}: unknown placeholder(s) {', '.join('{' + n + '}' for n in unknown)} "
            f"(known: {{question}}, {{context}}, {{now}})"
        )


def template_prompt(query: Query, memories: Sequence[Memory], template: str) -> str:
    check_template(template)
    context = "\n".join(f"[{m.created_at}] {m.text}" if m.created_at else m.text for m in memories)
    return template.format(question=query.text, context=context, now=query.now or "unknown")


# ---- LoCoMo ----


def locomo_category(query: Query) -> int | None:
    value = query.labels.get("category")
    return LOCOMO_CATEGORY.get(value) if value is not None else None


def locomo_line(memory: Memory) -> str:
    """`<session date_time>: <Speaker> said, "<text>"`: upstream's RAG dialog line for one turn. The turn's
    raw
    text comes from `metadata["text"]` when the loader keeps it; else the memory's text, which the LoCoMo
    loader
    renders as `<Speaker> said, "<text>"` (stripped, and with ` and shared <caption>` for an image turn)."""
    date_time = memory.metadata.get("date_time") or memory.created_at or ""
    raw = memory.metadata.get("text")
    said = f'{memory.role} said, "{raw}"' if isinstance(raw, str) and memory.role else memory.text
    return f"{date_time}: {said}"


def locomo_cat5_options(query: Query, seed: int, adversarial: str | None = None) -> dict[str, str]:
    """Category 5's two options, {"a": ..., "b": ...}: "Not mentioned in the conversation" and the distractor,
    the order drawn from `seed` and the query id (the same every run)."""
    distractor = adversarial
    if distractor is None:
        distractor = query.context.get("adversarial_answer") or query.labels.get("adversarial_answer")
    if not isinstance(distractor, str):
        raise ValueError(f"query {query.id}: a LoCoMo category-5 question needs its adversarial_answer")
    if random.Random(f"{seed}:{query.id}").random() < 0.5:
        return {"a": LOCOMO_NOT_MENTIONED, "b": distractor}
    return {"a": distractor, "b": LOCOMO_NOT_MENTIONED}


def locomo_prompt(
    query: Query, memories: Sequence[Memory], *, seed: int, adversarial: str | None = None
) -> str:
    context = "\n".join(locomo_line(m) for m in memories)
    category = locomo_category(query)
    if category == 5:
        options = locomo_cat5_options(query, seed, adversarial)
        question = query.text + LOCOMO_CAT_5_QUESTION.format(options["a"], options["b"])
        return context + "\n\n" + LOCOMO_QA_PROMPT_CAT_5.format(question)
    question = query.text + LOCOMO_CAT_2_SUFFIX if category == 2 else query.text
    return context + "\n\n" + LOCOMO_QA_PROMPT.format(question)


def locomo_cat5_answer(reply: str, options: Mapping[str, str]) -> str:
    """Upstream's get_cat_5_answer: a one-letter or `(x)` reply becomes that option's text; else the reply,
    lower-cased and stripped."""
    reply = reply.strip().lower()
    if len(reply) == 1:
        return options["a"] if "a" in reply else options["b"]
    if len(reply) == 3:
        return options["a"] if "(a)" in reply else options["b"]
    return reply


# ---- LongMemEval ----


def longmemeval_date(now: str | None) -> str:
    """The question date as LongMemEval writes it (`2023/05/30 (Tue) 23:40`), from the query's ISO `now`."""
    if not now:
        return ""
    return datetime.fromisoformat(now).strftime("%Y/%m/%d (%a) %H:%M")


def longmemeval_prompt(query: Query, memories: Sequence[Memory]) -> str:
    chunks = [
        (m.metadata.get("date") or m.created_at or "", [{"role": m.role or "user", "content": m.text}])
        for m in memories
    ]
    chunks.sort(key=lambda chunk: chunk[0])  # upstream sorts the retrieved chunks by their date string
    history = "".join(
        LONGMEMEVAL_SESSION.format(i + 1, date, "\n" + json.dumps(entry))
        for i, (date, entry) in enumerate(chunks)
    )
    return LONGMEMEVAL_TEMPLATE.format(history, longmemeval_date(query.now), query.text)
