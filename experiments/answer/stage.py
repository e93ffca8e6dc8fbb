"""The answer stage, after ranking: answer each question from its context, then judge the answer.

Data flow (experiments/run/app.py calls `run_answer_stage` after the retrieval run is evaluated):

    suite queries with a gold answer (a query without one is skipped, counted in the notes)
      -> context per `answer.context` mode (context.py), cut to the window
      -> the answerer (answer.source=llm: F's prompts, experiments/answer/prompts.py, through the cassette,
         calls.py) or the answers file (answer.source=file, answers_file.py)
      -> each judge of `answer.judges` (experiments/answer/judges/), one query at a time through the cassette
      -> AnswerOutcome: answers.jsonl records, per_query.csv columns, the metrics.json `answer` block
         (summary.py), the cassette's digest for tags.json and MLflow

Calls run on `answer.concurrency` threads; the output is in the suite's query order whatever order the
calls end in, so a record run and its replay write the same bytes (a replayed call reports the latency
it was recorded with, as a replayed live search does).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.answer.answers_file import read_answers
from experiments.answer.calls import LlmCalls, open_cassette
from experiments.answer.context import Contexts, fit_window
from experiments.answer.settings import AnswerSettings
from experiments.answer.types import AnswerItem, Verdict
from experiments.suites.identity import file_sha256
from experiments.suites.suite import Suite
from retrieval.pipeline import RunOutput
from retrieval.types import Query

ANSWERS_FILE = "answers.jsonl"
BENCHMARKS = ("locomo", "longmemeval", "beam")


@dataclass(frozen=True)
class Judged:
    """One query answered under one context and judged by every judge."""

    query: Query
    context: str
    record: dict[str, Any]  # its answers.jsonl line
    verdicts: dict[str, Verdict]  # by judge key
    evidence: str | None  # all / some / none of its evidence in the context (None: no evidence)


@dataclass(frozen=True)
class AnswerOutcome:
    judged: dict[str, list[Judged]]  # by context mode, in the suite's query order
    skipped: list[str]  # queries without a gold answer
    judge_columns: dict[str, tuple[str, ...]]  # by judge key
    cassette_path: str | None
    cassette_digest: str | None
    counts: dict[str, int]  # calls answered from the cassette / live


def answer_item(query: Query, answer: str) -> AnswerItem:
    """What a judge sees of one answered query (experiments/answer/types.py)."""
    return AnswerItem(
        query_id=query.id, question=query.text, answer=answer, gold=query.answer, rubric=query.rubric,
        labels=query.labels, adversarial=query.adversarial_answer,
    )  # fmt: skip


def has_gold(query: Query) -> bool:
    return bool(query.answer) or bool(query.rubric)


def benchmark_of(loader_target: str | None) -> str:
    """`locomo`, `longmemeval` or `beam` for their loaders (which prompts upstream used); else `other`."""
    module = (loader_target or "").rsplit(".", 1)[0].rsplit(".", 1)[-1]
    return module if module in BENCHMARKS else "other"


def gold_problem(suite: Suite) -> str | None:
    """Why the suite cannot be judged (no query has a gold answer), or None."""
    if any(has_gold(q) for q in suite.queries):
        return None
    return (
        f"answer: suite {suite.name!r} has no gold answers (no query has `answer` or `rubric`), so no answer "
        "can be judged; load a suite with answers (LoCoMo, LongMemEval, BEAM, or queries.jsonl with `answer`)"
    )


def sample_queries(queries: list[Query], size: int | None, seed: int) -> list[Query]:
    """`answer.sample`: a seeded sample of `size` questions, in the suite's order (all when None or more)."""
    if size is None or size >= len(queries):
        return queries
    keyed = sorted(queries, key=lambda q: hashlib.sha256(f"{seed}\x00{q.id}".encode()).hexdigest())
    chosen = {q.id for q in keyed[:size]}
    return [q for q in queries if q.id in chosen]


def build_judges(settings: AnswerSettings) -> dict[str, Any]:
    """Each judge of `answer.judges`, keyed by its name (or `name.prompt_set` when one name repeats)."""
    from experiments.answer.judges import find_judge

    names = [s.name for s in settings.judges]
    judges = {}
    for spec in settings.judges:
        options = dict(spec.options)
        options.setdefault("prompt_set", None)
        key = spec.name if names.count(spec.name) == 1 else f"{spec.name}.{options['prompt_set']}"
        judges[key] = find_judge(spec.name)(protocol=settings.protocol, **options)
    return judges


