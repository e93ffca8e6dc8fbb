"""`memeval-merge`: the shards of a run (`shard=i/n`, experiments/shards.py) put back into one run folder.

    memeval-merge multirun/2026-11-27_18-00-00            # every shard job of a sweep folder
    memeval-merge run0 run1 run2 run3 --out merged/hybrid   # named shard folders
    memeval-merge run0 run1 run3 --allow-partial            # statistics on the shards that are there

Sits after the shards' runs, beside the runner: it reads their folders only. The whole run's files are
rebuilt in the whole suite's order (each shard's metrics.json holds its queries' and judgements' positions
in the whole suite): `run.trec`, `qrels.tsv` and `ranking.csv` are the unsharded run's bytes (each line
is one query's, and no line depends on another query: experiments/run_folder/trec.py, ranking.py), and
`per_query.csv` holds the same rows, their metrics scored again from the merged run.trec as one batch, as
the unsharded run scores them. Every aggregate (means, CIs, design effects, per-label tables) is
computed again from the merged per-query rows by the run's own function (experiments/evaluate/table.py
`summarize`), never averaged from the shards', so metrics.json equals the unsharded run's but for what
measures the run's circumstances (`NOT_COMPARED`: timings and what came from a cache).

Refused (exit 2, naming the folder): a shard that failed or did not finish, a shard missing from 0..n-1,
shards of different n, of different configs (the differing keys named), suites or code. `--allow-partial`
merges what is there and says so (metrics.json `partial`, tag `memeval.partial`); a partial merge is never
recorded as the finished run of its config.

Logged to MLflow (when the shards' config tracks) as one run, the shards' runs re-parented below it; in a
sweep (experiments/track/sweep_parent.py) each merged run is a child of the sweep's parent.

A sharded sweep (`memeval-run -m shard=0/4,1/4,2/4,3/4`) merges itself at its end: `ShardMergeCallback`,
wired in conf/config.yaml (`hydra.callbacks.shard_merge`, after `mlflow_sweep`: Hydra ends callbacks in
reverse order, so the merge runs before the sweep's parent is finished and its best child chosen). When
every job has finished, the shard jobs of each config are merged into `<sweep dir>/merged/<k>`, each
logged as a child of the sweep's parent with its shards below it. A sweep that shards nothing does nothing
there. Any launcher: the jobs' folders are all it reads.
"""

from __future__ import annotations

import csv
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from experiments.configure.build import extra_metrics, pipeline_from_config
from experiments.configure.compose import yaml_text
from experiments.csv_cells import original_text, safe_frame
from experiments.evaluate.cost import merged_section
from experiments.evaluate.table import metric_columns, summarize
from experiments.exit_codes import EXIT_BAD_INPUT, ArgumentParser, console_script
from experiments.run.resume import CONFIG_HASH_TAG, config_hash, record_finished
from experiments.run_folder import PARTIAL_TAG
from experiments.run_folder.check import (
    PARTIAL_SECTION,
    RunFolderError,
    check_run_folder,
    parse_qrels,
    parse_run,
)
from experiments.run_folder.ranking import FILENAME as RANKING_FILE
from experiments.run_folder.trec import MUST_NOT_QRELS
from experiments.shards import SHARD_KEY, SHARD_OF_TAG, SHARD_SECTION, SHARD_TAG, SHARDS_KEY
from experiments.suites.load import load_suite
from experiments.suites.suite import SuiteError
from experiments.track.finished_runs import find_run_dirs, missing_run_dirs
from experiments.track.mlflow_tracker import flatten, statistics_tags
from experiments.track.run_params import child_run_name, job_values
from experiments.track.sweep_end import SweepEndCallback
from experiments.track.sweep_parent import FAILED_FILE, VARYING_KEY, read_parent
from retrieval.types import Corpus

