"""The canonical on-disk suite format (docs/suites.md): read, validate, write.

    DIR/suite.yaml       optional: name, version, description, k, labels, cluster (the statistical unit)
    DIR/memories.jsonl   one memory object a line
    DIR/queries.jsonl    one query object a line
    DIR/qrels.tsv        TREC qrels: query_id 0 memory_id grade
    DIR/concepts.jsonl   optional: concept graph nodes (id, name, content, labels, scope, memory_ids)
    DIR/relations.jsonl  optional: typed edges between concepts (source, target, relation)
    DIR/feedback.jsonl   optional: corrections (id, topic, prediction, correction, scope, memory_ids...)

Reading validates everything before returning: malformed JSON (NaN/Infinity included), non-UTF-8
bytes, missing or mistyped fields, unknown fields, ids that would corrupt a TREC file, duplicate ids,
judgements naming unknown ids, a bounded suite.yaml with `k` and `labels` checked; every problem is
reported with its file, line and field, all at once. The rules: docs/suites.md and
experiments/suites/fields.py (shared with every other loader through `check_suite`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from experiments.names import name_problem
from experiments.suites import fields
from experiments.suites.errata import apply_errata
from experiments.suites.files import MAX_FILE_BYTES, FileTooLarge, read_suite_file, reads_folder, size_text
from experiments.suites.suite import (
    MAX_PROBLEMS,
    Problem,
    Suite,
    SuiteError,
    check_suite,
    gold_record,
    knowledge_records,
    memory_record,
    query_record,
)
from retrieval.types import RESERVED_METADATA_KEYS, Concept, Feedback, Knowledge, Memory, Query, Relation

IMPORTANCE = ("critical", "high", "medium", "low")
MAX_YAML_BYTES = 64 * 1024  # suite.yaml holds a name, a description, k and label names
MAX_YAML_DEPTH = 8
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: same rules, faster
SUITE_YAML_FIELDS = ("name", "version", "description", "k", "labels", "cluster")


def _str_list(v: Any) -> str | None:
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return None
    return f"must be a list of strings, got {v!r:.60}"


def _one_of(choices: tuple[str, ...]) -> Callable[[Any], str | None]:
    return lambda v: None if v in choices else f"must be one of {', '.join(choices)}, got {v!r:.60}"


def _is(kind: type, wants: str) -> Callable[[Any], str | None]:
    return lambda v: None if isinstance(v, kind) else f"must be {wants}, got {v!r:.60}"


# field -> (required, rule: value -> problem message or None); the rules live in experiments.suites.fields
Schema = Mapping[str, tuple[bool, Callable[[Any], str | None]]]
_OPT_STR = (False, fields.string_problem)
MEMORY_SCHEMA: Schema = {
    "id": (True, fields.id_problem),
    "text": (True, fields.text_problem),
    "scope": (True, fields.scope_problem),
    "created_at": _OPT_STR,
    "tier": _OPT_STR,
    "tags": (False, _str_list),
    "importance": (False, _one_of(IMPORTANCE)),
    "confidence": (False, fields.number_problem),
    "strength": (False, fields.number_problem),
    "deleted": (False, _is(bool, "true or false")),
    "role": _OPT_STR,
    "metadata": (False, _is(dict, "an object")),
}
QUERY_SCHEMA: Schema = {
    "id": (True, fields.id_problem),
    "text": (True, fields.text_problem),
    "scope": (True, fields.scope_problem),
    "labels": (False, fields.label_values_problem),
    "now": _OPT_STR,
    "context": (False, _is(dict, "an object")),
    "noise_patterns": (False, _str_list),
    "expected_domains": (False, _str_list),
    # the answer stage's gold (docs/answers.md): read and saved, not part of the content hash
    "answer": _OPT_STR,
    "rubric": (False, _str_list),
    "adversarial_answer": _OPT_STR,
}

CONCEPT_SCHEMA: Schema = {
    "id": (True, fields.id_problem),
    "name": (True, fields.text_problem),
    "scope": (True, fields.scope_problem),
    "content": _OPT_STR,
    "labels": (False, _str_list),
    "memory_ids": (True, fields.id_list_problem),
}
RELATION_SCHEMA: Schema = {
    "source": (True, fields.id_problem),
    "target": (True, fields.id_problem),
    "relation": (True, fields.relation_type_problem),
}
FEEDBACK_SCHEMA: Schema = {
    "id": (True, fields.id_problem),
    "topic": (True, fields.text_problem),
    "prediction": (True, fields.text_problem),
    "correction": (True, fields.text_problem),
    "scope": (True, fields.scope_problem),
    "context": _OPT_STR,
    "importance": (False, fields.unit_number_problem),
    "created_by": _OPT_STR,
    "memory_ids": (True, fields.id_list_problem),
}
KNOWLEDGE_FILES = {"concepts": CONCEPT_SCHEMA, "relations": RELATION_SCHEMA, "feedback": FEEDBACK_SCHEMA}


def _read_bytes(path: Path, problems: list[Problem], limit: int = MAX_FILE_BYTES) -> bytes | None:
    """The file's bytes, or None with a problem naming the file (missing, a directory, not a regular
    file, over `limit` bytes, unreadable): experiments.suites.files."""
    try:
        return read_suite_file(path, limit)
    except FileNotFoundError:
        problems.append(Problem(path.name, None, None, f"file is missing in {path.parent}"))
    except IsADirectoryError:
        problems.append(Problem(path.name, None, None, f"{path} is a directory, not a file"))
    except FileTooLarge:
        problems.append(Problem(path.name, None, None, f"larger than {size_text(limit)}"))
    except OSError as err:
        problems.append(Problem(path.name, None, None, f"cannot read {path}: {err.strerror or err}"))
    return None


def _read_lines(path: Path, problems: list[Problem]) -> list[tuple[int, str]] | None:
    data = _read_bytes(path, problems)
    if data is None:
        return None
    lines = []
    for number, raw in enumerate(data.splitlines(), 1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            problems.append(
                Problem(path.name, number, None, f"not UTF-8 text ({err.reason} at byte {err.start})")
            )
            continue
        if text.strip():
            lines.append((number, text))
    return lines


def _read_objects(path: Path, schema: Schema, problems: list[Problem]) -> list[tuple[int, dict]]:
    out = []
    for number, text in _read_lines(path, problems) or ():
        try:
            obj = fields.json_loads(text)
        except (ValueError, RecursionError) as err:
            problems.extend(
                Problem(path.name, number, where, message)
                for _, where, message in fields.json_problems(err, text)
            )
            continue
        if not isinstance(obj, dict):
            problems.append(Problem(path.name, number, None, "each line must be a JSON object"))
            continue
        bad_text = list(fields.surrogates(obj))
        for name, message in bad_text:
            problems.append(Problem(path.name, number, name, message))
        if bad_text:
            continue
        found = field_problems(obj, schema)
        problems.extend(Problem(path.name, number, name, message) for name, message in found)
        if not found:
            out.append((number, obj))
    return out


def field_problems(obj: Mapping[str, Any], schema: Schema) -> list[tuple[str, str]]:
    """(field, problem) for each field of one JSON object the schema refuses: a required one missing, a
    value its rule rejects, a field the schema does not name (sorted)."""
    problems = []
    for name, (required, rule) in schema.items():
        if name not in obj:
            if required:
                problems.append((name, "missing required field"))
        elif (message := rule(obj[name])) is not None:
            problems.append((name, message))
    for name in sorted(map(str, obj.keys() - schema.keys())):
        problems.append((name, "unknown field (put extra data under metadata)"))
    return problems


def memory_from_json(obj: Mapping[str, Any]) -> Memory:
    """A Memory from one memories.jsonl object that passed MEMORY_SCHEMA (`field_problems`)."""
    return Memory(
        id=obj["id"],
        text=obj["text"],
        scope=MappingProxyType(dict(obj["scope"])),
        created_at=obj.get("created_at"),
        tier=obj.get("tier"),
        tags=tuple(obj.get("tags", ())),
        importance=obj.get("importance"),
        confidence=obj.get("confidence"),
        strength=obj.get("strength"),
        deleted=obj.get("deleted", False),
        role=obj.get("role"),
        metadata=MappingProxyType(dict(obj.get("metadata", {}))),
    )


def _query(obj: dict) -> Query:
    return Query(
        id=obj["id"],
        text=obj["text"],
        scope=MappingProxyType(dict(obj["scope"])),
        labels=MappingProxyType(dict(obj.get("labels", {}))),
        now=obj.get("now"),
        context=MappingProxyType(dict(obj.get("context", {}))),
        noise_patterns=tuple(obj.get("noise_patterns", ())),
        expected_domains=tuple(obj.get("expected_domains", ())),
        answer=obj.get("answer"),
        rubric=tuple(obj.get("rubric", ())),
        adversarial_answer=obj.get("adversarial_answer"),
    )


def _knowledge(objects: Mapping[str, list[tuple[int, dict]]]) -> Knowledge:
    return Knowledge(
        concepts=tuple(
            Concept(
                id=o["id"],
                name=o["name"],
                scope=MappingProxyType(dict(o["scope"])),
                content=o.get("content", ""),
                labels=tuple(o.get("labels", ())),
                memory_ids=tuple(o["memory_ids"]),
            )
            for _, o in objects.get("concepts", ())
        ),
        relations=tuple(
            Relation(o["source"], o["target"], o["relation"]) for _, o in objects.get("relations", ())
        ),
        feedback=tuple(
            Feedback(
                id=o["id"],
                topic=o["topic"],
                prediction=o["prediction"],
                correction=o["correction"],
                scope=MappingProxyType(dict(o["scope"])),
                context=o.get("context", ""),
                importance=float(o.get("importance", 1.0)),
                created_by=o.get("created_by", ""),
                memory_ids=tuple(o["memory_ids"]),
            )
            for _, o in objects.get("feedback", ())
        ),
    )


def _read_qrels(path: Path, memory_ids: set, query_ids: set, problems: list[Problem]) -> dict:
    qrels: dict[str, dict[str, int]] = {}
    for number, text in _read_lines(path, problems) or ():
        parts = re.split(r"[ \t]+", text.strip(" \t"))
        if len(parts) != 4:
            problems.append(
                Problem(path.name, number, None, "expected 4 columns: query_id 0 memory_id grade")
            )
            continue
        qid, iteration, mid, grade = parts
        found = [
            Problem(path.name, number, name, message)
            for name, message in (
                ("query_id", fields.id_problem(qid)),
                ("iteration", fields.ascii_int_problem(iteration)),
                ("memory_id", fields.id_problem(mid)),
                ("grade", fields.ascii_int_problem(grade)),
            )
            if message is not None
        ]
        problems.extend(found)
        if found:
            continue
        if qid not in query_ids:
            problems.append(Problem(path.name, number, "query_id", f"unknown query {qid!r}"))
        if mid not in memory_ids:
            problems.append(Problem(path.name, number, "memory_id", f"unknown memory {mid!r}"))
        if mid in qrels.get(qid, {}):
            problems.append(Problem(path.name, number, "memory_id", f"{qid!r} judges {mid!r} twice"))
        qrels.setdefault(qid, {})[mid] = int(grade)
    return qrels


def _read_meta(path: Path, problems: list[Problem]) -> dict[str, Any]:
    """suite.yaml (optional), loaded safely and bounded: at most MAX_YAML_BYTES, no anchors or aliases
    (an alias bomb of a few hundred bytes expands to gigabytes), nesting at most MAX_YAML_DEPTH deep
    (PyYAML's time grows with the square of it), only the known fields, each of the right type."""
    if not path.exists() and not path.is_symlink():
        return {}
    data = _read_bytes(path, problems, limit=MAX_YAML_BYTES)
    if data is None:
        return {}

    def refuse(event: yaml.Event, message: str) -> dict[str, Any]:
        problems.append(Problem(path.name, event.start_mark.line + 1, None, message))
        return {}

    try:
        text = data.decode("utf-8")
        depth = 0
        for event in yaml.parse(text, Loader=_YAML_LOADER):  # events only: nothing is built yet
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                return refuse(
                    event, "YAML anchors and aliases are not allowed (a few bytes can expand to gigabytes)"
                )
            depth += isinstance(event, yaml.CollectionStartEvent) - isinstance(event, yaml.CollectionEndEvent)
            if depth > MAX_YAML_DEPTH:
                return refuse(event, f"nested deeper than {MAX_YAML_DEPTH} levels")
        node = yaml.compose(text, Loader=_YAML_LOADER)
        meta = yaml.load(text, Loader=_YAML_LOADER)  # a safe loader (no Python objects), as checked above
    except UnicodeDecodeError as err:
        problems.append(Problem(path.name, None, None, f"not UTF-8 text ({err.reason} at byte {err.start})"))
        return {}
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = mark.line + 1 if mark else None
        # PyYAML >= 6.0.3 has a nesting limit of its own, and its scanner reads a flow collection whole
        # (looking for a simple key) before the event loop above sees its depth: the same refusal.
        message = (
            f"nested deeper than {MAX_YAML_DEPTH} levels"
            if "maximum nesting depth" in str(err)
            else f"not valid YAML: {err}"
        )
        problems.append(Problem(path.name, line, None, message))
        return {}
    if meta is None:
        return {}
    if not isinstance(meta, dict):
        problems.append(Problem(path.name, None, None, "must be a mapping"))
        return {}
    lines = {
        getattr(key, "value", None): key.start_mark.line + 1
        for key, _ in (node.value if isinstance(node, yaml.MappingNode) else ())
    }
    rules: dict[str, Callable[[Any], str | None]] = {
        "name": lambda v: name_problem("suite", v),
        "version": lambda v: (
            None
            if isinstance(v, (str, int)) and not isinstance(v, bool)
            else f"must be a string or an integer, got {v!r:.60}"
        ),
        "description": fields.string_problem,
        "k": fields.cutoff_problem,
        "labels": fields.label_names_problem,
        "cluster": fields.cluster_problem,
    }
    for name, value in meta.items():
        line = lines.get(name)
        if name not in rules:
            problems.append(
                Problem(path.name, line, str(name), f"unknown field (known: {', '.join(SUITE_YAML_FIELDS)})")
            )
        elif (message := rules[name](value)) is not None:
            problems.append(Problem(path.name, line, name, message))
    return meta


@reads_folder
def load_suite(path: str | Path, *, name: str | None = None, errata: str | None = None) -> Suite:
    """Read and validate a suite directory; raises SuiteError naming every problem found. `errata`: a YAML
    errata file applied after reading (experiments/suites/errata.py; `+suite.errata=FILE`)."""
    root = Path(path)
    if not root.exists():
        raise SuiteError([Problem(str(root), None, None, "suite directory does not exist")])
    if not root.is_dir():
        raise SuiteError([Problem(str(root), None, None, "is not a directory (a suite is a directory)")])
    problems: list[Problem] = []
    meta = _read_meta(root / "suite.yaml", problems)
    memories = _read_objects(root / "memories.jsonl", MEMORY_SCHEMA, problems)
    for number, obj in memories:
        for key in RESERVED_METADATA_KEYS & set(obj.get("metadata", {})):
            problems.append(
                Problem("memories.jsonl", number, f"metadata.{key}", "reserved: set by an ingest stage")
            )
    queries = _read_objects(root / "queries.jsonl", QUERY_SCHEMA, problems)
    for number, obj in queries:
        for pattern in obj.get("noise_patterns", []):
            try:
                re.compile(pattern)
            except re.error as err:
                problems.append(
                    Problem("queries.jsonl", number, "noise_patterns", f"bad regex {pattern!r}: {err}")
                )
    qrels = _read_qrels(
        root / "qrels.tsv", {o["id"] for _, o in memories}, {o["id"] for _, o in queries}, problems
    )
    knowledge = {  # optional files: absent means the system holds no graph or feedback
        stem: _read_objects(root / f"{stem}.jsonl", schema, problems)
        for stem, schema in KNOWLEDGE_FILES.items()
        if (root / f"{stem}.jsonl").exists() or (root / f"{stem}.jsonl").is_symlink()
    }
    if problems:
        raise SuiteError(problems[:MAX_PROBLEMS])
    suite = Suite(
        name=name or str(meta.get("name", root.name)),
        memories=tuple(memory_from_json(o) for _, o in memories),
        queries=tuple(_query(o) for _, o in queries),
        qrels=qrels,
        k=meta.get("k", 10),
        version=str(meta.get("version", "")),
        description=str(meta.get("description", "")),
        label_names=tuple(meta.get("labels", ())),
        cluster=str(meta.get("cluster", "scope")),
        knowledge=_knowledge(knowledge),
    )
    check_suite(
        suite,
        files={
            "suite": "suite.yaml",
            "memories": "memories.jsonl",
            "queries": "queries.jsonl",
            "qrels": "qrels.tsv",
            **{stem: f"{stem}.jsonl" for stem in KNOWLEDGE_FILES},
        },
        lines={
            "memories": [n for n, _ in memories],
            "queries": [n for n, _ in queries],
            **{stem: [n for n, _ in objects] for stem, objects in knowledge.items()},
        },
    )
    if errata:
        suite = apply_errata(suite, errata)
        check_suite(suite, files={"suite": "suite.yaml"})
    return suite


def write_qrels(qrels: Mapping[str, Mapping[str, int]], path: str | Path) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for qid in qrels:
            for mid, grade in qrels[qid].items():
                fh.write(f"{qid} 0 {mid} {grade}\n")


def save_suite(suite: Suite, path: str | Path) -> Path:
    """Write a suite in the canonical format; atomic: the directory appears complete or not at all."""
    # qrels cannot say what upstream's scorer does: saved without it, the suite would score otherwise
    if suite.scorer is not None:
        raise ValueError(
            f"suite {suite.name!r} is scored by {suite.scorer.name} (suite.protocol=official), which the "
            "canonical format cannot hold: load it with suite.protocol=memeval to save it"
        )
    root = Path(path)
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
    try:
        meta = {
            "name": suite.name,
            "version": suite.version,
            "description": suite.description,
            "k": suite.k,
            "labels": list(suite.label_names),
            **({"cluster": suite.cluster} if suite.cluster != "scope" else {}),
        }
        (tmp / "suite.yaml").write_text(yaml.safe_dump(meta, sort_keys=False), "utf-8")
        for fname, records in (
            ("memories.jsonl", map(memory_record, suite.memories)),
            ("queries.jsonl", ({**query_record(q), **gold_record(q)} for q in suite.queries)),
        ):
            with open(tmp / fname, "w", encoding="utf-8") as fh:
                fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        write_qrels(suite.qrels, tmp / "qrels.tsv")
        if suite.knowledge:
            for stem, records in knowledge_records(suite.knowledge).items():
                with open(tmp / f"{stem}.jsonl", "w", encoding="utf-8") as fh:
                    fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        if root.exists():
            shutil.rmtree(root)
        os.replace(tmp, root)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return root
