"""LongMemEval (Wu et al., ICLR 2025) read from its own S, M or oracle JSON file, as a Suite.

The files (`longmemeval_s.json` / `longmemeval_s_cleaned.json`, `longmemeval_m.json`,
`longmemeval_oracle.json`) come from the authors (github.com/xiaowu0162/LongMemEval, README "Data"; Hugging
Face `xiaowu0162/longmemeval` and `xiaowu0162/longmemeval-cleaned`); they are not shipped here. Each is a
JSON list of 500 instances: `question_id`, `question_type`, `question`, `answer`, `question_date`,
`haystack_session_ids`, `haystack_dates`, `haystack_sessions` (lists of `{role, content, has_answer?}`
turns) and `answer_session_ids`. Mapping, following upstream's retrieval code (src/retrieval):
- each question's haystack is its own scope `{"question": "<question_id>"}` (the same session text recurs
  across questions; a query only ever sees its own haystack);
- one memory per turn, id `<question_id>:<session_id>_<n>` (n counts every turn of the session from 1, as
  upstream's corpus ids); `roles: user` (default) indexes the user turns only, as upstream does; `all`
  indexes the assistant's too. `created_at` = the session's date, `now` = `question_date`;
- evidence (grade 1) = the indexed turns with `has_answer: true`. A session is relevant at session (or
  round) granularity when it holds one, which is upstream's rule too: an answer session without a
  `has_answer` user turn becomes `noans` there. Disagreements between `has_answer` and
  `answer_session_ids` are counted in `notes`;
- `question_type` is the label; abstention questions (`question_id` ending `_abs`) are kept with no
  relevant memory, so the run reports them apart (upstream leaves them out of its retrieval metrics).
The metrics upstream reports are recall_any@k, recall_all@k and ndcg_any@k (experiments/evaluate/metrics/).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

from experiments.suites import fields
from experiments.suites.beam import _FAILED, _read_json
from experiments.suites.granularity import check_granularity
from experiments.suites.options import finish
from experiments.suites.suite import MAX_PROBLEMS, Problem, Suite, SuiteError
from retrieval.types import Memory, Query

QUESTION_TYPES = (
    "single-session-user",
    "single-session-assistant",
    "single-session-preference",
    "temporal-reasoning",
    "knowledge-update",
    "multi-session",
)
ROLES = {"user": ("user",), "all": ("user", "assistant")}
_LISTS = ("haystack_session_ids", "haystack_dates", "haystack_sessions")


def parse_date(value: Any) -> str | None:
    """`2023/05/30 (Tue) 23:40` -> `2023-05-30T23:40:00`; anything else -> None."""
    if not isinstance(value, str):
        return None
    parts = value.split()
    try:
        return datetime.strptime(f"{parts[0]} {parts[-1]}", "%Y/%m/%d %H:%M").isoformat()
    except (ValueError, IndexError):
        return None


def is_abstention(question_id: str) -> bool:
    return question_id.endswith("_abs")


def _instance(
    item: Any,
    i: int,
    path: str,
    keep_roles: tuple[str, ...],
    problems: list[Problem],
    audit: dict[str, list[str]],
) -> tuple[list[Memory], Query | None, dict[str, int]]:
    where = f"[{i}]"
    before = len(problems)
    if not isinstance(item, dict):
        problems.append(Problem(path, None, where, "an instance must be an object"))
        return [], None, {}
    qid = item.get("question_id")
    if (problem := fields.id_problem(qid)) is not None:
        problems.append(Problem(path, None, f"{where}.question_id", problem))
        return [], None, {}
    where = f"[{i}] ({qid})"
    if (problem := fields.text_problem(item.get("question"))) is not None:
        problems.append(Problem(path, None, f"{where}.question", problem))
    if item.get("question_type") not in QUESTION_TYPES:
        problems.append(
            Problem(
                path,
                None,
                f"{where}.question_type",
                f"must be one of {', '.join(QUESTION_TYPES)}, got {item.get('question_type')!r:.40}",
            )
        )
    now = parse_date(item.get("question_date"))
    if now is None:
        problems.append(
            Problem(
                path,
                None,
                f"{where}.question_date",
                f"not a LongMemEval date (2023/05/30 (Tue) 23:40), got {item.get('question_date')!r:.40}",
            )
        )
    lists = [item.get(k) for k in _LISTS]
    if not all(isinstance(v, list) for v in lists) or len({len(v) for v in lists}) != 1:
        problems.append(
            Problem(path, None, f"{where}.haystack_*", f"{', '.join(_LISTS)} must be lists of one length")
        )
        return [], None, {}
    answer_sessions = item.get("answer_session_ids")
    if not isinstance(answer_sessions, list) or not all(isinstance(s, str) for s in answer_sessions):
        problems.append(Problem(path, None, f"{where}.answer_session_ids", "must be a list of session ids"))
        return [], None, {}
    scope = MappingProxyType({"question": qid})
    memories, evidence, seen = [], {}, set()
    evidence_sessions: set[str] = set()
    for s, (sid, date, session) in enumerate(zip(*lists, strict=True)):
        at = f"{where}.haystack_sessions[{s}]"
        if (problem := fields.id_problem(sid)) is not None or sid in seen:
            problems.append(
                Problem(
                    path, None, f"{where}.haystack_session_ids[{s}]", problem or f"repeats session {sid!r}"
                )
            )
            continue
        seen.add(sid)
        created = parse_date(date)
        if created is None:
            problems.append(
                Problem(
                    path, None, f"{where}.haystack_dates[{s}]", f"not a LongMemEval date, got {date!r:.40}"
                )
            )
        if not isinstance(session, list):
            problems.append(Problem(path, None, at, "a session is a list of turns"))
            continue
        for t, turn in enumerate(session):
            if (
                not isinstance(turn, dict)
                or turn.get("role") not in ROLES["all"]
                or not isinstance(turn.get("content"), str)
            ):
                problems.append(
                    Problem(
                        path,
                        None,
                        f"{at}[{t}]",
                        "a turn is {role: user|assistant, content: str, has_answer?: bool}",
                    )
                )
                continue
            has_answer = turn.get("has_answer", False)
            if not isinstance(has_answer, bool):
                problems.append(
                    Problem(
                        path, None, f"{at}[{t}].has_answer", f"must be true or false, got {has_answer!r:.20}"
                    )
                )
                continue
            if has_answer:
                evidence_sessions.add(sid)
            if turn["role"] not in keep_roles:
                if has_answer:
                    audit["evidence_not_indexed"].append(f"{qid}:{sid}_{t + 1}")
                continue
            if not turn["content"].strip():
                audit["empty_turns"].append(f"{qid}:{sid}_{t + 1}")
                continue
            mid = f"{qid}:{sid}_{t + 1}"
            memories.append(
                Memory(
                    id=mid,
                    text=turn["content"].strip(),
                    scope=scope,
                    role=turn["role"],
                    created_at=created,
                    metadata=MappingProxyType({"session": sid, "date": date}),
                )
            )
            if has_answer:
                evidence[mid] = 1
    if len(problems) > before:
        return [], None, {}
    audit["has_answer_outside_answer_sessions"] += [
        f"{qid}:{s}" for s in sorted(evidence_sessions - set(answer_sessions))
    ]
    audit["answer_sessions_without_has_answer"] += [
        f"{qid}:{s}" for s in answer_sessions if s not in evidence_sessions
    ]
    audit["answer_sessions_not_in_haystack"] += [f"{qid}:{s}" for s in answer_sessions if s not in seen]
    labels = {"question_type": item["question_type"], "abstention": "yes" if is_abstention(qid) else "no"}
    query = Query(
        id=qid, text=item["question"].strip(), scope=scope, labels=MappingProxyType(labels), now=now
    )
    if is_abstention(qid):
        audit["abstention"].append(qid)
        return memories, query, {}
    if not evidence:
        audit["unscorable"].append(qid)
        return memories, None, {}
    return memories, query, evidence


_AUDIT = {
    "abstention": "abstention question(s) (`_abs`): kept with no relevant memory, reported apart "
    "(upstream leaves "
    "them out of its retrieval metrics)",
    "unscorable": "non-abstention question(s) with no indexed evidence turn: skipped (cannot be scored; with "
    "roles=user, assistant-side evidence is not indexed: roles=all indexes it)",
    "evidence_not_indexed": "has_answer turn(s) of a role not indexed (suite.roles)",
    "empty_turns": "turn(s) with empty content, not indexed",
    "has_answer_outside_answer_sessions": "session(s) with has_answer turns not in answer_session_ids",
    "answer_sessions_without_has_answer": "answer session(s) with no has_answer turn: not relevant at any "
    "granularity (upstream: `noans`)",
    "answer_sessions_not_in_haystack": "answer_session_ids naming a session not in the haystack",
}


def load_longmemeval(
    path: str | Path,
    *,
    name: str = "longmemeval",
    k: int = 10,
    roles: str = "user",
    granularity: str = "turn",
    errata: str | None = None,
) -> Suite:
    """Load a LongMemEval file (S, M or oracle) as a suite: a scope per question's haystack."""
    check_granularity(granularity)
    if roles not in ROLES:
        raise SuiteError(
            [Problem("suite config", None, "suite.roles", f"must be user or all, got {roles!r}")]
        )
    path = Path(path)
    problems: list[Problem] = []
    data = _read_json(path, problems)
    if data is not _FAILED and not isinstance(data, list):
        problems.append(Problem(str(path), None, None, "must be a JSON list of LongMemEval instances"))
    if problems:
        raise SuiteError(problems[:MAX_PROBLEMS])
    audit: dict[str, list[str]] = {key: [] for key in _AUDIT}
    memories, queries, qrels, ids = [], [], {}, set()
    for i, item in enumerate(data):
        m, query, evidence = _instance(item, i, str(path), ROLES[roles], problems, audit)
        if len(problems) >= MAX_PROBLEMS:
            break
        if query is not None and query.id in ids:
            problems.append(Problem(str(path), None, f"[{i}].question_id", f"repeats question {query.id!r}"))
            continue
        memories += m
        if query is not None:
            ids.add(query.id)
            queries.append(query)
            if evidence:
                qrels[query.id] = evidence
    if problems:
        raise SuiteError(problems[:MAX_PROBLEMS])
    notes = [
        f"LongMemEval: {len(found)} {_AUDIT[key]} ({'; '.join(found[:10])}{' ...' * (len(found) > 10)})"
        for key, found in audit.items()
        if found
    ]
    counts = {key: len(found) for key, found in audit.items()}
    suite = Suite(
        name=name,
        memories=tuple(memories),
        queries=tuple(queries),
        qrels=qrels,
        k=k,
        description=f"LongMemEval from {path}",
        label_names=("question_type", "abstention") if queries else (),
        notes=tuple(notes),
        tags={"roles": roles, "evidence_audit": json.dumps(counts)},
    )
    return finish(
        suite,
        granularity=granularity,
        session_of=lambda m: f"{m.scope['question']}:{m.metadata['session']}",
        errata=errata,
        files=[(path.name, path)],
    )
