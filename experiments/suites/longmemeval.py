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

from experiments.evaluate.metrics.official_longmemeval import LongMemEvalScorer
from experiments.suites import fields
from experiments.suites.beam import _FAILED, _read_json
from experiments.suites.granularity import check_granularity
from experiments.suites.options import check_protocol, finish
from experiments.suites.suite import MAX_PROBLEMS, Gathered, Problem, Suite, SuiteError
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


# What a run under protocol=official says of LongMemEval's own scorer (the suite's notes).
OFFICIAL_NOTE = (
    "protocol=official: recall_any/recall_all/ndcg_any@k (session_*: the session view of a turn run) "
    "are upstream's; the overall mean is src/evaluation/print_retrieval_metrics.py's (every "
    "non-abstention question), label lme_average='both scripts' is src/retrieval/run_retrieval.py's"
)


def _answer_text(answer: object) -> str | None:
    """The gold answer as text: LongMemEval holds a few as numbers (the answer stage judges text)."""
    return None if answer is None or isinstance(answer, bool | dict | list) else str(answer)


def is_abstention(question_id: str, official: bool = False) -> bool:
    """memeval: the id ends with `_abs`; upstream (run_retrieval.py:396, print_retrieval_metrics.py:12): it
    holds `_abs` anywhere."""
    return "_abs" in question_id if official else question_id.endswith("_abs")


# Which of upstream's two averages a question is in (label `lme_average`, protocol=official):
# print_retrieval_metrics.py averages every non-abstention question; run_retrieval.py (:389-405) also leaves
# out those with no `has_answer` user turn in the whole haystack.
BOTH_SCRIPTS = "both scripts"
PRINT_ONLY = "print_retrieval_metrics.py only"
NEITHER = "neither (abstention)"


def _upstream_corpus(sessions: list[tuple[str, list[dict]]], turns: bool) -> list[tuple[str, str]]:
    """(upstream corpus id, memory id suffix) for each document of upstream's corpus, in order
    (run_retrieval.py:202-229): the user turns, empty ones included, or the sessions; in a session whose id
    holds `answer`, a turn without `has_answer` (a session without any) is renamed `noans`."""
    out = []
    for sid, session in sessions:
        user = [(t, turn) for t, turn in enumerate(session) if turn["role"] == "user"]
        if not turns:
            silent = "answer" in sid and not any(turn.get("has_answer") for _, turn in user)
            out.append((sid.replace("answer", "noans") if silent else sid, sid))
            continue
        for t, turn in user:
            cid = f"{sid}_{t + 1}"
            silent = "answer" in sid and not turn.get("has_answer")
            out.append((cid.replace("answer", "noans") if silent else cid, cid))
    return out


def _instance(
    item: Any,
    i: int,
    path: str,
    keep_roles: tuple[str, ...],
    problems: list[Problem],
    audit: dict[str, list[str]],
    official: str | None = None,
) -> tuple[list[Memory], Query | None, dict[str, int], list[tuple[str, str]]]:
    """An instance's memories, query, evidence and, with `official` (the granularity, protocol=official),
    upstream's corpus (experiments/evaluate/metrics/official_longmemeval.py scores the run against it)."""
    where = f"[{i}]"
    before = len(problems)
    if not isinstance(item, dict):
        problems.append(Problem(path, None, where, "an instance must be an object"))
        return [], None, {}, []
    qid = item.get("question_id")
    if (problem := fields.id_problem(qid)) is not None:
        problems.append(Problem(path, None, f"{where}.question_id", problem))
        return [], None, {}, []
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
        return [], None, {}, []
    answer_sessions = item.get("answer_session_ids")
    if not isinstance(answer_sessions, list) or not all(isinstance(s, str) for s in answer_sessions):
        problems.append(Problem(path, None, f"{where}.answer_session_ids", "must be a list of session ids"))
        return [], None, {}, []
    scope = MappingProxyType({"question": qid})
    memories, evidence, seen, read = [], {}, set(), []
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
        read.append((sid, session))
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
            # upstream counts a has_answer turn only inside a session whose id holds `answer`
            counts = has_answer and (official is None or "answer" in sid)
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
            if counts:
                evidence[mid] = 1
    if len(problems) > before:
        return [], None, {}, []
    audit["has_answer_outside_answer_sessions"] += [
        f"{qid}:{s}" for s in sorted(evidence_sessions - set(answer_sessions))
    ]
    audit["answer_sessions_without_has_answer"] += [
        f"{qid}:{s}" for s in answer_sessions if s not in evidence_sessions
    ]
    audit["answer_sessions_not_in_haystack"] += [f"{qid}:{s}" for s in answer_sessions if s not in seen]
    abstains = is_abstention(qid, official is not None)
    labels = {"question_type": item["question_type"], "abstention": "yes" if abstains else "no"}
    if official is not None:
        targets = any(t.get("has_answer") for _, session in read for t in session if t["role"] == "user")
        labels["lme_average"] = NEITHER if abstains else BOTH_SCRIPTS if targets else PRINT_ONLY
    query = Query(
        id=qid,
        text=item["question"].strip(),
        scope=scope,
        labels=MappingProxyType(labels),
        now=now,
        answer=_answer_text(item.get("answer")),
    )
    corpus = _upstream_corpus(read, official == "turn") if official is not None else []
    if abstains:
        audit["abstention"].append(qid)
        return memories, query, {}, corpus
    if not evidence:
        audit["unscorable"].append(qid)
        if official is None:
            return memories, None, {}, []
    return memories, query, evidence, corpus


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


