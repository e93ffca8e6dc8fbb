"""Errata: corrections to a benchmark's answer key, applied by a loader with provenance (`errata=FILE`).

Benchmarks ship with known mistakes (LoCoMo's catalogued answer-key errors, locomo#34; a wrong gold session
in LongMemEval, LongMemEval#37). An errata file corrects them without editing the data, and says who found
each one. It is a YAML list; each entry names a query of the suite (its id as the loader gives it):

    - question: conv-26:q12          # the query id
      field: evidence                # evidence | text | labels.<name>
      old: [conv-26:D3:1]            # what the benchmark says now: must match, or the file is refused
      new: [conv-26:D3:5]
      source: https://github.com/snap-research/locomo/issues/34

`evidence` is the set of memory ids judged relevant (grade > 0) at turn granularity (errata apply before
granularity regroups turns, so a corrected turn maps up like any other); ids that stay keep their grade,
new ones get grade 1, judgements with grade 0 stay. A run states the file (sha256) and every erratum
applied in its tags, notes and report. Data flow: loader -> apply_errata -> granularity.regroup -> run.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from experiments.suites import fields
from experiments.suites.identity import file_sha256
from experiments.suites.suite import Problem, Suite, SuiteError
from retrieval.types import Query

KEYS = ("question", "field", "old", "new", "source")


def _entries(path: Path) -> list[tuple[int, Any]]:
    """(line, entry) for each item of the YAML list, or a SuiteError naming the file and line."""
    try:
        text = path.read_text("utf-8")
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except OSError as err:
        raise SuiteError(
            [Problem(str(path), None, None, f"cannot read errata file: {err.strerror or err}")]
        ) from err
    except (UnicodeDecodeError, yaml.YAMLError) as err:
        mark = getattr(err, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise SuiteError([Problem(str(path), line, None, f"not a YAML errata file: {err}")]) from err
    if not isinstance(data, list) or not isinstance(node, yaml.SequenceNode):
        raise SuiteError(
            [
                Problem(
                    str(path), None, None, "must be a YAML list of errata (question, field, old, new, source)"
                )
            ]
        )
    return [(item.start_mark.line + 1, entry) for item, entry in zip(node.value, data, strict=True)]


def _evidence(suite: Suite, qid: str) -> list[str]:
    return sorted(m for m, g in suite.qrels.get(qid, {}).items() if g > 0)


def _current(suite: Suite, query: Query, name: str) -> Any:
    if name == "evidence":
        return _evidence(suite, query.id)
    if name == "text":
        return query.text
    return query.labels.get(name.removeprefix("labels."))


def apply_errata(suite: Suite, path: str | Path) -> Suite:
    """The suite with every erratum of `path` applied, or a SuiteError naming each entry that does not fit."""
    path = Path(path)
    queries = {q.id: q for q in suite.queries}
    scope_of = {m.id: m.scope_key for m in suite.memories}
    problems: list[Problem] = []
    qrels = {qid: dict(judged) for qid, judged in suite.qrels.items()}
    applied: list[dict[str, str]] = []
    notes: list[str] = []

    def bad(line: int, field: str | None, message: str) -> None:
        problems.append(Problem(str(path), line, field, message))

    for line, entry in _entries(path):
        if not isinstance(entry, dict) or set(entry) != set(KEYS):
            got = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
            bad(line, None, f"an erratum has exactly the keys {', '.join(KEYS)}; got {got}")
            continue
        qid, name, old, new, source = (entry[k] for k in KEYS)
        if not isinstance(source, str) or not source.strip():
            bad(line, "source", "must say where the erratum comes from (an issue URL, a paper)")
            continue
        query = queries.get(qid) if isinstance(qid, str) else None
        if query is None:
            bad(
                line,
                "question",
                f"{qid!r} is not a query of suite {suite.name!r} (see its notes for skipped ones)",
            )
            continue
        if name not in ("evidence", "text") and not (isinstance(name, str) and name.startswith("labels.")):
            bad(line, "field", f"must be evidence, text or labels.<name>, got {name!r}")
            continue
        current = _current(suite, query, name)
        if name == "evidence":
            if not (isinstance(old, list) and isinstance(new, list)):
                bad(line, "old" if not isinstance(old, list) else "new", "evidence is a list of memory ids")
                continue
            if sorted(map(str, old)) != current:
                bad(line, "old", f"does not match {qid}'s evidence in the suite: {current}")
                continue
            strange = [m for m in new if scope_of.get(m) != query.scope_key]
            if strange:
                bad(line, "new", f"names memories that are not turns of {qid}'s conversation: {strange[:5]}")
                continue
            judged = qrels.setdefault(qid, {})
            for mid in set(current) - set(new):
                del judged[mid]
            for mid in new:
                judged[mid] = judged[mid] if judged.get(mid, 0) > 0 else 1
        else:
            if old != current:
                bad(line, "old", f"does not match {qid}'s {name} in the suite: {current!r:.80}")
                continue
            if (problem := fields.text_problem(new)) is not None:
                bad(line, "new", problem)
                continue
            if name == "text":
                queries[qid] = replace(query, text=new)
            else:
                labels = {**query.labels, name.removeprefix("labels."): new}
                queries[qid] = replace(query, labels=MappingProxyType(labels))
        applied.append({"question": qid, "field": name, "source": source})
        notes.append(
            f"erratum applied ({path.name}:{line}): {qid} {name}: {old!r} -> {new!r} (source: {source})"
        )
    if problems:
        raise SuiteError(problems)
    return replace(
        suite,
        queries=tuple(queries[q.id] for q in suite.queries),
        qrels=qrels,
        notes=(*suite.notes, *notes),
        tags={
            **suite.tags,
            "errata": f"{path.name} (sha256 {file_sha256(path)}): {len(applied)} applied",
            "errata_applied": json.dumps(applied, ensure_ascii=False),
        },
    )
