"""TREC run channel: another system's ranking, read from a run file, as one retrieval channel.

    python -m experiments.run variant=trec_run stage.trec_run.path=run.txt

A run file (`qid Q0 docid rank score tag`, whitespace-separated) becomes the channel's score column,
so an outside system gets the same metrics, CIs, per-label tables, reports and gate as any variant,
and can be fused (rrf) or reranked like bm25 or dense. Ranked as trec_eval ranks it (the rank
column is ignored): by score as a C float (float32: scores closer than its resolution tie), highest
first, ties by document id descending, then cut to `top_n`; the channel's scores are those float32
values, so nothing downstream re-sorts what trec_eval sees as a tie.

This is the one stage that reads a file, and it does so only to build its index: the file's
sha256 is part of the stage's config (`sha256`, filled in by the config or on construction), hence
of its fingerprint and of the run's config hash, so no cache ever answers for a changed file, and
`build` refuses a file that changed since. Malformed lines, duplicate (query, document) pairs,
documents the suite does not hold, queries it does not ask and documents of another scope than
their query are errors naming the file and line (PipelineConfigError: exit 2 from memeval-run).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from retrieval.pipeline import PipelineConfigError
from retrieval.stage import Retriever
from retrieval.types import Corpus, Query


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes; '' when it cannot be read (the stage then names the problem)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return ""


def fingerprint_file(stage: Retriever, what: str) -> None:
    """A file-reading stage's checks on construction: its `path` exists (else an error naming `what` and
    the `stage.<name>.path` key), and its `sha256` is filled in when the config did not give it."""
    if not Path(stage.path).is_file():
        raise PipelineConfigError(f"{what} {stage.path} does not exist (stage.{stage.name}.path)")
    if not stage.sha256:
        object.__setattr__(stage, "sha256", file_sha256(stage.path))


def read_unchanged(path: str, sha256: str) -> bytes:
    """The file's bytes, refused when they no longer hash to the `sha256` its config was given."""
    data = Path(path).read_bytes()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise PipelineConfigError(
            f"{path} changed since the config named it (sha256 {sha256[:12]}); "
            "run again so the new file is fingerprinted"
        )
    return data


class FileRankings:
    """An index of the rankings a file gives, per query id (`_hits`, filled by the subclass)."""

    _hits: dict[str, tuple[np.ndarray, np.ndarray]]

    def search(self, query: Query) -> tuple[np.ndarray, np.ndarray]:
        """The file's ranking for the query (a query it does not list gets nothing: it scores 0)."""
        index, scores = self._hits.get(query.id, (np.empty(0, dtype=np.int64), np.empty(0)))
        return index.copy(), scores.copy()


@dataclass(frozen=True)
class _Line:
    number: int
    query_id: str
    doc_id: str
    score: float


def parse_run(path: str | Path, data: bytes, tag: str | None = None) -> dict[str, list[_Line]]:
    """Lines per query id, checked for shape, numbers and duplicates; `tag` keeps one run of several."""
    out: dict[str, list[_Line]] = {}
    seen: dict[tuple[str, str], int] = {}
    for number, line in enumerate(data.decode("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        where = f"{path}:{number}"
        if len(parts) != 6:
            raise PipelineConfigError(
                f"{where}: a TREC run line has 6 fields (qid Q0 docid rank score tag), "
                f"got {len(parts)}: {line.strip()!r}"
            )
        qid, _, doc, rank, score_text, run_tag = parts
        if tag is not None and run_tag != tag:
            continue
        try:
            int(rank)
            score = float(score_text)
        except ValueError:
            raise PipelineConfigError(
                f"{where}: rank must be an integer and score a number: {line.strip()!r}"
            ) from None
        if not math.isfinite(score):
            raise PipelineConfigError(f"{where}: score {score_text} is not finite")
        if (qid, doc) in seen:
            raise PipelineConfigError(
                f"{where}: document {doc} listed twice for query {qid} (first on line {seen[qid, doc]})"
            )
        seen[qid, doc] = number
        out.setdefault(qid, []).append(_Line(number, qid, doc, score))
    return out


def trec_eval_order(lines: Sequence[_Line]) -> list[_Line]:
    """A query's lines as trec_eval ranks them: score descending as a C float (float32), ties by document id
    descending (the rank column is ignored). The one copy of this order: experiments.run_folder.trec.read_run
    uses it too."""
    return sorted(lines, key=lambda ln: (np.float32(ln.score), ln.doc_id), reverse=True)


class _RunIndex(FileRankings):
    def __init__(self, corpus: Corpus, retriever: TrecRunRetriever):
        data = read_unchanged(retriever.path, retriever.sha256)
        self._path = retriever.path
        position = {str(mid): i for i, mid in enumerate(corpus.ids)}
        scope_of = [m.scope_key for m in corpus.memories]
        self._lines = parse_run(retriever.path, data, retriever.tag)
        self._hits: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._scopes: dict[str, tuple[str, _Line]] = {}  # query id -> (scope of its documents, first line)
        for qid, lines in self._lines.items():
            for line in lines:
                if line.doc_id not in position:
                    raise PipelineConfigError(
                        f"{self._path}:{line.number}: document {line.doc_id} is not in the suite"
                    )
            ranked = trec_eval_order(lines)[: retriever.top_n]
            index = np.array([position[ln.doc_id] for ln in ranked], dtype=np.int64)
            scores = np.array([ln.score for ln in ranked], dtype=np.float32)  # as trec_eval holds them
            self._hits[qid] = (index, scores.astype(np.float64))
            first = min(lines, key=lambda ln: ln.number)
            self._scopes[qid] = (scope_of[position[first.doc_id]], first)
            for line in lines:
                if scope_of[position[line.doc_id]] != scope_of[position[first.doc_id]]:
                    raise PipelineConfigError(
                        f"{self._path}:{line.number}: query {qid} lists documents of two scopes "
                        f"({line.doc_id} and {first.doc_id} on line {first.number}); a query sees one scope"
                    )

    def check_queries(self, queries: Sequence[Query]) -> None:
        """Every query the file names is asked by the suite, and its documents share the query's scope."""
        asked = {q.id: q for q in queries}
        for qid, (scope, first) in self._scopes.items():
            if qid not in asked:
                raise PipelineConfigError(f"{self._path}:{first.number}: query {qid} is not in the suite")
            if scope != asked[qid].scope_key:
                raise PipelineConfigError(
                    f"{self._path}:{first.number}: document {first.doc_id} is in scope {scope!r}, but query "
                    f"{qid} is in scope {asked[qid].scope_key!r}; a query sees only its own scope"
                )


@dataclass(frozen=True, kw_only=True)
class TrecRunRetriever(Retriever):
    name = "trec_run"
    by_scope = False  # its file names every scope's queries: never built on some scopes only (reuse.py)
    channel: str = "trec_run"
    path: str
    sha256: str | None = None  # the file's content hash; the config fills it in, else construction does
    tag: str | None = None  # keep only lines with this run tag (a file holding several runs)

    def __post_init__(self) -> None:
        fingerprint_file(self, "TREC run file")

    def build(self, corpus: Corpus) -> _RunIndex:
        return _RunIndex(corpus, self)