# What protocol=official does differently with some of the above (upstream's own rules).
_OFFICIAL = {
    "abstention": "abstention question(s) (`_abs` anywhere in the id, as upstream): reported apart, as "
    "upstream leaves them out of both averages",
    "unscorable": "non-abstention question(s) with no has_answer user turn in an `answer` session: scored as "
    "upstream scores them (recall_any 0, recall_all 1, ndcg_any 0)",
    "has_answer_outside_answer_sessions": "session(s) with has_answer turns not in answer_session_ids "
    "(upstream counts a has_answer turn only in a session whose id holds `answer`)",
}


def load_longmemeval(
    path: str | Path,
    *,
    name: str = "longmemeval",
    k: int = 10,
    roles: str = "user",
    granularity: str = "turn",
    errata: str | None = None,
    protocol: str = "official",
) -> Suite:
    """Load a LongMemEval file (S, M or oracle) as a suite: a scope per question's haystack, scored by
    upstream's conventions (`protocol=official`) or memeval's (`memeval`)."""
    check_granularity(granularity)
    if roles not in ROLES:
        raise SuiteError(
            [Problem("suite config", None, "suite.roles", f"must be user or all, got {roles!r}")]
        )
    user_only = ("suite.roles", "upstream indexes the user turns only: roles=all is protocol=memeval's")
    check_protocol(protocol, granularity, errata, memeval_only=user_only if roles != "user" else None)
    official = granularity if protocol == "official" else None
    path = Path(path)
    problems: list[Problem] = []
    data = _read_json(path, problems)
    if data is not _FAILED and not isinstance(data, list):
        problems.append(Problem(str(path), None, None, "must be a JSON list of LongMemEval instances"))
    if problems:
        raise SuiteError(problems[:MAX_PROBLEMS])
    audit: dict[str, list[str]] = {key: [] for key in _AUDIT}
    memories, queries, qrels, ids = [], [], {}, set()
    corpus: dict[str, tuple[str, ...]] = {}
    position: dict[str, dict[str, int]] = {}
    for i, item in enumerate(data):
        m, query, evidence, upstream = _instance(item, i, str(path), ROLES[roles], problems, audit, official)
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
            if official is not None and not is_abstention(query.id, official=True):
                corpus[query.id] = tuple(cid for cid, _ in upstream)
                position[query.id] = {f"{query.id}:{suffix}": n for n, (_, suffix) in enumerate(upstream)}
    if problems:
        raise SuiteError(problems[:MAX_PROBLEMS])
    explained = {**_AUDIT, **(_OFFICIAL if official else {})}
    notes = [
        f"LongMemEval: {len(found)} {explained[key]} ({'; '.join(found[:10])}{' ...' * (len(found) > 10)})"
        for key, found in audit.items()
        if found
    ]
    counts = {key: len(found) for key, found in audit.items()}
    scorer = (
        None
        if official is None
        else LongMemEvalScorer(corpus=corpus, position=position, turns=official == "turn")
    )
    return finish(
        Gathered(memories, queries, qrels).suite(
            name,
            scorer=scorer,
            scorer_note=OFFICIAL_NOTE,
            k=k,
            description=f"LongMemEval from {path}",
            label_names=(
                ("question_type", "abstention", "lme_average")
                if official
                else ("question_type", "abstention")
            )
            if queries
            else (),
            notes=tuple(notes),
            tags={"roles": roles, "evidence_audit": json.dumps(counts), "protocol": protocol},
        ),
        granularity=granularity,
        session_of=lambda m: f"{m.scope['question']}:{m.metadata['session']}",
        errata=errata,
        files=[(path.name, path)],
    )
