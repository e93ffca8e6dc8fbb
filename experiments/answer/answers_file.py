"""`answer.source=file`: answers made elsewhere (another harness's published answers, a team's own agent),
read from JSONL, one `{"query_id": str, "answer": str}` a line; only the judges run.

Every line is checked before any judge runs: not JSON, a missing or non-string field, a query id the
suite does not hold, a query answered twice, and a query of the suite (with a gold answer) that the file
does not answer are each an AnswerError naming the file and the line (exit 2).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path

from experiments.answer.client import AnswerError
from retrieval.regular_file import MAX_FILE_BYTES, read_regular_file


def read_answers(path: str | Path, wanted: Collection[str], known: Collection[str]) -> dict[str, str]:
    """The answer to each query of `wanted` (the suite's queries with a gold answer); `known`: every
    query id of the suite (an answer to a query without gold is allowed, and left out)."""
    try:
        data = read_regular_file(Path(path), MAX_FILE_BYTES, what="an answers file")
    except OSError as err:
        raise AnswerError(
            f"{path}: cannot read the answers file ({err.strerror or err}) (answer.path)"
        ) from None
    answers: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for number, raw in enumerate(data.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except ValueError:
            raise AnswerError(f"{path}:{number}: not a JSON object") from None
        if not isinstance(record, dict):
            raise AnswerError(f"{path}:{number}: not a JSON object")
        qid, answer = record.get("query_id"), record.get("answer")
        if not isinstance(qid, str):
            raise AnswerError(f"{path}:{number}: query_id: missing or not a string")
        if not isinstance(answer, str):
            raise AnswerError(f"{path}:{number}: answer: missing or not a string (query {qid})")
        if qid not in known:
            raise AnswerError(f"{path}:{number}: query_id: {qid!r:.80} is not a query of the suite")
        if qid in first_line:
            raise AnswerError(
                f"{path}:{number}: query_id: {qid} is answered twice (first on line {first_line[qid]})"
            )
        first_line[qid] = number
        answers[qid] = answer
    missing = [q for q in wanted if q not in answers]
    if missing:
        raise AnswerError(
            f"{path}:{len(data.splitlines()) + 1}: {len(missing)} "
            f"quer{'y' if len(missing) == 1 else 'ies'} of the suite not answered (first: {missing[0]}); "
            "answer every question with a gold answer"
        )
    return {q: answers[q] for q in wanted}
