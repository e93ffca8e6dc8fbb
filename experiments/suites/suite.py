"""The evaluation suite: memories + queries + relevance judgements, as one plain value object.

Every loader (canonical JSONL, BEAM, generated suites) returns a `Suite`; `check_suite` applies the
rules every suite obeys, so a bad suite fails before any work starts, naming file, line and field.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from experiments.names import name_problem
from experiments.suites import fields
from retrieval.types import Concept, Feedback, Knowledge, Memory, Query, Relation, memory_record

if TYPE_CHECKING:
    from experiments.evaluate.metrics.official import BenchmarkScorer


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
    # The statistical unit (suite.yaml `cluster`): which queries are not independent of each other.
    # `scope`: questions about one conversation; `query`: none (independent scenarios); `label.<name>`.
    cluster: str = "scope"
    notes: tuple[str, ...] = field(default=())  # what a loader skipped or adjusted, said aloud
    # Concept graphs and feedback records the evaluated system holds (optional; scoped like memories).
    knowledge: Knowledge = field(default_factory=Knowledge)
    # What a run states about where the suite came from (granularity, dataset release and file hashes,
    # errata applied): written to every run's tags.json and MLflow tags, not part of the content hash.
    tags: Mapping[str, str] = field(default_factory=dict)
    # A benchmark's own scorer (`suite.protocol=official`, experiments/evaluate/metrics/official.py): which
    # queries are scored and upstream's value of the metrics it owns. It reads the run, never retrieval, so
    # it is not part of the content hash (the `protocol` tag and the run config say which was used).
    scorer: BenchmarkScorer | None = None

    @functools.cached_property
    def content_hash(self) -> str:
        """sha256 of the canonical serialisation: the identity results and caches are keyed by."""
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
        if self.knowledge:  # absent knowledge adds nothing: older suites keep their hash
            for kind, records in knowledge_records(self.knowledge).items():
                digest.update(f"\x00{kind}\x00".encode())
                for record in records:
                    digest.update(_dumps(record).encode())
        return digest.hexdigest()

    def is_abstention(self, query_id: str) -> bool:
        """Reported apart: no relevant memory, or, with a benchmark's scorer, a query upstream leaves out."""
        if self.scorer is not None:
            return query_id not in self.scorer.scored
        return not any(g > 0 for g in self.qrels.get(query_id, {}).values())

    def summary(self) -> dict[str, Any]:
        """Counts that describe the suite (a fresh copy each call: callers extend it)."""
        return copy.deepcopy(self._summary)

    @functools.cached_property
    def _summary(self) -> dict[str, Any]:  # computed once: a sweep asks for it on every job
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
            "k": self.k,  # the suite's declared default cutoff (suite.yaml `k`)
            "label_names": list(self.label_names),
            "content_hash": self.content_hash[:12],
            **(
                {
                    "concepts": len(self.knowledge.concepts),
                    "relations": len(self.knowledge.relations),
                    "feedback": len(self.knowledge.feedback),
                }
                if self.knowledge
                else {}
            ),
        }