# What two runs of one config may differ in, so a merge is compared with the unsharded run without them:
# timings, and what a run took from a cache (a shard's cache entries are its own). metrics.json keys
# (dotted for nested ones) and per_query.csv columns (a trailing `*`: a prefix).
NOT_COMPARED = {
    "metrics.json": (
        "wall_s",
        "build_ms",
        "prefix_cache_hit",
        "cache",
        "resource",
        "timings",
        "overall.latency_ms_p50",
        "overall.latency_ms_p95",
        "overall.latency_measured",
    ),
    "per_query.csv": ("latency_ms", "ms.*"),
}


def comparable_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """metrics.json without what `NOT_COMPARED` lists: what a merge must reproduce exactly."""
    out = json.loads(json.dumps(metrics))
    for key in NOT_COMPARED["metrics.json"]:
        *path, last = key.split(".")
        node = out
        for part in path:
            node = node.get(part, {})
        node.pop(last, None)
    return out


def comparable_rows(path: str | Path) -> list[list[str]]:
    """per_query.csv's cells as written, without the columns `NOT_COMPARED` lists."""
    with open(path, encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))
    dropped = NOT_COMPARED["per_query.csv"]
    keep = [
        i
        for i, name in enumerate(rows[0])
        if not any(name == d or (d.endswith("*") and name.startswith(d[:-1])) for d in dropped)
    ]
    return [[row[i] for i in keep] for row in rows]


MERGED_FILE = "merged.json"  # in a merged folder: its shards (folders, MLflow runs) and whether partial
MERGED_TAG = "memeval.merged_from"  # "4 shards"
BY_LINE = ("run.trec", "qrels.tsv", MUST_NOT_QRELS)  # one query's lines together, in query order
# metrics.json keys a run writes that the merge computes (or takes from the shards, for circumstances):
# any other section is an extra metrics section (`extra_metrics`) or a live system's cost, computed from
# the whole corpus, which no shard has.
_KNOWN_KEYS = frozenset(
    {
        "overall", "overall_ci95", "statistics", "empty_queries", "by_label", "n_queries", "scope_leaks",
        "queries_returning_nothing", "build_ms", "prefix_cache_hit", "cache", "wall_s", "suite", "variant",
        "config_hash", "code_version", SHARD_SECTION, "resource", "timings",
    }
)  # fmt: skip


class MergeError(ValueError):
    """The shards cannot be merged (missing, failed, or not of one run): exit 2."""


class ShardFailed(MergeError):
    """A shard's job failed or did not finish: what `--allow-partial` merges without."""


@dataclass(frozen=True)
class ShardRun:
    """One finished shard's folder, read."""

    folder: Path
    metrics: dict[str, Any]
    config: dict[str, Any]  # the resolved config (config.yaml)
    tags: dict[str, str]
    per_query: pd.DataFrame
    texts: Mapping[str, str]  # run.trec, qrels.tsv, qrels.mustnot.tsv as written

    @property
    def section(self) -> dict[str, Any]:
        return self.metrics[SHARD_SECTION]

    @property
    def name(self) -> str:
        return f"{self.section['shard']} ({self.folder})"


def whole_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The unsharded run's config: the shard's with `shard: null` (and no `shards`)."""
    whole = {k: v for k, v in config.items() if k != SHARDS_KEY}
    whole[SHARD_KEY] = None
    return whole


def read_shard(folder: Path) -> ShardRun:
    """A finished shard's folder (`_shard_or_whole`); a whole run is a MergeError naming it."""
    shard = _shard_or_whole(folder)
    if shard is None:
        raise MergeError(f"{folder} is not a shard (its metrics.json has no `shard` section): a whole run")
    return shard