def run_answer_stage(
    settings: AnswerSettings,
    suite: Suite,
    output: RunOutput,
    *,
    benchmark: str,
    raw: tuple[Mapping[str, str], Mapping[str, str]] | None = None,
) -> AnswerOutcome:
    """Answer (or read the answers of) the sampled questions in each context mode and judge them; `raw`: the
    benchmark's raw turn and question texts its official prompt is built from (LoCoMo)."""
    judges = build_judges(settings)
    wanted = sample_queries([q for q in suite.queries if has_gold(q)], settings.sample, settings.seed)
    skipped = [q.id for q in suite.queries if not has_gold(q)]
    cassette = (
        open_cassette(settings.cassette, settings.mode)
        if settings.cassette and settings.mode != "live"
        else None
    )
    gguf = file_sha256(settings.model_file) if settings.model_file else None
    template = {"benchmark": benchmark, "protocol": settings.protocol, "template": settings.template}
    answerer = LlmCalls(
        settings.endpoint,
        {"role": "answerer", "model": settings.model, "gguf_sha256": gguf,
         "template_sha256": hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()},
        mode=settings.mode, cassette=cassette,
    )  # fmt: skip
    judge_calls = LlmCalls(
        settings.judge_endpoint,
        {"role": "judge", "model": settings.judge_model, "gguf_sha256": gguf},
        mode=settings.mode, cassette=cassette,
    )  # fmt: skip
    contexts = Contexts(suite, output, settings.k, settings.seed)
    from_file = (
        read_answers(settings.path, [q.id for q in wanted], {q.id for q in suite.queries})
        if settings.source == "file"
        else None
    )

    def one(query: Query, mode: str) -> Judged:
        memories = contexts.memories(query, mode)
        record: dict[str, Any] = {"query_id": query.id, "context": mode}
        if from_file is not None:
            record.update(answer=from_file[query.id], source="file")
            kept = memories
        else:
            messages, dropped = fit_window(
                memories, lambda ms: _messages(query, ms, benchmark, settings, raw),
                window_tokens=settings.window_tokens, max_tokens=settings.max_tokens,
                chars_per_token=settings.chars_per_token,
            )  # fmt: skip
            kept = memories[: len(memories) - dropped]
            body = {"model": settings.model, "messages": messages, **settings.sampling}
            exchange = answerer.ask(query.id, "answer" if mode == "retrieved" else f"answer {mode}", body)
            record.update(
                prompt_sha256=hashlib.sha256(
                    json.dumps(messages, sort_keys=True, ensure_ascii=False).encode()
                ).hexdigest(),
                context_ids=[m.id for m in kept],
                dropped=dropped,
                answer=exchange.text,
                prompt_tokens=exchange.prompt_tokens,
                completion_tokens=exchange.completion_tokens,
                latency_ms=round(exchange.latency_ms, 3),
            )
        item = answer_item(query, record["answer"])
        verdicts: dict[str, Verdict] = {}
        for key, judge in judges.items():
            chat = judge_calls.chat_for(
                query.id,
                f"judge {key}" + ("" if mode == "retrieved" else f" {mode}"),
                settings.judge_model or "",
                {"seed": settings.seed, "temperature": 0.0},
            )
            verdicts[key] = judge.judge([item], chat)[0]
        record["verdicts"] = {
            key: {
                "score": v.score,
                "unparsed": v.unparsed,
                **({"raw": list(v.raw)} if v.raw else {}),
                **dict(v.extra),
            }
            for key, v in verdicts.items()
        }
        return Judged(query, mode, record, verdicts, contexts.evidence_share(query, kept))

    modes = settings.contexts if from_file is None else settings.contexts[:1]
    jobs = [(q, mode) for mode in modes for q in wanted]
    if from_file is None and jobs:
        answerer.server_model()  # one check of the endpoint (or the cassette) before the calls fan out
    with ThreadPoolExecutor(max_workers=settings.concurrency) as pool:
        results = list(pool.map(lambda job: one(*job), jobs))
    judged: dict[str, list[Judged]] = {mode: [] for mode in modes}
    for result in results:
        judged[result.context].append(result)
    counts = {k: answerer.counts[k] + judge_calls.counts[k] for k in ("cassette", "live")}
    return AnswerOutcome(
        judged=judged,
        skipped=skipped,
        judge_columns={key: tuple(judge.columns()) for key, judge in judges.items()},
        cassette_path=str(cassette.path) if cassette is not None else None,
        cassette_digest=cassette.digest if cassette is not None else None,
        counts=counts,
    )


def _messages(
    query: Query,
    memories: Sequence[Any],
    benchmark: str,
    settings: AnswerSettings,
    raw: tuple[Mapping[str, str], Mapping[str, str]] | None = None,
) -> list[Mapping[str, str]]:
    from experiments.answer.prompts import answer_messages, with_raw_texts

    if raw is not None:
        query, memories = with_raw_texts(query, memories, raw)
    return answer_messages(
        query, list(memories), benchmark=benchmark, protocol=settings.protocol, seed=settings.seed,
        template=settings.template, adversarial=query.adversarial_answer,
    )  # fmt: skip


def write_answers(outcome: AnswerOutcome, run_dir: Path) -> None:
    """answers.jsonl (the first context's answers) and answers.<context>.jsonl for the others."""
    for i, (mode, judged) in enumerate(outcome.judged.items()):
        name = ANSWERS_FILE if i == 0 else f"answers.{mode}.jsonl"
        with open(run_dir / name, "w", encoding="utf-8") as handle:
            handle.writelines(
                json.dumps(j.record, ensure_ascii=False, sort_keys=False) + "\n" for j in judged
            )