def _dumps(record: Mapping[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n"


@dataclass
class Gathered:
    """What a loader or generator has read so far: the suite's records and the notes it made. `suite()` is
    how every one of them ends, written once."""

    memories: list[Memory] = field(default_factory=list)
    queries: list[Query] = field(default_factory=list)
    qrels: dict[str, Mapping[str, int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(
        self,
        memories: Sequence[Memory],
        queries: Sequence[Query],
        qrels: Mapping[str, Mapping[str, int]],
        notes: Sequence[str] = (),
    ) -> None:
        """One unit's records (a conversation, a sample), after those read before it."""
        self.memories += memories
        self.queries += queries
        self.qrels.update(qrels)
        self.notes += notes

    def suite(
        self,
        name: str,
        *,
        problems: Sequence[Problem] = (),
        scorer: BenchmarkScorer | None = None,
        scorer_note: str = "",
        **fields: Any,
    ) -> Suite:
        """The problems found refused together (SuiteError), then the Suite of what was read (`fields`: k,
        description, label_names, notes, tags...), with a benchmark's own scorer, its note and its tag
        where it has one (`suite.protocol=official`)."""
        if problems:
            raise SuiteError(list(problems)[:MAX_PROBLEMS])
        suite = Suite(name, tuple(self.memories), tuple(self.queries), self.qrels, **fields)
        if scorer is None:
            return suite
        notes, tags = (*suite.notes, scorer_note), {**suite.tags, "official_scorer": scorer.name}
        return dataclasses.replace(suite, scorer=scorer, notes=notes, tags=tags)


def check_suite(
    suite: Suite,
    *,
    files: Mapping[str, str] | None = None,
    lines: Mapping[str, Sequence[int]] | None = None,
) -> None:
    """The rules every suite obeys, whatever loaded or generated it, in one pass before any work.

    Fields (experiments/suites/fields.py): ids, texts, scopes, finite numbers, valid Unicode; suite
    metadata: `k` a positive integer, query labels among the declared `label_names` (when declared)
    and every declared name used; across records: unique ids, judgements naming known ids in the
    query's own scope, integer grades. Raises SuiteError with every problem (up to MAX_PROBLEMS).
    `files` names the source of suite/memories/queries/qrels for messages (defaults to the kind);
    `lines` gives each memory's and query's line in its file (defaults to its position, from 1).
    """
    files = {
        "suite": "suite",
        "memories": "memories",
        "queries": "queries",
        "qrels": "qrels",
        "concepts": "concepts",
        "relations": "relations",
        "feedback": "feedback",
        **(files or {}),
    }
    lines = lines or {}
    problems: list[Problem] = []

    def add(kind: str, line: int | None, fld: str | None, message: str | None) -> None:
        if message is not None and len(problems) < MAX_PROBLEMS:
            problems.append(Problem(files[kind], line, fld, message))

    def line_of(kind: str, position: int) -> int:
        numbers = lines.get(kind)
        return numbers[position] if numbers is not None and position < len(numbers) else position + 1

    try:  # the content hash encodes every string as UTF-8: if that works, no record holds a lone surrogate
        unicode_ok = bool(suite.content_hash)
    except UnicodeEncodeError:
        unicode_ok = False  # find which records and fields, below
    add("suite", None, "name", name_problem("suite", suite.name))
    add("suite", None, "k", fields.cutoff_problem(suite.k))
    add("suite", None, "labels", fields.label_names_problem(suite.label_names))

    def records(kind: str, noun: str, items: Sequence[Any], record: Any, rules: Any, more: Any = None):
        """Each memory's or query's own problems at its line (a duplicate id, its fields, then `more`'s);
        returns each one's scope by id."""
        scopes: dict[str, dict[str, str]] = {}
        for position, item in enumerate(items):
            line = line_of(kind, position)
            if item.id in scopes:
                add(kind, line, "id", f"duplicate {noun} id {item.id!r}")
            for name, problem in _record_problems(item, record, rules, unicode_ok):
                add(kind, line, name, problem)
            if more is not None:
                more(item, line)
            scopes[item.id] = dict(item.scope)
        return scopes

    declared = set(suite.label_names)
    used: set[str] = set()

    def labels(query: Any, line: int) -> None:
        used.update(query.labels)
        for name in sorted(set(query.labels) - declared if declared else ()):
            message = f"not a declared label (declared: {', '.join(suite.label_names)})"
            add("queries", line, f"labels.{name}", message)

    memory_scope = records("memories", "memory", suite.memories, memory_record, _MEMORY_RULES)
    query_scope = records("queries", "query", suite.queries, query_record, _QUERY_RULES, labels)
    for name in suite.label_names:
        if name not in used and suite.queries:
            add("suite", None, "labels", f"declares label {name!r}, but no query has it")
    if not suite.memories:
        add("memories", None, None, "the suite has no memories")
    if not suite.queries:
        add("queries", None, None, "the suite has no queries")
    for qid, judged in suite.qrels.items():
        if qid not in query_scope:
            add("qrels", None, "query_id", f"judgement for unknown query {qid!r}")
            continue
        for mid, grade in judged.items():
            if not isinstance(grade, int) or isinstance(grade, bool):
                add("qrels", None, "grade", f"query {qid!r} grades memory {mid!r} {grade!r}: not an integer")
            if mid not in memory_scope:
                add("qrels", None, "memory_id", f"query {qid!r} judges unknown memory {mid!r}")
            elif memory_scope[mid] != query_scope[qid]:
                add("qrels", None, "memory_id", f"query {qid!r} judges memory {mid!r} of another scope")
    _check_knowledge(suite.knowledge, memory_scope, add, line_of)
    if problems:
        raise SuiteError(problems)


def _check_knowledge(
    knowledge: Knowledge,
    memory_scope: Mapping[str, dict[str, str]],
    add: Callable[[str, int | None, str | None, str | None], None],
    line_of: Callable[[str, int], int],
) -> None:
    """Concepts, relations and feedback: valid fields, unique ids, links to known memories of the
    record's own scope; relations of a known type between known concepts of one scope, no self-loop,
    each (source, target, relation) once."""
    concept_scope: dict[str, dict[str, str]] = {}
    for kind, records, rules in (
        ("concepts", knowledge.concepts, _CONCEPT_RULES),
        ("feedback", knowledge.feedback, _FEEDBACK_RULES),
    ):
        seen: set[str] = set()
        for position, record in enumerate(records):
            line = line_of(kind, position)
            if record.id in seen:
                add(kind, line, "id", f"duplicate {kind} id {record.id!r}")
            seen.add(record.id)
            for name, rule in rules.items():
                add(kind, line, name, rule(getattr(record, name)))
            for mid in record.memory_ids:
                if mid not in memory_scope:
                    add(kind, line, "memory_ids", f"unknown memory {mid!r}")
                elif memory_scope[mid] != dict(record.scope):
                    add(kind, line, "memory_ids", f"memory {mid!r} is of another scope")
            if kind == "concepts":
                concept_scope[record.id] = dict(record.scope)
    triples: set[tuple[str, str, str]] = set()
    for position, relation in enumerate(knowledge.relations):
        line = line_of("relations", position)
        add("relations", line, "relation", fields.relation_type_problem(relation.relation))
        for end in ("source", "target"):
            value = getattr(relation, end)
            problem = fields.id_problem(value)
            if problem is None and value not in concept_scope:
                problem = f"unknown concept {value!r}"
            add("relations", line, end, problem)
        if relation.source == relation.target:
            add("relations", line, "target", f"a self-loop on {relation.source!r}")
        elif (
            relation.source in concept_scope
            and relation.target in concept_scope
            and concept_scope[relation.source] != concept_scope[relation.target]
        ):
            add("relations", line, "target", "links concepts of two scopes")
        triple = (relation.source, relation.target, relation.relation)
        if triple in triples:
            add("relations", line, None, f"duplicate relation {' '.join(triple)}")
        triples.add(triple)


_CONCEPT_RULES: dict[str, Callable[[Any], str | None]] = {
    "id": fields.id_problem,
    "name": fields.text_problem,
    "scope": fields.scope_problem,
    "content": fields.string_problem,
    "memory_ids": fields.id_list_problem,
}
_FEEDBACK_RULES: dict[str, Callable[[Any], str | None]] = {
    "id": fields.id_problem,
    "topic": fields.text_problem,
    "prediction": fields.text_problem,
    "correction": fields.text_problem,
    "scope": fields.scope_problem,
    "context": fields.string_problem,
    "importance": fields.unit_number_problem,
    "created_by": fields.string_problem,
    "memory_ids": fields.id_list_problem,
}


_MEMORY_RULES: dict[str, Callable[[Any], str | None]] = {
    "id": fields.id_problem,
    "text": fields.text_problem,
    "scope": fields.scope_problem,
    "confidence": fields.number_problem,
    "strength": fields.number_problem,
}
_QUERY_RULES: dict[str, Callable[[Any], str | None]] = {
    "id": fields.id_problem,
    "text": fields.text_problem,
    "scope": fields.scope_problem,
    "labels": fields.label_values_problem,
}


def _record_problems(
    record: Any,
    as_dict: Callable[[Any], dict[str, Any]],
    rules: Mapping[str, Callable[[Any], str | None]],
    unicode_ok: bool,
) -> Iterator[tuple[str, str]]:
    """(field, message) for each rule a record breaks; valid Unicode first (nothing else is reliable)."""
    if not unicode_ok:
        bad_text = list(fields.surrogates(as_dict(record)))
        if bad_text:
            yield from bad_text
            return
    for name, rule in rules.items():
        value = getattr(record, name)
        if value is not None or name in ("id", "text", "scope"):
            problem = rule(value)
            if problem is not None:
                yield name, problem


# The canonical record of a query: what suites are saved as, hashed by and validated on (a memory's,
# retrieval.types.memory_record, is also what live adapters send a service).
def query_record(q: Query) -> dict[str, Any]:
    record: dict[str, Any] = {"id": q.id, "text": q.text, "scope": dict(q.scope)}
    optional = {
        "labels": dict(q.labels) or None,
        "now": q.now,
        "context": dict(q.context) or None,
        "noise_patterns": list(q.noise_patterns) or None,
        "expected_domains": list(q.expected_domains) or None,
    }
    record.update({k: v for k, v in optional.items() if v is not None})
    return record


def gold_record(q: Query) -> dict[str, Any]:
    """A query's gold answer fields (the answer stage's), saved with it but never hashed: retrieval does
    not read them, so a suite that gains them keeps its content hash (and its cached results)."""
    optional = {
        "answer": q.answer,
        "rubric": list(q.rubric) or None,
        "adversarial_answer": q.adversarial_answer,
    }
    return {k: v for k, v in optional.items() if v is not None}


def concept_record(c: Concept) -> dict[str, Any]:
    record: dict[str, Any] = {"id": c.id, "name": c.name, "scope": dict(c.scope)}
    optional = {"content": c.content or None, "labels": list(c.labels) or None}
    record.update({k: v for k, v in optional.items() if v is not None})
    record["memory_ids"] = list(c.memory_ids)
    return record


def relation_record(r: Relation) -> dict[str, Any]:
    return {"source": r.source, "target": r.target, "relation": r.relation}


def feedback_record(f: Feedback) -> dict[str, Any]:
    record: dict[str, Any] = {
        "id": f.id,
        "topic": f.topic,
        "prediction": f.prediction,
        "correction": f.correction,
        "scope": dict(f.scope),
    }
    optional = {"context": f.context or None, "created_by": f.created_by or None}
    record.update({k: v for k, v in optional.items() if v is not None})
    record["importance"] = f.importance
    record["memory_ids"] = list(f.memory_ids)
    return record


def knowledge_records(knowledge: Knowledge) -> dict[str, list[dict[str, Any]]]:
    """The canonical records of a suite's knowledge, by file stem (concepts, relations, feedback)."""
    return {
        "concepts": [concept_record(c) for c in knowledge.concepts],
        "relations": [relation_record(r) for r in knowledge.relations],
        "feedback": [feedback_record(f) for f in knowledge.feedback],
    }