def _shard_or_whole(folder: Path) -> ShardRun | None:
    """A finished shard's folder, through the run folder check (experiments/run_folder/check.py: its files
    whole, its per-query values those of its run.trec); a failed, unfinished, damaged or unsharded run is
    a MergeError naming it; a whole run is None. A sweep job that a finished run answered (skipped.json) is
    read as that run."""
    skipped = folder / "skipped.json"
    if not _present(folder / "metrics.json") and skipped.is_file():
        reused = _json_note(folder, "skipped.json").get("run_dir")
        if reused and (Path(reused) / "metrics.json").is_file():
            folder = Path(reused)
    if (folder / FAILED_FILE).is_file():
        error = _json_note(folder, FAILED_FILE).get("error", "failed")
        raise ShardFailed(f"shard {_declared_shard(folder)} failed ({folder}): {error}")
    if not _present(folder / "metrics.json"):
        raise ShardFailed(f"shard {_declared_shard(folder)} did not finish ({folder} has no metrics.json)")
    try:
        checked = check_run_folder(folder)
    except RunFolderError as err:
        raise MergeError(f"shard folder {err}") from None
    if SHARD_SECTION not in checked.metrics:
        return None
    return ShardRun(folder, checked.metrics, checked.config, checked.tags, checked.per_query, checked.texts)


def _present(path: Path) -> bool:
    """There, whatever it is (a directory or a broken link is there, and refused by the check)."""
    return path.exists() or path.is_symlink()


