"""One check of a run folder, before any reader takes it for a finished run: memeval-merge (each shard),
memeval-gate (judging and --refresh), memeval-report and resume's finished-run lookup all read a folder
through `check_run_folder`, so a folder that fails it is never taken for a run's result.

A folder passes when:
- every file a run writes is there and readable: metrics.json, per_query.csv, config.yaml, run.trec and
  qrels.tsv (tags.json, qrels.mustnot.tsv when present): a regular file in the folder (not a directory, not
  a link to another folder's file, not a link loop), UTF-8 text, and parseable;
- run.trec and qrels.tsv cover exactly the queries of per_query.csv: run.trec holds `n_returned` lines for
  each query that returned something and none for any other, qrels.tsv judges only per_query.csv's queries
  and has a relevant judgement for each answerable one (where a benchmark's own scorer decides which are
  answerable, only the first);
- each per-query metric value is what run.trec and the judgements give, within `VALUE_TOLERANCE`
  (a value's last bits depend on the batch it was scored in: docs/running_at_scale.md), unless the suite's
  own scorer made them (suite.protocol=official: its scorer lives in the suite's loader).

The partial mark (metrics.json's `partial` section, written by `memeval-merge --allow-partial`) is read
and returned: a folder that passes may still be a partial run, which the gate and resume refuse and a
report marks (`check_whole_run` refuses it too: memeval-protocols, memeval-export). A failure is a
`RunFolderError`: one line naming the folder, the file and what is wrong.
"""

from __future__ import annotations

import io
import itertools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from experiments.evaluate.metrics import parse_metric
from experiments.evaluate.table import metric_columns
from experiments.run_folder.per_query import FILENAME as PER_QUERY
from experiments.run_folder.per_query import read_per_query
from experiments.run_folder.trec import MUST_NOT_QRELS

REQUIRED = ("metrics.json", PER_QUERY, "config.yaml", "run.trec", "qrels.tsv")
OPTIONAL = ("tags.json", MUST_NOT_QRELS)
PARTIAL_SECTION = "partial"  # metrics.json of a partial merge (experiments/merge.py)
# Larger than any difference of batch width (the 17th digit), smaller than any change of one query's
# ranking (one document moved changes a rank metric of a query by far more).
VALUE_TOLERANCE = 1e-9
_LISTED = 5  # queries named in a message


class RunFolderError(ValueError):
    """A folder that is not a whole finished run: bad input (exit 2) for every reader."""

    def __init__(self, folder: Path, file: str, problem: str) -> None:
        super().__init__(f"{folder}: {file}: {problem}")
        self.folder, self.file, self.problem = folder, file, problem


@dataclass(frozen=True)
class CheckedRun:
    """A run folder that passed the check, its files read."""

    folder: Path
    metrics: dict[str, Any]
    config: dict[str, Any]
    tags: dict[str, str]
    per_query: pd.DataFrame
    texts: Mapping[str, str]  # run.trec, qrels.tsv and qrels.mustnot.tsv ("" when absent), as written

    @property
    def partial(self) -> dict[str, Any] | None:
        """What a partial merge lacks (metrics.json's `partial`); None for a whole run."""
        return partial_mark(self.metrics)


def partial_mark(metrics: Mapping[str, Any]) -> dict[str, Any] | None:
    """metrics.json's partial section (a merge of some shards only), None for a whole run."""
    mark = metrics.get(PARTIAL_SECTION)
    return dict(mark) if isinstance(mark, Mapping) else None


def describe_partial(mark: Mapping[str, Any]) -> str:
    """`1 of 2 shards; missing 1/2`."""
    missing = ", ".join(mark.get("missing") or []) or "none"
    return f"{mark.get('shards', '?')} shards; missing {missing}"


def check_run_folder(folder: str | Path) -> CheckedRun:
    """The folder's files read and checked together (module docstring). Raises RunFolderError."""
    checked, run, qrels = _read(Path(folder))
    official = (checked.config.get("suite") or {}).get("protocol") == "official"
    _check_coverage(checked.folder, checked.per_query, run, qrels, official=official)
    if not official:  # a benchmark's own scorer (it lives in the suite's loader) made the values
        _check_values(checked.folder, checked.config, checked.per_query, run, qrels)
    return checked


def check_whole_run(folder: str | Path) -> CheckedRun:
    """`check_run_folder`, and a partial merge refused too: for a reader that scores or exports a folder as
    the whole suite's run (memeval-protocols, memeval-export), where the missing shards' queries would
    count as queries that returned nothing."""
    checked = check_run_folder(folder)
    if checked.partial is not None:
        raise RunFolderError(
            checked.folder, "metrics.json",
            f"a partial merge ({describe_partial(checked.partial)}), not a whole run: merge every shard "
            "(memeval-merge without --allow-partial)",
        )  # fmt: skip
    return checked


