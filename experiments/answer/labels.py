"""`answer.labels`: human (or strong-judge) verdicts on some answers, for the judge's error bound (PPI).

JSONL, one `{"query_id": str, "answer_sha256": str, "label": 0 | 1, "labeller": str}` a line. A label is
tied to the exact answer text it labels: a label whose `answer_sha256` is not the sha256 of the run's
answer (UTF-8) is refused, so a label never silently applies to a changed answer. An unknown query id, a
label not 0/1, a query labelled twice and a missing field are refused the same way: an AnswerError naming
the file and the line (exit 2).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

from experiments.answer.client import AnswerError
from retrieval.regular_file import MAX_FILE_BYTES, read_regular_file


def answer_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_labels(path: str | Path, answers: Mapping[str, str]) -> dict[str, int]:
    """query id -> label, checked against `answers` (query id -> the run's answer text)."""
    try:
        data = read_regular_file(Path(path), MAX_FILE_BYTES, what="a labels file")
    except OSError as err:
        raise AnswerError(
            f"{path}: cannot read the labels file ({err.strerror or err}) (answer.labels)"
        ) from None
    labels: dict[str, int] = {}
    first: dict[str, int] = {}
    for number, raw in enumerate(data.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            raise AnswerError(f"{path}:{number}: not a JSON object")
        qid = record.get("query_id")
        for name in ("query_id", "answer_sha256", "labeller"):
            if not isinstance(record.get(name), str):
                raise AnswerError(f"{path}:{number}: {name}: missing or not a string")
        label = record.get("label")
        if isinstance(label, bool) or label not in (0, 1):
            raise AnswerError(f"{path}:{number}: label: must be 0 or 1, got {label!r:.20}")
        if qid not in answers:
            raise AnswerError(f"{path}:{number}: query_id: {qid!r:.80} has no answer in this run")
        if record["answer_sha256"] != answer_sha256(answers[qid]):
            raise AnswerError(
                f"{path}:{number}: answer_sha256: the label is for another answer text than this run's "
                f"answer to {qid} (a stale label is never applied; label the new answer)"
            )
        if qid in first:
            raise AnswerError(
                f"{path}:{number}: query_id: {qid} is labelled twice (first on line {first[qid]})"
            )
        first[qid] = number
        labels[qid] = int(label)
    return labels