def _json_note(folder: Path, name: str) -> dict[str, Any]:
    """A job's small JSON note (skipped.json, failed.json); unreadable: a MergeError naming it."""
    try:
        value = json.loads((folder / name).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise MergeError(f"{folder}: {name}: cannot be read ({err})") from None
    return value if isinstance(value, dict) else {}


def _declared_shard(folder: Path) -> str:
    """A job's shard as its Hydra config says (a failed job wrote no config.yaml of its own)."""
    for path in (folder / "config.yaml", folder / ".hydra" / "config.yaml"):
        if path.is_file():
            try:
                value = (yaml.safe_load(path.read_text()) or {}).get(SHARD_KEY)
            except (yaml.YAMLError, OSError, ValueError):  # unreadable: the check names it
                continue
            return str(value)
    return "?"


def collect(paths: Sequence[str | Path]) -> tuple[list[ShardRun], list[str]]:
    """The shard runs named (folders, or folders holding them, e.g. a sweep's) and the failures found:
    a failed or unfinished job under a folder, or a folder named that holds no finished shard."""
    runs: list[ShardRun] = []
    failures: list[str] = []
    for path in map(Path, paths):
        if not path.exists():
            raise MergeError(f"{path} does not exist")
        if _present(path / "metrics.json") or (path / FAILED_FILE).is_file() or (path / ".hydra").is_dir():
            try:
                runs.append(read_shard(path))
            except ShardFailed as err:
                failures.append(str(err))
            continue
        try:
            folders = find_run_dirs([path])
        except Exception:  # no finished run under it: only failures, if any
            folders = []
        for folder in folders:
            if (folder / MERGED_FILE).is_file():  # a merged run beside its shards is not one of them
                continue
            shard = _shard_or_whole(folder)
            if shard is not None:  # a whole run among the jobs is no shard of theirs
                runs.append(shard)
        for line in missing_run_dirs([path]):
            job = Path(line.split(": ", 1)[0])
            failures.append(f"shard {_declared_shard(job)} failed or did not finish ({line})")
        if not folders and not failures:
            raise MergeError(f"no shard run under {path}")
    return runs, failures


def check(runs: list[ShardRun], failures: list[str], *, allow_partial: bool) -> dict[str, Any] | None:
    """The shards in index order; None when whole, else what is missing (`--allow-partial`). Shards of
    different runs are refused whatever the flag."""
    if not runs:
        raise MergeError("no finished shard to merge" + "".join(f"\n  {f}" for f in failures))
    first = runs[0]
    counts = {r.section["count"] for r in runs}
    if len(counts) > 1:
        raise MergeError(
            "the shards split the suite differently: " + ", ".join(r.name for r in runs) + " (one n each run)"
        )
    whole_hash = config_hash(whole_config(first.config))
    for run in runs[1:]:
        if config_hash(whole_config(run.config)) != whole_hash:
            raise MergeError(f"{run.name} is not of the same run as {first.name}: {_config_diff(first, run)}")
        for what, key in (("suite", "content_hash"),):
            if run.section["whole_suite"][key] != first.section["whole_suite"][key]:
                raise MergeError(f"{run.name} ran another {what} than {first.name} (content hash differs)")
        if run.metrics.get("code_version") != first.metrics.get("code_version"):
            raise MergeError(
                f"{run.name} ran other code than {first.name} (code version "
                f"{run.metrics.get('code_version')} vs {first.metrics.get('code_version')}): "
                "re-run the older shards"
            )
    by_index: dict[int, ShardRun] = {}
    for run in runs:
        index = run.section["index"]
        if index in by_index:
            raise MergeError(
                f"shard {run.section['shard']} given twice: {by_index[index].folder} and {run.folder}"
            )
        by_index[index] = run
    count = counts.pop()
    missing = [f"{i}/{count}" for i in range(count) if i not in by_index]
    if not missing and not failures:
        runs.sort(key=lambda r: r.section["index"])
        return None
    have = ", ".join(sorted(r.section["shard"] for r in runs))
    said = f"shards missing: {', '.join(missing) or 'none'} (have {have})" + "".join(
        f"\n  {f}" for f in failures
    )
    if not allow_partial:
        raise MergeError(said + "\nRe-run the missing shards, or merge with --allow-partial (marked partial)")
    runs.sort(key=lambda r: r.section["index"])
    return {"shards": f"{len(runs)} of {count}", "missing": missing, "failures": failures}


def _config_diff(a: ShardRun, b: ShardRun) -> str:
    left, right = flatten(whole_config(a.config)), flatten(whole_config(b.config))
    keys = sorted(
        k for k in set(left) | set(right) if left.get(k) != right.get(k) and not k.startswith("hydra")
    )
    shown = [f"{k}={left.get(k, '(unset)')} vs {right.get(k, '(unset)')}" for k in keys[:6]]
    more = f" (+{len(keys) - 6} more)" if len(keys) > 6 else ""
    return "its config.yaml differs in " + "; ".join(shown) + more


def _line_blocks(text: str) -> Iterator[tuple[str, str]]:
    """(query id, its lines) of a run.trec or qrels file's text, whose lines of one query are together."""
    current, lines = None, []
    for line in text.splitlines(keepends=True):
        qid = line.split(None, 1)[0]
        if qid != current and lines:
            yield current, "".join(lines)
            lines = []
        current = qid
        lines.append(line)
    if lines:
        yield current, "".join(lines)


def _csv_blocks(path: Path) -> tuple[str, list[tuple[str, str]]]:
    """ranking.csv's header line and (query id, its rows' text), the text exactly as written (a quoted
    cell may hold a line break: csv reads whole records, the text is kept as it came)."""
    consumed: list[str] = []

    def lines(fh: Any) -> Iterator[str]:
        for line in fh:
            consumed.append(line)
            yield line

    blocks: list[tuple[str, str]] = []
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.reader(lines(fh))
        next(reader)
        header, consumed[:] = "".join(consumed), []
        for row in reader:
            qid, text = original_text(row[0]), "".join(consumed)
            consumed.clear()
            if blocks and blocks[-1][0] == qid:
                blocks[-1] = (qid, blocks[-1][1] + text)
            else:
                blocks.append((qid, text))
    return header, blocks


def _ordered(blocks: Iterator[tuple[str, str]] | list[tuple[str, str]], position: Mapping[str, int]) -> str:
    return "".join(text for _, text in sorted(blocks, key=lambda b: position[b[0]]))


def _per_query(runs: list[ShardRun], position: Mapping[str, int]) -> pd.DataFrame:
    """The shards' per-query rows in the whole suite's order; columns as the whole run has them: labels
    first, in the order the suite's queries first carry them, then every other column as the shards do."""
    frames = [r.per_query for r in runs if len(r.per_query)]
    if not frames:
        return runs[0].per_query
    frames.sort(key=lambda f: min(position[q] for q in f.index))
    merged = pd.concat(frames)
    merged = merged.loc[sorted(merged.index, key=position.__getitem__)]
    columns = list(dict.fromkeys(c for f in frames for c in f.columns))
    labels = [c for c in columns if c.startswith("label.")]
    first = {c: next((i for i, v in enumerate(merged[c].notna()) if v), len(merged)) for c in labels}
    labels.sort(key=first.__getitem__)
    return merged[[*labels, *(c for c in columns if not c.startswith("label."))]]


def rescored(frame: pd.DataFrame, config: Mapping[str, Any], texts: Mapping[str, str]) -> pd.DataFrame:
    """The merged rows with every relevance metric scored again from the merged run.trec and judgements,
    all queries as one batch, as the unsharded run scores them: a value's last bits depend on the batch
    (experiments/evaluate/table.py `metric_columns`), so a shard's own values may differ from the whole
    run's in the last place. A benchmark's own scorer (suite.protocol=official) lives in its loader: there
    the shards' values are kept."""
    if (config.get("suite") or {}).get("protocol") == "official":
        return frame
    run = parse_run(texts["run.trec"])
    qrels = parse_qrels([texts["qrels.tsv"], texts[MUST_NOT_QRELS]])
    out = frame.copy()
    empty = config.get("empty_queries", "apart")
    for name, values in metric_columns(
        None, qrels, run, config["metrics"], list(frame.index), empty=empty
    ).items():
        out[name] = values
    return out


def _combined(values: list[Any]) -> Any:
    """The shards' figures of one circumstance as one: numbers summed, flags all true, lists joined."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    if all(isinstance(v, bool) for v in values):
        return all(values)
    if all(isinstance(v, int | float) for v in values):
        return sum(values)
    if all(isinstance(v, dict) for v in values):
        keys = dict.fromkeys(k for v in values for k in v)
        return {k: _combined([v.get(k) for v in values]) for k in keys}
    if all(isinstance(v, list) for v in values):
        return sorted({json.dumps(x, sort_keys=True): x for v in values for x in v}.values(), key=str)
    distinct = list(dict.fromkeys(map(str, values)))
    return distinct[0] if len(distinct) == 1 else ",".join(distinct)


def merged_metrics(
    runs: list[ShardRun], frame: pd.DataFrame, whole_hash: str, partial: dict[str, Any] | None
) -> tuple[dict[str, Any], list[str]]:
    """metrics.json of the whole run, from the merged rows (and sections no shard can give)."""
    first = runs[0]
    config = first.config
    metrics = list(config["metrics"])
    noise = [
        c for c in frame.columns if c.startswith("noise@")
    ]  # evaluate() adds them where queries have patterns
    statistics = config.get("statistics") or {}
    out = summarize(
        frame,
        [*metrics, *noise],
        seed=config.get("seed", 0),
        unit=statistics.get("unit", "auto"),
        empty=config.get("empty_queries", "apart"),
    )
    out["build_ms"] = _combined([r.metrics.get("build_ms") for r in runs])  # work done, summed
    out["prefix_cache_hit"] = _combined([r.metrics.get("prefix_cache_hit") for r in runs])
    out["cache"] = _combined([r.metrics.get("cache") for r in runs])
    out["cost"] = merged_section([r.metrics.get("cost") for r in runs])  # experiments/evaluate/cost.py
    out["timings"] = _combined([r.metrics.get("timings") for r in runs])  # work done per phase, summed
    peaks = [r.metrics.get("resource", {}).get("peak_rss_mb") for r in runs]
    out["resource"] = {"peak_rss_mb": max((p for p in peaks if p is not None), default=None)}  # the largest
    wanted = list(config.get("extra_metrics") or {})
    if wanted and partial is None:  # from the whole corpus: the suite read and ingested again
        out.update(whole_extra_metrics(config, first.section["whole_suite"]["content_hash"]))
    unmerged = sorted({k for r in runs for k in r.metrics if k not in _KNOWN_KEYS and k not in out})
    out["wall_s"] = max(r.metrics.get("wall_s") or 0.0 for r in runs)  # the shards may run side by side
    out["suite"] = dict(first.section["whole_suite"])
    out["variant"] = first.metrics.get("variant")
    out["config_hash"] = whole_hash
    out["code_version"] = first.metrics.get("code_version")
    if partial is not None:
        out[PARTIAL_SECTION] = {
            **partial,
            "note": "statistics over the merged shards' scopes only, not the whole suite",
        }
    if unmerged:  # computed from the whole corpus: each shard's is in its own folder
        out["not_merged"] = {k: "per shard only (in each shard's metrics.json)" for k in unmerged}
    return out, unmerged


def whole_extra_metrics(config: Mapping[str, Any], suite_hash: str) -> dict[str, Any]:
    """The run's `extra_metrics` sections (name -> function(suite, corpus)) over the whole suite, read from
    the config's suite (relative paths from this folder, as the shards' jobs ran) and ingested by the
    variant's ingest stages; {} (the sections stay per shard) when that suite is not the one the shards
    cut, e.g. read from another folder."""
    try:
        suite = load_suite(config["suite"])
    except (OSError, SuiteError) as err:
        print(f"warning: run reports not merged: cannot read the whole suite: {err}", file=sys.stderr)
        return {}
    if suite.content_hash != suite_hash:
        print(
            "warning: run reports not merged: the config's suite is not the one the shards cut",
            file=sys.stderr,
        )
        return {}
    pipeline = pipeline_from_config(list(config["variant"]["stages"]), config["stage"], depth=config["depth"])
    corpus = Corpus(tuple(pipeline.ingest_memories(suite.memories)), suite.knowledge)
    return extra_metrics(config["extra_metrics"], suite, corpus)


def merge(
    paths: Sequence[str | Path],
    out: str | Path | None = None,
    *,
    allow_partial: bool = False,
    tracking: bool = True,
) -> Path:
    """Merge the shard runs under `paths` into the folder `out` (default beside the first shard:
    `<its parent>/merged/<k>`, the first k free) and log it (when the shards' config tracks and
    `tracking`). Returns the folder."""
    runs, failures = collect(paths)
    done = merged_before(paths, runs)
    if done is not None:
        return done
    return merge_runs(runs, failures, out, allow_partial=allow_partial, tracking=tracking)


def merged_before(paths: Sequence[str | Path], runs: Sequence[ShardRun]) -> Path | None:
    """The whole merge a sweep folder among `paths` already holds of exactly these shards (the sweep's end
    callback merged it), else None. Merging it again would write a second run and re-parent the shards'
    MLflow runs away from the sweep's merged child."""
    shards = {r.folder.resolve() for r in runs}
    for path in map(Path, paths):
        for note in sorted((path / "merged").glob(f"*/{MERGED_FILE}")):
            try:
                merged = json.loads(note.read_text(encoding="utf-8"))
                listed = {Path(s["folder"]).resolve() for s in merged["shards"]}
            except (OSError, ValueError, KeyError, TypeError):
                continue  # not a merge this code wrote: never taken for one
            if (
                merged.get("partial") is None
                and listed == shards
                and (note.parent / "metrics.json").is_file()
            ):
                return note.parent
    return None


