"""Another harness's rankings as they are: a JSON mapping or LongMemEval's retrieval output, one channel.

    memeval-run variant=ranked_file stage.ranked_file.path=ranks.json
    memeval-run suite=longmemeval ... variant=ranked_file stage.ranked_file.path=retrievallog_turn_bm25 \
        stage.ranked_file.format=longmemeval

Two shapes (`format`):
- `json`: one object mapping each question id to its ranked ids, best first: `["m1", "m2"]`, or with
  scores, `[["m1", 0.9], ["m2", 0.4]]` (what `memeval-export --to json` writes);
- `longmemeval`: the jsonl LongMemEval's src/retrieval/run_retrieval.py writes, one question a line, its
  `retrieval_results.ranked_items[*].corpus_id` the ranking (turn ids `<session>_<n>` or session ids); an
  item's `score`, when present (memeval's export adds it; upstream ignores it), is kept.

Unlike a TREC run (trec_run.py, ranked by score as trec_eval does), the listed order is the ranking: a
list without scores gets 1/rank. An id is resolved in the question's scope: the suite's id as given, else
LongMemEval's (`<question>:<corpus id>`, a `noans` corpus id naming its `answer` turn); an id the suite
does not hold keeps its rank as a hit no qrels judge relevant (a foreign row, as a live system's unknown
id), so the verdict is never improved by dropping what the other harness returned. A question the suite
does not ask, a malformed entry or a score that is not a finite number is an error naming the file, its
line (jsonl) or question, and the field (PipelineConfigError: exit 2). The file's sha256 is part of the
config (its fingerprint) as for trec_run; since ids it returns may be foreign rows made at build, the
channel is never answered from a candidate cache (which would skip the build): `builds_rows` below.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from retrieval.pipeline import PipelineConfigError
from retrieval.retrievers.trec_run import FileRankings, fingerprint_file, read_unchanged
from retrieval.stage import Retriever
from retrieval.types import Corpus, Query

FORMATS = ("json", "longmemeval")


@dataclass(frozen=True)
class Ranked:
    """One question's ranking as the file gives it, and where it was read (for errors)."""

    where: str
    ids: tuple[str, ...]
    scores: tuple[float, ...] | None


