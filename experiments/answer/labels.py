"""The labels file: human (or strong-judge) verdicts on a random subset of a run's answers, for PPI.

JSONL, one object a line: `{"query_id": "conv-26:q3", "answer_sha256": "<sha256 of the answer's UTF-8 text>",
"label": 1, "labeller": "ana"}` (label 0 = wrong, 1 = right). A label is tied to the exact answer it judged:
when the answer changes (another answerer, another context) its hash no longer matches and the label is
refused, never silently applied to a changed answer. Every problem is a LabelsError naming the file, the line
and the field (the runtime exits 2 on it); nothing is returned from a file with any problem. Blank lines are
skipped.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

FIELDS = ("query_id", "answer_sha256", "label", "labeller")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class LabelsError(ValueError):
    """A labels file that cannot be used: one line naming file, line and field."""


@dataclass(frozen=True)
class Label:
    label: int  # 0 wrong, 1 right
    labeller: str
    line: int


def answer_sha256(text: str) -> str:
    """The hash a label names its answer by: sha256 of the answer text's UTF-8 bytes, lower-case hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_labels(path: str | Path, answers: Mapping[str, str]) -> dict[str, Label]:
    """The labels of `path` by query id, each checked against `answers` (query id -> the answer text
    judged)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LabelsError(f"{path}: labels file not found") from None
    except UnicodeDecodeError as err:
        raise LabelsError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    except OSError as err:
        raise LabelsError(f"{path}: cannot read the labels file ({err.strerror})") from None
    labels: dict[str, Label] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise LabelsError(f"{where}: not a JSON object ({err.msg})") from None
        if not isinstance(record, dict):
            raise LabelsError(f"{where}: not a JSON object")
        missing = [f for f in FIELDS if f not in record]
        if missing:
            raise LabelsError(f"{where}: missing field(s) {', '.join(missing)}")
        unknown = sorted(set(record) - set(FIELDS))
        if unknown:
            raise LabelsError(f"{where}: unknown field(s) {', '.join(unknown)} (known: {', '.join(FIELDS)})")
        qid, digest, label, labeller = (record[f] for f in FIELDS)
        if not isinstance(qid, str) or qid not in answers:
            raise LabelsError(f"{where}: query_id {qid!r:.80} is not a query of this run")
        if qid in labels:
            raise LabelsError(
                f"{where}: query_id {qid!r} is labelled twice (first on line {labels[qid].line})"
            )
        if not isinstance(digest, str) or _SHA256.fullmatch(digest) is None:
            raise LabelsError(f"{where}: answer_sha256 must be 64 lower-case hex digits, got {digest!r:.80}")
        if digest != answer_sha256(answers[qid]):
            raise LabelsError(
                f"{where}: answer_sha256 does not match query {qid!r}'s answer in this run (the label is of "
                "another answer: relabel it)"
            )
        if isinstance(label, bool) or not isinstance(label, int) or label not in (0, 1):
            raise LabelsError(f"{where}: label must be 0 or 1, got {label!r:.40}")
        if not isinstance(labeller, str) or not labeller.strip():
            raise LabelsError(f"{where}: labeller must be a non-empty string, got {labeller!r:.40}")
        labels[qid] = Label(int(label), labeller, number)
    return labels
