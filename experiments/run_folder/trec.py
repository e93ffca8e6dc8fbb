"""TREC run and qrels files (`qid Q0 docid rank score tag`, `qid 0 docid grade`), so trec_eval, ranx and
ir_measures can re-check us.

Those tools re-sort by score and break ties by document id, which would reorder our tied
candidates (RRF produces many ties), and trec_eval (pytrec_eval too) stores a score as a C float, so
scores that differ below float32 resolution tie for it. So a score that does not sit clearly below the
one above it is written 2e-6 (relative) lower: a re-check sees exactly the order the harness ranked and
scored (tests/evaluate/test_trec_recheck.py), and a written score differs from the harness's only where it
tied or nearly tied, in the sixth significant digit. Reading a run file (`read_run`, the trec_run channel)
ranks the other way round, as trec_eval does: scores compared as float32, ties by document id.

A must-not judgement (a grade below 0) crashes trec_eval-family tools (pytrec_eval segfaults on -2), so
a run folder's qrels.tsv holds it as grade 0 (judged, not relevant: what every relevance measure counts it
as) and qrels.mustnot.tsv holds the negative grades themselves, for harm@k.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from experiments.names import check_name
from experiments.run_folder.float_text import float_reprs
from retrieval.retrievers.trec_run import parse_run, trec_eval_order
from retrieval.types import RankedList

TIE_GAP = 2e-6  # relative; float32 resolves ~1.2e-7


def strictly_decreasing(scores: np.ndarray) -> np.ndarray:
    """Each score lowered, where needed, to sit a tie gap below the one above it."""
    values = np.asarray(scores, dtype=np.float64)
    return _lowered(values, np.arange(len(values)) == 0)


def _lowered(values: np.ndarray, first: np.ndarray) -> np.ndarray:
    """`strictly_decreasing` of many lists at once (`first` marks where each starts): the result of
    lowering each score top down, one after the other. Computed in passes over every position: a pass
    lowers each score against the one above it as the last pass left it, so after pass n the first n of
    each list are final, and the fixed point is that top-down result (ties rarely chain: ~2 passes)."""
    out = values
    while True:
        above = np.roll(out, 1)
        with np.errstate(invalid="ignore"):  # inf - inf: NaN, never lower (as the one-by-one loop)
            limit = above - np.maximum(np.abs(above), 1e-9) * TIE_GAP
            lowered = np.where(~first & (values > limit), limit, values)
        if np.array_equal(lowered, out, equal_nan=True):
            return lowered
        out = lowered


def write_run(ranked: Iterable[RankedList], path: str | Path, tag: str = "memeval") -> None:
    """One line per ranked memory, `qid Q0 docid rank score tag`; the tag (the variant's name) is a field
    of every line, so one with whitespace is refused (UnsafeNameError), never written as 7 fields."""
    check_name("variant", tag, "run tag")
    ranked = list(ranked)
    for r in ranked:
        if len(r.scores) != len(r.memory_ids):
            raise ValueError(f"query {r.query_id}: {len(r.memory_ids)} memory ids but {len(r.scores)} scores")
    lengths = np.array([len(r.memory_ids) for r in ranked], dtype=np.int64)
    starts = np.cumsum(lengths) - lengths
    values = np.concatenate([np.asarray(r.scores, dtype=np.float64) for r in ranked] or [np.zeros(0)])
    first = np.zeros(len(values), dtype=bool)
    first[starts[lengths > 0]] = True
    scores = float_reprs(_lowered(values, first))  # every query's scores as text, in one call
    ranks = [str(i) for i in range(1, 1 + int(lengths.max(initial=0)))]
    with open(path, "w", encoding="utf-8") as fh:
        for r, start in zip(ranked, starts.tolist(), strict=True):
            head, tail = f"{r.query_id} Q0 ", f" {tag}\n"
            texts = scores[start : start + len(r.memory_ids)]
            rows = zip(r.memory_ids, ranks, texts, strict=False)  # ranks: as many as the longest list has
            fh.write("".join([f"{head}{doc} {rank} {score}{tail}" for doc, rank, score in rows]))


MUST_NOT_QRELS = "qrels.mustnot.tsv"


def write_qrels(qrels: Mapping[str, Mapping[str, int]], folder: str | Path) -> None:
    """A run folder's judgements: qrels.tsv as trec_eval reads it safely (a negative grade written 0), and,
    when there are must-not judgements, qrels.mustnot.tsv with each of them as graded (negative)."""
    folder = Path(folder)
    lines = [(qid, mid, grade) for qid, judged in qrels.items() for mid, grade in judged.items()]
    (folder / "qrels.tsv").write_text(
        "".join(f"{qid} 0 {mid} {max(grade, 0)}\n" for qid, mid, grade in lines), encoding="utf-8"
    )
    must_not = "".join(f"{qid} 0 {mid} {grade}\n" for qid, mid, grade in lines if grade < 0)
    if must_not:
        (folder / MUST_NOT_QRELS).write_text(must_not, encoding="utf-8")


def read_run(path: str | Path, data: bytes | None = None) -> dict[str, list[str]]:
    """Ranked doc ids per query, ranked as trec_eval, ranx and ir_measures rank a run file: by score, ties
    by document id descending; the rank column is ignored. Parsed and ordered by the trec_run channel's
    own code (retrieval.retrievers.trec_run), so a file this harness reads back is one that channel
    accepts (6 fields a line, numbers, no document twice) and ranks the same way. `data`: the file's bytes
    when already read (by the run-folder check), so what is ranked is what was checked."""
    lines = parse_run(path, Path(path).read_bytes() if data is None else data)
    return {qid: [line.doc_id for line in trec_eval_order(found)] for qid, found in lines.items()}