def merge_sweep(sweep_dir: Path, parent: Mapping[str, Any]) -> list[Path]:
    """A sweep's shard jobs merged per config into `<sweep dir>/merged/<k>` (k in the order of their jobs),
    each a child of the sweep's `parent` run named by what the sweep varies besides the shard. A config
    whose shards are not all there is said, not merged (`memeval-merge --allow-partial` can)."""
    runs, failures = collect([sweep_dir])
    groups: dict[str, list[ShardRun]] = {}
    for run in sorted(runs, key=lambda r: (len(r.folder.name), r.folder.name)):
        groups.setdefault(config_hash(whole_config(run.config)), []).append(run)
    varying = [k for k in parent.get(VARYING_KEY, []) if k not in (SHARD_KEY, SHARDS_KEY)]
    merged = []
    for number, (whole_hash, group) in enumerate(groups.items()):
        target = sweep_dir / "merged" / str(number)
        if (target / "metrics.json").is_file():  # a re-run sweep whose jobs were all reused: merged before
            if json.loads((target / "metrics.json").read_text()).get("config_hash") == whole_hash:
                merged.append(_reused_by(target, group, parent))
                continue
        first = group[0]
        overrides_file = first.folder / ".hydra" / "overrides.yaml"
        overrides = yaml.safe_load(overrides_file.read_text()) if overrides_file.is_file() else []
        values = job_values(first.config, [str(o) for o in overrides], varying)
        name = child_run_name(str(first.metrics.get("variant")), values)
        try:
            done = merge_runs(group, failures, target, parent=parent or None, run_name=name)
        except MergeError as err:
            print(f"warning: {name} not merged: {err}", file=sys.stderr)
            continue
        merged.append(_reused_by(done, group, parent))
    return merged


