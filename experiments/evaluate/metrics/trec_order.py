"""A run given as scores, ranked as trec_eval ranks it, straight into the grade matrix the kernels read.

trec_eval (and pytrec_eval, ranx, ir_measures) rank a query's documents by score descending, compared as a
C float (float32: scores closer than its resolution tie), ties by document id descending; the rank column
of a run file is ignored. That is `retrieval.retrievers.trec_run.trec_eval_order`, one query at a time in
Python. Here every query is ranked at once: the scores laid out as a padded matrix (one row a query) and
sorted along its rows, and only when two documents of a query tie as float32 are the ids compared (each
id's place in Python's string order, the order that sort compares them in). A document's grade does not
depend on its rank, so the grades are looked up in the order the scores come (one C-level `dict.get` per
document) and moved into rank order with the scores.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import chain, repeat

import numpy as np

Qrels = Mapping[str, Mapping[str, int]]
Scores = Mapping[str, Mapping[str, float]]


def scored_grades(qrels: Qrels, scores: Scores, queries: Sequence[str]) -> np.ndarray:
    """(len(queries), longest list) matrix: row i holds the qrels grades of query i's scored documents in
    trec_eval's order, zero-padded; a query without scores is a row of zeros. A NaN score is a ValueError."""
    pairs = [(i, qrels[q], scored) for i, q in enumerate(queries) if (scored := scores.get(q))]
    lengths = np.fromiter((len(s) for _, _, s in pairs), dtype=np.intp, count=len(pairs))
    n, width = int(lengths.sum()), int(lengths.max(initial=0))
    values = np.fromiter(chain.from_iterable(s.values() for _, _, s in pairs), dtype=np.float64, count=n)
    grades = np.fromiter(
        chain.from_iterable(map(j.get, s.keys(), repeat(0)) for _, j, s in pairs), dtype=np.float64, count=n
    )
    if np.isnan(values).any():
        at = int(np.searchsorted(np.cumsum(lengths), np.flatnonzero(np.isnan(values))[0], side="right"))
        raise ValueError(f"run for query {queries[pairs[at][0]]!r}: a score is NaN, which has no rank")
    # One row per scored query, its documents in the order they came, padded at the end with +inf, sorted
    # along the rows (small sorts, cache-friendly). Ascending sorts: the key is the negated float32 score
    # (+ 0.0 makes -0.0 the 0.0 it equals). A quicksort is right unless two of a row's keys are equal: a
    # tie, or a -inf score (+inf key) beside the padding; then the ids decide, as trec_eval does.
    row, column = cells(lengths)
    key = np.full((len(pairs), max(width, 1)), np.inf, dtype=np.float32)
    key[row, column] = -values.astype(np.float32) + np.float32(0.0)
    grade = np.zeros(key.shape)
    grade[row, column] = grades
    order = np.argsort(key, axis=1)
    ranked = np.take_along_axis(key, order, axis=1)
    tied = (ranked[:, 1:] == ranked[:, :-1])[ranked[:, :-1] != np.inf].any()
    if tied or np.isposinf(key[row, column]).any():
        order = np.argsort(_with_ids(key, row, column, _id_ranks(pairs, n)), axis=1)
    matrix = np.zeros((len(queries), max(width, 1)))
    matrix[[i for i, _, _ in pairs]] = np.take_along_axis(grade, order, axis=1)
    return matrix


def cells(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) of every cell of ragged rows of these lengths laid out left-aligned in a matrix, in
    row order: the index that fills a zero-padded matrix without a Python loop over cells."""
    row = np.repeat(np.arange(len(lengths)), lengths)
    return row, np.arange(len(row)) - np.repeat(np.cumsum(lengths) - lengths, lengths)


def _with_ids(key: np.ndarray, row: np.ndarray, column: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """One uint64 per cell, unique within its row and ordered as (key, id descending, padding last): the
    float32 key's bits made to sort as unsigned integers, above 32 bits that rank the ids."""
    bits = key.view(np.uint32).astype(np.uint64)
    negative = bits >= 0x80000000
    bits = np.where(negative, 0xFFFFFFFF - bits, bits | 0x80000000)  # IEEE order as unsigned order
    below = np.full(key.shape, len(ids) + 1, dtype=np.uint64)  # the padding: after every document
    below[row, column] = len(ids) - ids  # the highest id (rank len - 1) first
    return (bits << np.uint64(32)) | below


def _id_ranks(pairs: list, n: int) -> np.ndarray:
    """Each document's place among all the run's ids in Python's string order (the order trec_eval_order's
    sort compares them in), in the order the documents came."""
    ids = list(chain.from_iterable(s.keys() for _, _, s in pairs))
    place = {name: i for i, name in enumerate(sorted(set(ids)))}
    return np.fromiter(map(place.__getitem__, ids), dtype=np.int64, count=n)