def _read(folder: Path) -> tuple[CheckedRun, dict[str, list[str]], dict[str, dict[str, int]]]:
    """The folder's files read and parsed (each readable and well-formed), not yet checked together."""
    if not folder.is_dir():
        raise RunFolderError(
            folder, ".", "the folder does not exist" if not folder.exists() else "not a folder"
        )
    texts = {name: read_text(folder, name) for name in REQUIRED}
    texts.update({name: read_text(folder, name, required=False) or "" for name in OPTIONAL})
    metrics = _json_object(folder, "metrics.json", texts["metrics.json"])
    tags = _json_object(folder, "tags.json", texts["tags.json"]) if texts["tags.json"] else {}
    config = _yaml_mapping(folder, "config.yaml", texts["config.yaml"])
    per_query = _per_query(folder, texts[PER_QUERY])
    run = parse_run(texts["run.trec"], folder)
    qrels = parse_qrels([texts["qrels.tsv"], texts[MUST_NOT_QRELS]], folder)
    return CheckedRun(folder, metrics, config, tags, per_query, texts), run, qrels


def read_text(folder: Path, name: str, *, required: bool = True) -> str | None:
    """A file of the folder as UTF-8 text; None when it is optional and absent."""
    path = folder / name
    if path.is_symlink():
        try:
            target = path.resolve(strict=True)
        except (OSError, RuntimeError):  # a loop, or a link to nothing
            problem = "a symlink that leads nowhere (a loop or a missing target)"
            raise RunFolderError(folder, name, problem) from None
        if target.parent != folder.resolve():
            raise RunFolderError(folder, name, f"a symlink to another folder's file ({target})")
    if not path.exists():
        if required:
            raise RunFolderError(folder, name, "missing")
        return None
    if path.is_dir():
        raise RunFolderError(folder, name, "a directory, not a file")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise RunFolderError(folder, name, f"cannot be read ({err.strerror})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise RunFolderError(folder, name, f"line {line}: not UTF-8 text (byte {err.start})") from None


def _json_object(folder: Path, name: str, text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as err:
        line = getattr(err, "lineno", "?")
        raise RunFolderError(folder, name, f"line {line}: not valid JSON (truncated?): {err}") from None
    if not isinstance(value, dict):
        raise RunFolderError(folder, name, f"line 1: a JSON object expected, found {type(value).__name__}")
    return value


def _yaml_mapping(folder: Path, name: str, text: str) -> dict[str, Any]:
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = mark.line + 1 if mark is not None else "?"
        problem = getattr(err, "problem", None) or "unreadable"
        raise RunFolderError(folder, name, f"line {line}: not valid YAML: {problem}") from None
    if not isinstance(value, dict):
        raise RunFolderError(folder, name, "line 1: a mapping of settings expected")
    return value


def _per_query(folder: Path, text: str) -> pd.DataFrame:
    try:
        frame = read_per_query(io.StringIO(text))
    except (ValueError, KeyError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise RunFolderError(folder, PER_QUERY, f"not a per-query table: {first}") from None
    for column in ("abstention", "n_returned"):
        if column not in frame.columns:
            raise RunFolderError(folder, PER_QUERY, f"line 1: no `{column}` column")
    if frame.index.has_duplicates:
        twice = sorted(set(frame.index[frame.index.duplicated()]))
        raise RunFolderError(folder, PER_QUERY, f"queries listed twice: {_named(twice)}")
    returned = pd.to_numeric(frame["n_returned"], errors="coerce")
    bad = [str(q) for q, v in returned.items() if not (v >= 0 and float(v).is_integer())]
    if bad:
        raise RunFolderError(folder, PER_QUERY, f"field n_returned is not a count for queries {_named(bad)}")
    return frame


def parse_run(text: str, folder: Path | None = None) -> dict[str, list[str]]:
    """run.trec's documents per query, in their ranked (file) order. Read as one list of fields where every
    line has its six (a line at a time, in Python, was most of the check's time on a large run); a file
    that does not is read line by line to name the line."""
    fields = text.split()
    lines = text.count("\n") + (not text.endswith("\n") and bool(text))
    if len(fields) == 6 * lines and set(fields[1::6]) <= {"Q0"}:
        qids, docs = np.array(fields[0::6], dtype=object), fields[2::6]
        starts = [0, *(np.flatnonzero(qids[1:] != qids[:-1]) + 1).tolist(), len(docs)]
        run: dict[str, list[str]] = {}
        for start, end in itertools.pairwise(starts):
            if end > start:
                run.setdefault(str(qids[start]), []).extend(docs[start:end])
        return run
    return _parse_run_lines(text, folder)


def _parse_run_lines(text: str, folder: Path | None) -> dict[str, list[str]]:
    run: dict[str, list[str]] = {}
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if len(fields) != 6:
            raise RunFolderError(
                folder or Path("."),
                "run.trec",
                f"line {number}: {len(fields)} fields, not 6 (qid Q0 doc rank score tag)",
            )
        run.setdefault(fields[0], []).append(fields[2])
    return run


def parse_qrels(texts: list[str], folder: Path | None = None) -> dict[str, dict[str, int]]:
    """The judgements of qrels.tsv, then qrels.mustnot.tsv (a must-not grade is 0 in the first, itself in
    the second)."""
    qrels: dict[str, dict[str, int]] = {}
    for name, text in zip(("qrels.tsv", MUST_NOT_QRELS), texts, strict=True):
        for number, line in enumerate(text.splitlines(), 1):
            fields = line.split()
            try:
                qid, _, doc, grade = fields
                qrels.setdefault(qid, {})[doc] = int(grade)
            except ValueError:
                raise RunFolderError(
                    folder or Path("."), name, f"line {number}: not `qid 0 doc grade`: {line[:80]!r}"
                ) from None
    return qrels


def _check_coverage(
    folder: Path,
    frame: pd.DataFrame,
    run: Mapping[str, list[str]],
    qrels: Mapping[str, Mapping[str, int]],
    *,
    official: bool,
) -> None:
    """`official`: a benchmark's scorer says which queries are answerable (upstream may score one that
    has no relevant judgement), so only the judged queries' set is checked."""
    ids = set(frame.index)
    extra = sorted(set(run) - ids)
    if extra:
        raise RunFolderError(
            folder, "run.trec", f"ranks queries per_query.csv does not hold: {_named(extra)}"
        )
    counts = frame["n_returned"].astype(int)
    short = [q for q, n in counts.items() if len(run.get(q, ())) != n]
    if short:
        shown = ", ".join(f"{q} ({len(run.get(q, ()))} of {counts[q]})" for q in short[:_LISTED])
        more = f" and {len(short) - _LISTED} more" if len(short) > _LISTED else ""
        raise RunFolderError(
            folder, "run.trec", f"lines do not match per_query.csv's n_returned for queries {shown}{more}"
        )
    stray = sorted(set(qrels) - ids)
    if stray:
        raise RunFolderError(
            folder, "qrels.tsv", f"judges queries per_query.csv does not hold: {_named(stray)}"
        )
    if official:
        return
    answerable = frame.index[~frame["abstention"].astype(str).str.lower().eq("true")]
    unjudged = [q for q in answerable if not any(g > 0 for g in qrels.get(q, {}).values())]
    if unjudged:
        raise RunFolderError(
            folder,
            "qrels.tsv",
            f"no relevant judgement for answerable queries of per_query.csv: {_named(unjudged)}",
        )


def _check_values(
    folder: Path,
    config: Mapping[str, Any],
    frame: pd.DataFrame,
    run: Mapping[str, list[str]],
    qrels: Mapping[str, Mapping[str, int]],
) -> None:
    """Each metric column of per_query.csv against the same metric scored from run.trec and the judgements."""
    wanted = _relevance_metrics(config, frame)
    if not wanted:
        return
    try:
        derived = metric_columns(
            None, qrels, run, wanted, list(frame.index), empty=config.get("empty_queries", "apart")
        )
    except ValueError as err:
        raise RunFolderError(folder, "run.trec", f"cannot be scored: {err}") from None
    for name, values in derived.items():
        if name not in frame.columns:
            continue
        written = pd.to_numeric(frame[name], errors="coerce").to_numpy(dtype=float)
        wrong = [
            (q, w, d)
            for q, w, d in zip(frame.index, written, values, strict=True)
            if not (math.isnan(w) and math.isnan(d)) and not abs(w - d) <= VALUE_TOLERANCE
        ]
        if wrong:
            shown = ", ".join(f"{q} ({w:.6g} written, {d:.6g} from the files)" for q, w, d in wrong[:_LISTED])
            more = f" and {len(wrong) - _LISTED} more" if len(wrong) > _LISTED else ""
            raise RunFolderError(
                folder, PER_QUERY,
                f"field {name} is not what run.trec and qrels.tsv give (tolerance {VALUE_TOLERANCE:g}) for "
                f"queries {shown}{more}: run.trec or per_query.csv was changed after the run",
            )  # fmt: skip


def derived_values(folder: str | Path) -> dict[str, Any]:
    """The per-query metric values run.trec and the judgements of a folder give (the check's side, for a
    tool that rewrites per_query.csv after changing a ranking on purpose)."""
    checked, run, qrels = _read(Path(folder))
    wanted = _relevance_metrics(checked.config, checked.per_query)
    return metric_columns(
        None,
        qrels,
        run,
        wanted,
        list(checked.per_query.index),
        empty=checked.config.get("empty_queries", "apart"),
    )


def _relevance_metrics(config: Mapping[str, Any], frame: pd.DataFrame) -> list[str]:
    """The run's metrics that run.trec and the judgements determine (relevance metrics, harm@k) and that
    per_query.csv holds; any other column (an answer stage's, say) is not the check's to re-derive."""
    out = []
    for name in map(str, config.get("metrics") or []):
        try:
            parse_metric(name)
        except ValueError:
            continue
        if name in frame.columns:
            out.append(name)
    return out


def _named(ids: list[str]) -> str:
    shown = ", ".join(map(str, ids[:_LISTED]))
    return shown + (f" and {len(ids) - _LISTED} more" if len(ids) > _LISTED else "")