def _reused_by(target: Path, shards: list[ShardRun], parent: Mapping[str, Any]) -> Path:
    """The merged run stands for its shards in the sweep's parent (a re-run's reused shards included)."""
    if parent.get("parent_run_id"):
        from experiments.track.merged_run import forget_reused_shards  # mlflow: imported only when tracked

        forget_reused_shards(parent, [r.folder for r in shards])
    return target


def merge_runs(
    runs: list[ShardRun],
    failures: list[str],
    out: str | Path | None = None,
    *,
    allow_partial: bool = False,
    tracking: bool = True,
    parent: Mapping[str, str] | None = None,
    run_name: str | None = None,
) -> Path:
    """Merge read shard runs (`failures`: the jobs that did not finish) into `out`; logged as a child of a
    sweep's `parent` file when given."""
    partial = check(runs, failures, allow_partial=allow_partial)
    first = runs[0]
    whole = whole_config(first.config)
    whole_hash = config_hash(whole)
    target = Path(out) if out is not None else _free(first.folder.parent / "merged")
    if (target / "metrics.json").exists():
        raise MergeError(f"{target} already holds a finished run: name another --out")
    positions: dict[str, int] = {}
    judged: dict[str, int] = {}
    for run in runs:
        twice = positions.keys() & run.section["query_positions"].keys()
        if twice:  # shards cut by different rules: the whole run is not their sum
            raise MergeError(
                f"{run.name} holds queries another shard holds too: {', '.join(sorted(twice)[:5])}"
            )
        positions.update(run.section["query_positions"])
        judged.update(run.section["qrels_positions"])
    if partial is None and len(positions) != first.section["whole_suite"]["queries"]:
        raise MergeError(
            f"the shards hold {len(positions)} of the suite's {first.section['whole_suite']['queries']} "
            "queries: they were not cut by one rule"
        )
    started = time.perf_counter()
    texts = {  # run.trec, qrels.tsv (and qrels.mustnot.tsv): one query's lines together, in the suite's order
        name: _ordered(
            [b for r in runs for b in _line_blocks(r.texts[name])], positions if i == 0 else judged
        )
        for i, name in enumerate(BY_LINE)
    }
    frame = rescored(_per_query(runs, positions), whole, texts)
    metrics, unmerged = merged_metrics(runs, frame, whole_hash, partial)
    whole_suite_hash = first.section["whole_suite"]["content_hash"]
    tags = {k: v for k, v in first.tags.items() if k not in (SHARD_TAG, SHARD_OF_TAG)}
    tags.update(
        {"suite_hash": whole_suite_hash, CONFIG_HASH_TAG: whole_hash, MERGED_TAG: f"{len(runs)} shards"}
    )
    tags.update(statistics_tags(metrics))
    if partial is not None:
        tags[PARTIAL_TAG] = f"{partial['shards']} shards; missing {', '.join(partial['missing']) or 'none'}"
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:  # written aside, then moved in whole: a refused or broken merge leaves nothing half-written
        for name, text in texts.items():
            if text or name != MUST_NOT_QRELS:
                (staging / name).write_text(text, encoding="utf-8", newline="")
        _merge_ranking(runs, positions, staging / RANKING_FILE)
        safe_frame(frame).to_csv(staging / "per_query.csv")
        (staging / "config.yaml").write_text(yaml_text(whole))
        (staging / "tags.json").write_text(json.dumps(tags, indent=2))
        note = {
            "shards": [{"shard": r.section["shard"], "folder": str(r.folder.resolve())} for r in runs],
            "partial": partial,
            "not_merged": unmerged,
            "merge_s": time.perf_counter() - started,
        }
        (staging / MERGED_FILE).write_text(json.dumps(note, indent=2))
        (staging / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=False, default=str))
        if target.exists():
            if any(target.iterdir()):
                raise MergeError(f"{target} exists and is not empty: name another --out")
            target.rmdir()
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    run_id = None
    if tracking and (first.config.get("tracking") or {}).get("enabled"):
        from experiments.track.merged_run import log_merged  # mlflow: imported only to log

        run_id = log_merged(target, runs, whole, metrics, frame, tags, parent=parent, run_name=run_name)
    if partial is None:  # the whole run's result: a later unsharded run of this config may reuse it
        record_finished(
            whole.get("cache_dir"), whole_hash, whole_suite_hash, target, run_id, code=metrics["code_version"]
        )
    return target


