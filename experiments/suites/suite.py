"""The evaluation suite: memories + queries + relevance judgements, as one plain value object.

Every loader (canonical JSONL, BEAM, generated suites) returns a `Suite`; `check_suite` applies the
rules every suite obeys, so a bad suite fails before any work starts, naming file, line and field.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from retrieval.types import Memory, Query


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input: where (file, line, field) and what."""

    file: str
    line: int | None
    field: str | None
    message: str

    def __str__(self) -> str:
        where = self.file + (f":{self.line}" if self.line else "")
        return f"{where}: {self.field + ': ' if self.field else ''}{self.message}"


class SuiteError(ValueError):
    """A suite failed validation; carries every problem found (up to a limit), each with its place."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        more = "" if len(problems) < MAX_PROBLEMS else f"\n(stopped after {MAX_PROBLEMS} problems)"
        super().__init__("invalid suite:\n" + "\n".join(f"  {p}" for p in problems) + more)


MAX_PROBLEMS = 50


@dataclass(frozen=True, eq=False)
class Suite:
    name: str
    memories: tuple[Memory, ...]
    queries: tuple[Query, ...]
    qrels: Mapping[str, Mapping[str, int]]
    k: int = 10
    version: str = ""
    description: str = ""
    label_names: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())  # what a loader skipped or adjusted, said aloud

    @functools.cached_property
    def content_hash(self) -> str:
        """sha256 of the canonical serialisation: the identity results and caches are keyed by."""
        from experiments.suites.jsonl import memory_record, query_record

        digest = hashlib.sha256()
        for record in map(memory_record, self.memories):
            digest.update(_dumps(record).encode())
        digest.update(b"\x00queries\x00")
        for record in map(query_record, self.queries):
            digest.update(_dumps(record).encode())
        digest.update(b"\x00qrels\x00")
        for qid in sorted(self.qrels):
            for mid, grade in sorted(self.qrels[qid].items()):
                digest.update(f"{qid}\t{mid}\t{grade}\n".encode())
        return digest.hexdigest()

    def is_abstention(self, query_id: str) -> bool:
        return not any(g > 0 for g in self.qrels.get(query_id, {}).values())

    def summary(self) -> dict[str, Any]:
        labels: dict[str, dict[str, int]] = {}
        for q in self.queries:
            for name, value in q.labels.items():
                labels.setdefault(name, {}).setdefault(value, 0)
                labels[name][value] += 1
        return {
            "name": self.name,
            "memories": len(self.memories),
            "queries": len(self.queries),
            "abstention_queries": sum(self.is_abstention(q.id) for q in self.queries),
            "scopes": len({m.scope_key for m in self.memories}),
            "judgements": sum(len(v) for v in self.qrels.values()),
            "relevant": sum(g > 0 for v in self.qrels.values() for g in v.values()),
            "labels": labels,
            "content_hash": self.content_hash[:12],
        }


def _dumps(record: Mapping[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n"


def check_suite(suite: Suite, *, files: Mapping[str, str] | None = None) -> None:
    """Rules across records: unique ids, judgements naming known ids in the query's own scope.

    `files` names the source of memories/queries/qrels for messages (defaults to the kind).
    """
    files = {"memories": "memories", "queries": "queries", "qrels": "qrels", **(files or {})}
    problems: list[Problem] = []

    def add(kind: str, line: int | None, fld: str | None, message: str) -> None:
        if len(problems) < MAX_PROBLEMS:
            problems.append(Problem(files[kind], line, fld, message))

    memory_scope: dict[str, str] = {}
    for line, m in enumerate(suite.memories, 1):
        if m.id in memory_scope:
            add("memories", line, "id", f"duplicate memory id {m.id!r}")
        memory_scope[m.id] = m.scope_key
    query_scope: dict[str, str] = {}
    for line, q in enumerate(suite.queries, 1):
        if q.id in query_scope:
            add("queries", line, "id", f"duplicate query id {q.id!r}")
        query_scope[q.id] = q.scope_key
    if not suite.memories:
        add("memories", None, None, "the suite has no memories")
    if not suite.queries:
        add("queries", None, None, "the suite has no queries")
    for qid, judged in suite.qrels.items():
        if qid not in query_scope:
            add("qrels", None, "query_id", f"judgement for unknown query {qid!r}")
            continue
        for mid in judged:
            if mid not in memory_scope:
                add("qrels", None, "memory_id", f"query {qid!r} judges unknown memory {mid!r}")
            elif memory_scope[mid] != query_scope[qid]:
                add("qrels", None, "memory_id", f"query {qid!r} judges memory {mid!r} of another scope")
    if problems:
        raise SuiteError(problems)