def _score(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PipelineConfigError(f"{where}: a score must be a finite number, got {value!r:.40}")
    return float(value)


def _ranking(where: str, items: Any) -> Ranked:
    """A JSON mapping's value: ids, or [id, score] pairs; every id a string, none twice."""
    if not isinstance(items, list):
        raise PipelineConfigError(f"{where}: expected a list of ranked ids, got {type(items).__name__}")
    paired = bool(items) and all(isinstance(i, list) for i in items)
    if paired and not all(len(i) == 2 for i in items):
        raise PipelineConfigError(f"{where}: a scored entry is [id, score]")
    ids = [i[0] if paired else i for i in items]
    for n, mid in enumerate(ids):
        if not isinstance(mid, str) or not mid:
            raise PipelineConfigError(f"{where}[{n}]: an id must be a non-empty string, got {mid!r:.40}")
    _no_repeat(where, ids)
    scores = tuple(_score(f"{where}[{n}][1]", i[1]) for n, i in enumerate(items)) if paired else None
    return Ranked(where, tuple(ids), scores)


def _no_repeat(where: str, ids: Sequence[str]) -> None:
    seen: set[str] = set()
    for mid in ids:
        if mid in seen:
            raise PipelineConfigError(f"{where}: id {mid} is ranked twice")
        seen.add(mid)


def read_json(path: str | Path, data: bytes) -> dict[str, Ranked]:
    try:
        mapping = json.loads(data)
    except (ValueError, UnicodeDecodeError) as err:
        raise PipelineConfigError(f"{path}: not JSON ({err})") from None
    if not isinstance(mapping, dict):
        raise PipelineConfigError(f"{path}: expected an object mapping question ids to ranked ids")
    return {str(q): _ranking(f"{path}: question {q}", items) for q, items in mapping.items()}


def read_longmemeval(path: str | Path, data: bytes) -> dict[str, Ranked]:
    out: dict[str, Ranked] = {}
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            entry = json.loads(line)
            qid = entry["question_id"]
            items = entry["retrieval_results"]["ranked_items"]
        except (ValueError, KeyError, TypeError):
            raise PipelineConfigError(
                f"{where}: expected a LongMemEval retrieval line with question_id and "
                "retrieval_results.ranked_items"
            ) from None
        if not isinstance(items, list) or not all(isinstance(i, dict) and "corpus_id" in i for i in items):
            raise PipelineConfigError(f"{where}: retrieval_results.ranked_items: each item needs a corpus_id")
        if str(qid) in out:
            raise PipelineConfigError(
                f"{where}: question {qid} is listed twice (first {out[str(qid)].where})"
            )
        ids = [str(i["corpus_id"]) for i in items]
        _no_repeat(f"{where}: question {qid}", ids)
        scored = all("score" in i for i in items) and bool(items)
        scores = tuple(_score(f"{where}: ranked_items[{n}].score", i["score"]) for n, i in enumerate(items))
        out[str(qid)] = Ranked(where, tuple(ids), scores if scored else None)
    return out


def resolve(query_id: str, ranked_id: str, position: dict[str, int]) -> int | None:
    """The corpus row an id names for this question (see the module docstring), or None (foreign)."""
    for candidate in (
        ranked_id,
        f"{query_id}:{ranked_id}",
        f"{query_id}:{ranked_id.replace('noans', 'answer')}",
    ):
        if candidate in position:
            return position[candidate]
    return None


class _FileIndex(FileRankings):
    def __init__(self, corpus: Corpus, retriever: RankedFileRetriever):
        data = read_unchanged(retriever.path, retriever.sha256)
        read = read_json if retriever.format == "json" else read_longmemeval
        self._ranked = read(retriever.path, data)
        self._corpus, self._top_n = corpus, retriever.top_n
        self._position = {str(mid): i for i, mid in enumerate(corpus.ids[: corpus.suite_size])}
        self._hits: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def check_queries(self, queries: Sequence[Query]) -> None:
        """Every question the file names is asked by the suite; ids resolved in its scope, others foreign."""
        asked = {q.id: q for q in queries}
        for qid, ranked in self._ranked.items():
            if qid not in asked:
                raise PipelineConfigError(f"{ranked.where}: question {qid} is not in the suite")
            # a memory of another scope stays that memory (a scope leak, counted), as a live system's
            rows = [resolve(qid, mid, self._position) for mid in ranked.ids[: self._top_n]]
            foreign = [
                (mid, None) for mid, r in zip(ranked.ids[: self._top_n], rows, strict=True) if r is None
            ]
            made = iter(self._corpus.add_foreign(foreign) if foreign else [])
            index = np.array([r if r is not None else next(made) for r in rows], dtype=np.int64)
            n = len(index)
            scores = ranked.scores[:n] if ranked.scores is not None else 1.0 / np.arange(1, n + 1)
            self._hits[qid] = (index, np.asarray(scores, dtype=np.float64))


@dataclass(frozen=True, kw_only=True)
class RankedFileRetriever(Retriever):
    name = "ranked_file"
    by_scope = False  # its file names every scope's questions: never built on some scopes only
    builds_rows: ClassVar[bool] = True  # never from a cache: its foreign rows are made when it is built
    channel: str = "ranked_file"
    path: str
    format: str = "json"
    sha256: str | None = None  # the file's content hash; the config fills it in, else construction does

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise PipelineConfigError(
                f"stage.ranked_file.format: expected one of {FORMATS}, got {self.format!r}"
            )
        fingerprint_file(self, "ranked file")

    def build(self, corpus: Corpus) -> _FileIndex:
        return _FileIndex(corpus, self)