def _free(folder: Path) -> Path:
    """`folder/<k>`, the first k not taken."""
    k = 0
    while (folder / str(k)).exists():
        k += 1
    return folder / str(k)


def _merge_ranking(runs: list[ShardRun], positions: Mapping[str, int], path: Path) -> None:
    found = [r.folder / RANKING_FILE for r in runs if (r.folder / RANKING_FILE).is_file()]
    if not found:
        return
    parts = [_csv_blocks(p) for p in found]
    headers = {h for h, blocks in parts if blocks} or {parts[0][0]}
    if len(headers) > 1:  # the shards' pipelines made other score columns: no one file says them all
        print(
            f"warning: the shards' {RANKING_FILE} have different columns; the merge has none", file=sys.stderr
        )
        return
    path.write_text(
        headers.pop() + _ordered([b for _, blocks in parts for b in blocks], positions),
        encoding="utf-8",
        newline="",
    )


def shards_swept(overrides: list[str]) -> bool:
    return any(o.split("=", 1)[0].lstrip("+~") in (SHARD_KEY, SHARDS_KEY) for o in overrides if "=" in o)


class ShardMergeCallback(SweepEndCallback):
    """A sharded sweep's jobs merged per config when the sweep ends (conf/config.yaml)."""

    def sweep_ended(self, sweep_dir: Path, overrides: list[str]) -> None:
        if not shards_swept(overrides):
            return
        merged = merge_sweep(sweep_dir, read_parent(sweep_dir))
        for folder in merged:
            print(f"merged run in {folder}")
        if not merged:
            print(f"warning: no merged run in {sweep_dir} (see above)", file=sys.stderr)


@console_script
def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(prog="memeval-merge", description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", help="shard run folders, or folders holding them (a sweep's)")
    parser.add_argument("--out", help="the merged run's folder (default: merged/<k> beside the first shard)")
    parser.add_argument(
        "--allow-partial",
        action="store_true",
        help="merge the shards there are; the result says it is partial",
    )
    parser.add_argument("--no-tracking", action="store_true", help="log nothing to MLflow")
    args = parser.parse_args(argv)
    try:
        runs, failures = collect(args.paths)
        done = merged_before(args.paths, runs)
        if done is not None:
            print(f"already merged: {done} holds the whole merge of these shards; nothing written")
            return 0
        target = merge_runs(
            runs, failures, args.out, allow_partial=args.allow_partial, tracking=not args.no_tracking
        )
    except MergeError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"merged run in {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
