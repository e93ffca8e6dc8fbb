"""The canonical on-disk suite format (DESIGN.md): read, validate, write.

    DIR/suite.yaml       optional: name, version, description, k, labels
    DIR/memories.jsonl   one memory object a line
    DIR/queries.jsonl    one query object a line
    DIR/qrels.tsv        TREC qrels: query_id 0 memory_id grade

Reading validates everything before returning: malformed JSON, non-UTF-8 bytes, missing or
mistyped fields, unknown fields, duplicate ids, judgements naming unknown ids; every problem is
reported with its file, line and field, all at once.
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

from experiments.suites.suite import MAX_PROBLEMS, Problem, Suite, SuiteError, check_suite
from retrieval.types import RESERVED_METADATA_KEYS, Memory, Query

MAX_TEXT_CHARS = 1_000_000
IMPORTANCE = ("critical", "high", "medium", "low")


def _is_str_map(v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, str) for k, x in v.items())


def _is_str_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# field -> (required, check, what the check wants)
Schema = Mapping[str, tuple[bool, Callable[[Any], bool], str]]
_ID = (True, lambda v: isinstance(v, str) and v.strip() != "", "a non-empty string")
_TEXT = (True, lambda v: isinstance(v, str) and v.strip() != "", "a non-empty string")
_SCOPE = (True, lambda v: _is_str_map(v) and len(v) > 0, "a non-empty object of strings")
_OPT_STR = (False, lambda v: isinstance(v, str), "a string")

MEMORY_SCHEMA: Schema = {
    "id": _ID,
    "text": _TEXT,
    "scope": _SCOPE,
    "created_at": _OPT_STR,
    "tier": _OPT_STR,
    "tags": (False, _is_str_list, "a list of strings"),
    "importance": (False, lambda v: v in IMPORTANCE, f"one of {', '.join(IMPORTANCE)}"),
    "confidence": (False, _is_number, "a number"),
    "strength": (False, _is_number, "a number"),
    "deleted": (False, lambda v: isinstance(v, bool), "true or false"),
    "role": _OPT_STR,
    "metadata": (False, lambda v: isinstance(v, dict), "an object"),
}
QUERY_SCHEMA: Schema = {
    "id": _ID,
    "text": _TEXT,
    "scope": _SCOPE,
    "labels": (False, _is_str_map, "an object of strings"),
    "now": _OPT_STR,
    "context": (False, lambda v: isinstance(v, dict), "an object"),
    "noise_patterns": (False, _is_str_list, "a list of strings (regular expressions)"),
    "expected_domains": (False, _is_str_list, "a list of strings"),
}


def _read_lines(path: Path, problems: list[Problem]) -> list[tuple[int, str]]:
    lines = []
    for number, raw in enumerate(path.read_bytes().splitlines(), 1):
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
    if not path.is_file():
        problems.append(Problem(path.name, None, None, f"file is missing in {path.parent}"))
        return []
    out = []
    for number, text in _read_lines(path, problems):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as err:
            problems.append(
                Problem(path.name, number, None, f"malformed JSON: {err.msg} (column {err.colno})")
            )
            continue
        if not isinstance(obj, dict):
            problems.append(Problem(path.name, number, None, "each line must be a JSON object"))
            continue
        before = len(problems)
        for name, (required, check, wants) in schema.items():
            if name not in obj:
                if required:
                    problems.append(Problem(path.name, number, name, "missing required field"))
            elif not check(obj[name]):
                problems.append(Problem(path.name, number, name, f"must be {wants}, got {obj[name]!r:.60}"))
        for name in obj.keys() - schema.keys():
            problems.append(Problem(path.name, number, name, "unknown field (put extra data under metadata)"))
        if isinstance(obj.get("text"), str) and len(obj["text"]) > MAX_TEXT_CHARS:
            problems.append(Problem(path.name, number, "text", f"longer than {MAX_TEXT_CHARS:,} characters"))
        if len(problems) == before:
            out.append((number, obj))
    return out


def _memory(obj: dict) -> Memory:
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
    )


def _read_qrels(path: Path, memory_ids: set, query_ids: set, problems: list[Problem]) -> dict:
    qrels: dict[str, dict[str, int]] = {}
    if not path.is_file():
        problems.append(Problem(path.name, None, None, f"file is missing in {path.parent}"))
        return qrels
    for number, text in _read_lines(path, problems):
        parts = text.split()
        if len(parts) != 4:
            problems.append(
                Problem(path.name, number, None, "expected 4 columns: query_id 0 memory_id grade")
            )
            continue
        qid, _, mid, grade = parts
        if not re.fullmatch(r"-?\d+", grade):
            problems.append(Problem(path.name, number, "grade", f"must be an integer, got {grade!r}"))
            continue
        if qid not in query_ids:
            problems.append(Problem(path.name, number, "query_id", f"unknown query {qid!r}"))
        if mid not in memory_ids:
            problems.append(Problem(path.name, number, "memory_id", f"unknown memory {mid!r}"))
        if mid in qrels.get(qid, {}):
            problems.append(Problem(path.name, number, "memory_id", f"{qid!r} judges {mid!r} twice"))
        qrels.setdefault(qid, {})[mid] = int(grade)
    return qrels


def load_suite(path: str | Path, *, name: str | None = None) -> Suite:
    """Read and validate a suite directory; raises SuiteError naming every problem found."""
    root = Path(path)
    if not root.is_dir():
        raise SuiteError([Problem(str(root), None, None, "suite directory does not exist")])
    problems: list[Problem] = []
    meta: dict[str, Any] = {}
    if (root / "suite.yaml").is_file():
        try:
            meta = yaml.safe_load((root / "suite.yaml").read_text("utf-8")) or {}
        except (yaml.YAMLError, UnicodeDecodeError) as err:
            problems.append(
                Problem(
                    "suite.yaml",
                    getattr(getattr(err, "problem_mark", None), "line", None),
                    None,
                    f"not valid YAML: {err}",
                )
            )
        if not isinstance(meta, dict):
            problems.append(Problem("suite.yaml", None, None, "must be a mapping"))
            meta = {}
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
    if problems:
        raise SuiteError(problems[:MAX_PROBLEMS])
    suite = Suite(
        name=name or str(meta.get("name", root.name)),
        memories=tuple(_memory(o) for _, o in memories),
        queries=tuple(_query(o) for _, o in queries),
        qrels=qrels,
        k=int(meta.get("k", 10)),
        version=str(meta.get("version", "")),
        description=str(meta.get("description", "")),
        label_names=tuple(meta.get("labels", ())),
    )
    check_suite(suite, files={"memories": "memories.jsonl", "queries": "queries.jsonl", "qrels": "qrels.tsv"})
    return suite


def memory_record(m: Memory) -> dict[str, Any]:
    record: dict[str, Any] = {"id": m.id, "text": m.text, "scope": dict(m.scope)}
    optional = {
        "created_at": m.created_at,
        "tier": m.tier,
        "tags": list(m.tags) or None,
        "importance": m.importance,
        "confidence": m.confidence,
        "strength": m.strength,
        "deleted": m.deleted or None,
        "role": m.role,
        "metadata": dict(m.metadata) or None,
    }
    record.update({k: v for k, v in optional.items() if v is not None})
    return record


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


def write_qrels(qrels: Mapping[str, Mapping[str, int]], path: str | Path) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for qid in qrels:
            for mid, grade in qrels[qid].items():
                fh.write(f"{qid} 0 {mid} {grade}\n")


def save_suite(suite: Suite, path: str | Path) -> Path:
    """Write a suite in the canonical format; atomic: the directory appears complete or not at all."""
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
        }
        (tmp / "suite.yaml").write_text(yaml.safe_dump(meta, sort_keys=False), "utf-8")
        for fname, records in (
            ("memories.jsonl", map(memory_record, suite.memories)),
            ("queries.jsonl", map(query_record, suite.queries)),
        ):
            with open(tmp / fname, "w", encoding="utf-8") as fh:
                fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        write_qrels(suite.qrels, tmp / "qrels.tsv")
        if root.exists():
            shutil.rmtree(root)
        os.replace(tmp, root)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return root
