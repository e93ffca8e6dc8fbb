"""`memeval-run` / `python -m experiments.run`: score one variant on one suite, as a Hydra app.

    python -m experiments.run suite=beam suite.path=../shared/beam/100K variant=hybrid
    python -m experiments.run -m variant=exp05 stage.instruction_boost.weight=0,0.1,0.2

Writes into the Hydra output directory: metrics.json, per_query.csv, run.trec, qrels.tsv,
config.yaml; prints a results table; logs the same to MLflow (local SQLite by default). Returns the
objective metric, so Hydra sweepers (Optuna) can optimise it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.types import RunMode
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from experiments.evaluate.metrics.official import check_metrics
from experiments.exit_codes import console_script
from experiments.run.build import pipeline_from_config
from experiments.run.compose import answer_help, yaml_text
from experiments.run.config_check import SUITE_REPORT_KEYS, ConfigError, check_config
from experiments.run.phase_lines import PhaseLines, silent
from experiments.run.resume import (
    CASSETTE_TAG,
    CODE_VERSION_TAG,
    CONFIG_HASH_TAG,
    config_hash,
    find_finished,
    process_memo,
    record_finished,
    resume_enabled,
    run_version,
)
from experiments.run.stage_order import pin_stage_order
from experiments.run.trec import write_qrels, write_run
from experiments.shards import SHARD_SECTION, shard_suite
from experiments.suites.suite import Problem, Suite, SuiteError
from experiments.track.mlflow_tracker import (
    MlflowTracker,
    SuiteDataset,
    TrackingError,
    dataset_name,
    ensure_store,
    git_commit,
    latency_for_mlflow,
    mlflow_metric_names,
    mlflow_metrics,
    package_version,
    resolve_uri,
    service_tags,
    statistics_tags,
)
from experiments.track.run_params import child_run_name, job_values, run_params
from experiments.track.sweep_parent import (
    VARYING_KEY,
    JobFailed,
    job_failed,
    job_started,
    read_parent,
    tracker_fields,
)
from retrieval.compute import cpu_isa
from retrieval.encoder import ModelNotFoundError
from retrieval.pipeline import Pipeline, PipelineConfigError, RunOutput
from retrieval.progress import PhaseCallback
from retrieval.reuse import CandidateCache, ProcessMemo
from retrieval.systems.protocol import SystemError_

if TYPE_CHECKING:  # evaluation needs pandas and scipy (~2 s to import): imported when a run evaluates, so
    # `memeval-run --help` and a config error answer at once (tests/test_entry_points.py checks the imports)
    from experiments.evaluate.table import Evaluation


def _files_signature(path: Any) -> tuple:
    """(name, size, mtime) of every file under a suite path, so a memoised suite is never stale. Walked
    with os.scandir, not Path.rglob (each job of a sweep walks it, and rglob makes a Path per entry); like
    rglob, it does not descend into symlinked folders."""
    root = str(path)
    if os.path.isfile(root):
        found = os.stat(root)
        return ((root, found.st_size, found.st_mtime_ns),)
    files: list[tuple[str, int, int]] = []
    folders = [root] if os.path.isdir(root) else []
    while folders:
        with os.scandir(folders.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    folders.append(entry.path)
                elif entry.is_file():
                    found = entry.stat()
                    files.append((entry.path, found.st_size, found.st_mtime_ns))
    return tuple(sorted(files))


def load_suite_from_config(cfg: DictConfig, *, memoise: bool = False) -> Suite:
    """The suite a config names; `memoise` reuses the one this process loaded (same config, same files)."""
    # `report_label` and `primary` are for tables and reports, not the loader.
    if memoise:
        loader = OmegaConf.to_container(cfg.suite, resolve=True)
        key = (
            json.dumps(
                {k: v for k, v in loader.items() if k not in SUITE_REPORT_KEYS}, sort_keys=True, default=repr
            ),
            os.getcwd(),
            _files_signature(cfg.suite.get("path", "")),
        )
        return process_memo().get_or_make("suite", key, lambda: load_suite_from_config(cfg))
    loader_cfg = OmegaConf.masked_copy(cfg.suite, [k for k in cfg.suite if k not in SUITE_REPORT_KEYS])
    try:
        suite = instantiate(loader_cfg, _convert_="all")
    except InstantiationException as err:  # Hydra wraps the loader's own error: surface it
        if isinstance(err.__cause__, SuiteError):
            raise err.__cause__ from None
        raise
    if not isinstance(suite, Suite):
        raise TypeError(f"suite config must build a Suite, got {type(suite).__name__}")
    return suite


def build_pipeline(cfg: DictConfig) -> Pipeline:
    return pipeline_from_config(list(cfg.variant.stages), cfg.stage, depth=cfg.depth)


# The console table's count column, e.g. 24/25: the means are over the answerable queries (docs/metrics.md);
# with `empty_queries=zero` over every judged query, and the column says so.
ANSWERABLE_COLUMN = "answerable/all"
SCORED_COLUMN = "scored/all"


def results_table(evaluation: Evaluation, metrics: list[str], label: str | None) -> str:
    """Overall and per-label means, one row each, as console text: labels left, answerable/all query
    counts, numbers right-aligned with 3 decimals, NaN for a mean with no query to average. pandas printed
    the same text (tests/test_results_table.py) at a real share of a sweep job's cost (each prints one);
    where it would have dropped a column's common trailing zeros or switched to exponents for values
    under 0.001, this keeps 3 decimals."""
    summary = evaluation.metrics
    rows = {"overall": summary["overall"]}
    if label and label in summary["by_label"]:
        rows.update(summary["by_label"][label])
    present = {key for row in rows.values() for key in row}
    count = SCORED_COLUMN if summary.get("empty_queries") == "zero" else ANSWERABLE_COLUMN
    columns = [count, *[m for m in metrics if m in present]]

    def cell(row: dict[str, Any], column: str) -> str:
        if column == ANSWERABLE_COLUMN:  # the means are over the answerable queries: say how many of all
            return f"{row.get('n_answerable', row.get('n_queries'))}/{row.get('n_queries')}"
        if column == SCORED_COLUMN:  # empty queries scored 0: the means are over every query
            return f"{row.get('n_queries')}/{row.get('n_queries')}"
        value = row.get(column)
        if value is None or (isinstance(value, float) and value != value):
            return "NaN"
        return f"{value:.3f}" if isinstance(value, float) else str(value)

    body = [[str(name), *(cell(row, c) for c in columns)] for name, row in rows.items()]
    widths = [max(len(text) for text in column) for column in zip(["", *columns], *body, strict=True)]
    lines = [[""] + columns, *body]
    table = "\n".join(
        "  ".join(
            [line[0].ljust(widths[0]), *(t.rjust(w) for t, w in zip(line[1:], widths[1:], strict=True))]
        )
        for line in lines
    )
    # harm@k is over its own queries (those with must-not judgements): say how many, overall.
    own = summary["overall"].get("denominators", {})
    notes = [f"{m} over {n} queries (those with must-not judgements)" for m, n in own.items() if m in columns]
    return "\n".join([table, *notes])


def write_outputs(
    run_dir: Path, suite: Suite, output: RunOutput, evaluation: Evaluation, tag: str, metrics: list[str]
) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    from experiments.csv_cells import safe_frame  # pandas: imported when there is a run to write

    safe_frame(evaluation.per_query).to_csv(run_dir / "per_query.csv")  # no cell a spreadsheet runs
    write_run(output.ranked, run_dir / "run.trec", tag=tag)
    # The top of each ranking with its score columns: what a report's per-query drill-down explains.
    from experiments.run import ranking  # pandas: imported when there is a run to write

    ranking.write_ranking(
        output.ranked, suite.qrels, run_dir / ranking.FILENAME, ranking.saved_depth(metrics, suite.k)
    )
    write_qrels(suite.qrels, run_dir)  # must-not judgements apart: trec_eval crashes on negative grades
    # metrics.json last: its presence marks a finished run directory.
    tmp = run_dir / ".metrics.json.tmp"
    tmp.write_text(json.dumps(evaluation.metrics, indent=2, sort_keys=False, default=str))
    tmp.replace(run_dir / "metrics.json")


def execute(
    cfg: DictConfig,
    suite: Suite,
    pipeline: Pipeline,
    *,
    memo: ProcessMemo | None = None,
    told: PhaseCallback | None = None,
) -> tuple[RunOutput, Evaluation]:
    """Run the pipeline over the suite (through the candidate cache and `memo`) and evaluate it; `told`
    hears each phase (experiments/run/phase_lines.py)."""
    from experiments.evaluate.table import evaluate

    cache = CandidateCache(Path(cfg.cache_dir) / "candidates") if cfg.cache_dir else None
    output = pipeline.run(
        suite.memories,
        suite.queries,
        suite_hash=suite.content_hash,
        cache=cache,
        progress=cfg.progress,
        memo=memo,
        knowledge=suite.knowledge,
        on_phase=told,
    )
    if told is not None:
        told("metrics")
    evaluation = evaluate(
        suite, output, list(cfg.metrics), seed=cfg.seed,
        unit=cfg.get("statistics", {}).get("unit", "auto"), empty=cfg.get("empty_queries", "apart"),
    )  # fmt: skip
    # Extra metrics.json sections (`run_reports` in the config: name -> function(suite, corpus) -> dict),
    # e.g. instruction-tagging coverage and precision: plug-ins, so the runner knows none of them.
    for name, node in (cfg.get("run_reports") or {}).items():
        evaluation.metrics[str(name)] = instantiate(node)(suite, output.corpus)
    _system_section(evaluation.metrics, output, suite.k)
    return output, evaluation


# The live-system figures that also go to MLflow (as `system.<name>` beside the overall metrics).
_SYSTEM_METRICS = (
    "latency_ms_p50",
    "latency_ms_p95",
    "ingest_per_s",
    "until_searchable_s",
    "errors",
    "timeouts",
    "retries",
    "rate_limited",
    "unknown_ids",
    "scope_leaks",
    "returned_words_at_k_mean",
)


def _system_section(metrics: dict[str, Any], output: RunOutput, k: int) -> None:
    """A live system's cost (retrieval/retrievers/system.py) as metrics.json's `system` section, its
    numbers also in `overall` as `system.<name>` (so MLflow and reports have them), its notes printed."""
    from retrieval.retrievers.system import cost_section

    sections = {ch: cost_section(r, k) for ch, r in output.channel_reports.items() if r.get("mode")}
    if not sections:
        return
    metrics["system"] = next(iter(sections.values())) if len(sections) == 1 else sections
    for channel, section in sections.items():
        prefix = "system." if len(sections) == 1 else f"system.{channel}."
        for name in _SYSTEM_METRICS:
            if isinstance(section.get(name), (int, float)):
                metrics["overall"][prefix + name] = float(section[name])
        for note in section["notes"]:
            print(f"  {channel}: {note}")


def run_experiment(
    cfg: DictConfig,
    run_dir: Path,
    *,
    multirun: bool = False,
    parent: dict[str, Any] | None = None,
    run_name: str | None = None,
    run_tags: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run, evaluate, write, log. In a multirun (`multirun`) the process memo is reused, finished jobs
    are skipped (see experiments.run.resume), and `parent` (the sweep's MLflow parent) makes it a child run;
    `run_name` names its MLflow run (default `<suite>-<variant>`), `run_tags` are added to its MLflow tags.
    With `progress=false` a line says where the run is every few seconds (experiments/run/phase_lines.py).
    """
    if cfg.get("progress") is not False:  # the bars say it
        return _run_experiment(cfg, run_dir, silent, multirun, parent, run_name, run_tags)
    with PhaseLines() as told:
        return _run_experiment(cfg, run_dir, told, multirun, parent, run_name, run_tags)


def _run_experiment(
    cfg: DictConfig,
    run_dir: Path,
    told: PhaseCallback,
    multirun: bool,
    parent: dict[str, Any] | None,
    run_name: str | None,
    run_tags: dict[str, str] | None,
) -> dict[str, Any]:
    # One resolution (hash, config.yaml, params, the sweep memo's stage keys); a config that does not
    # resolve gets check_config's list of every problem first.
    pin_stage_order(cfg)
    resolved = _resolved(cfg)
    # every config problem at once (ConfigError), before any data is read
    pipeline = check_config(cfg, memo=process_memo() if multirun else None, resolved=resolved)
    pipeline.check_models()  # a missing model is a clear error now, not after retrieval ran
    told("load suite")
    suite = load_suite_from_config(cfg, memoise=multirun)  # validates: bad input fails here, before work
    suite, shard = shard_suite(suite, cfg)  # shard=i/n: that shard's scopes only (experiments/shards.py)
    try:  # a metric only a benchmark's own scorer computes, on a suite without it: refused before work
        check_metrics(suite.scorer, list(cfg.metrics))
    except ValueError as err:
        raise SuiteError([Problem("run config", None, "metrics", str(err))]) from None
    if resolved is None:
        resolved = OmegaConf.to_container(cfg, resolve=True)
    cfg_hash = config_hash(resolved)
    version = run_version(pipeline)  # code, libraries and model files: a change to any re-runs the job
    tracker: MlflowTracker | None = (
        instantiate(cfg.tracking.tracker, **tracker_fields(parent or {})) if cfg.tracking.enabled else None
    )
    if tracker is not None:
        ensure_store(resolve_uri(tracker.uri))  # a half-made store is an error before any work
    if resume_enabled(cfg.get("resume", "auto"), multirun):
        names = list(dict.fromkeys([*cfg.metrics, cfg.objective]))
        finished = find_finished(
            cache_dir=cfg.cache_dir,
            cfg_hash=cfg_hash,
            suite_hash=suite.content_hash,
            tracker=tracker,
            names=names,
            code=version,
        )
        if finished is not None:
            return _skip(run_dir, cfg_hash, finished, tracker)
    print(
        f"suite {suite.name}: {len(suite.memories):,} memories, {len(suite.queries):,} queries "
        f"({suite.content_hash[:12]}); variant {cfg.variant.name}: "
        + " -> ".join(s.name for s in pipeline.stages)
    )
    for note in suite.notes:
        print(f"  note: {note}")
    started = time.perf_counter()
    started_ms = int(time.time() * 1000)
    output, evaluation = execute(cfg, suite, pipeline, memo=process_memo() if multirun else None, told=told)
    # Taken again: a record run's cassette now holds this run's exchanges, and its content digest is part of
    # the run version (SystemRetriever.fingerprint), so a re-run is answered by this run only while the
    # cassette is unchanged.
    version = run_version(pipeline)
    evaluation.metrics["wall_s"] = time.perf_counter() - started
    evaluation.metrics["suite"] = {
        **suite.summary(),
        "content_hash": suite.content_hash,
        "notes": list(suite.notes),
    }
    evaluation.metrics["variant"] = cfg.variant.name
    evaluation.metrics["config_hash"] = cfg_hash
    evaluation.metrics["code_version"] = version
    if shard is not None:  # a shard says so: its statistics are over its scopes only
        evaluation.metrics[SHARD_SECTION] = shard
    config_text = yaml_text(resolved)
    # The same provenance as the MLflow tags, on disk too: reports built from run directories read it.
    tags = {
        **_tags(cfg, suite, pipeline, evaluation.metrics.get("system")),
        CONFIG_HASH_TAG: cfg_hash,
        CODE_VERSION_TAG: version,
    }
    tags.update(_cassette_tags(output))
    tags.update(statistics_tags(evaluation.metrics))
    told("write results")
    with _writing(run_dir):
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(config_text)
        (run_dir / "tags.json").write_text(json.dumps(tags, indent=2))
        write_outputs(
            run_dir, suite, output, evaluation, tag=str(cfg.variant.name), metrics=list(cfg.metrics)
        )
        _keep_cassettes(output, run_dir)
    record_finished(cfg.cache_dir, cfg_hash, suite.content_hash, run_dir, None, code=version)

    print(results_table(evaluation, list(cfg.metrics), cfg.report_label))
    overall = evaluation.metrics["overall"]
    latency = (  # never a figure replayed from a cache: absent when cached work was not timed here
        f"latency ms p50 {overall['latency_ms_p50']:.1f} p95 {overall['latency_ms_p95']:.1f}"
        if overall.get("latency_ms_p50") is not None
        else "latency not measured (reused from cache)"
    )
    print(
        f"{latency}; scope leaks {evaluation.metrics['scope_leaks']}; "
        f"prefix cache {'hit' if output.prefix_cache_hit else 'miss'}"
    )
    print(f"results in {run_dir}")

    if tracker is not None:
        told("log to MLflow")
        latency, latency_note = latency_for_mlflow(evaluation.metrics, evaluation.per_query)
        suite_path = cfg.suite.get("path")
        run_id = tracker.log(
            run_name=run_name or f"{suite.name}-{cfg.variant.name}",
            params=run_params(cfg, resolved),
            metrics={**mlflow_metrics(evaluation.metrics), **latency},
            metric_names=mlflow_metric_names(evaluation.metrics),
            tags={**tags, **latency_note, **(run_tags or {})},
            run_dir=run_dir,
            config_text=config_text,
            started_ms=started_ms,
            dataset=SuiteDataset(
                name=dataset_name(suite.name, suite_path),
                digest=suite.content_hash,
                source=str(Path(suite_path).resolve()) if suite_path else suite.name,
                profile={k: v for k, v in suite.summary().items() if k != "labels"},
            ),
        )
        print(f"MLflow run {run_id} in {tracker.experiment}")
        record_finished(cfg.cache_dir, cfg_hash, suite.content_hash, run_dir, run_id, code=version)
    return evaluation.metrics


class OutputError(OSError):
    """The run's results could not be written (a full disk, a file-size or disk quota limit)."""


# errno values that mean "no room": the disk, a quota, or a per-file size limit (ulimit -f).
_NO_ROOM = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT})


@contextlib.contextmanager
def _writing(run_dir: Path) -> Iterator[None]:
    """Writes into the run folder; no room left is an OutputError naming the folder, not a traceback."""
    try:
        yield
    except OSError as err:
        if err.errno not in _NO_ROOM:
            raise
        raise OutputError(
            err.errno,
            f"cannot write the results to {run_dir}: {err.strerror} ({err.filename or 'a file there'}); "
            "free space or raise the limit and run again (metrics.json is written last, so the folder "
            "is not taken for a finished run)",
        ) from None


def _keep_cassettes(output: RunOutput, run_dir: Path) -> None:
    """A recorded or replayed live channel's cassette, copied into the run folder (so MLflow logs it too)."""
    for channel, report in output.channel_reports.items():
        cassette = (report.get("cassette") or {}).get("path")
        if cassette and Path(cassette).is_file() and Path(cassette).resolve().parent != run_dir.resolve():
            name = "cassette.jsonl" if len(output.channel_reports) == 1 else f"cassette.{channel}.jsonl"
            shutil.copyfile(cassette, run_dir / name)


def _cassette_tags(output: RunOutput) -> dict[str, str]:
    """The content digest of each recorded or replayed live channel's cassette (what its answers came
    from): `memeval.cassette_sha256`, or `memeval.cassette_sha256.<channel>` beside other such channels."""
    digests = {
        channel: report["cassette"]["sha256"]
        for channel, report in output.channel_reports.items()
        if (report.get("cassette") or {}).get("sha256")
    }
    if len(digests) == 1:
        return {CASSETTE_TAG: next(iter(digests.values()))}
    return {f"{CASSETTE_TAG}.{channel}": digest for channel, digest in digests.items()}


def _resolved(cfg: DictConfig) -> dict[str, Any] | None:
    try:
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except Exception:  # an interpolation that fails: check_config names it
        return None


def _discard_if_unused(run_dir: Path) -> None:
    """Remove a run directory that holds only what Hydra wrote before the run refused to start, so a
    refused run leaves no empty result folder behind (results, if any, are never touched)."""
    if run_dir.is_dir() and all(p.name == ".hydra" or p.suffix == ".log" for p in run_dir.iterdir()):
        shutil.rmtree(run_dir, ignore_errors=True)
        here = Path.cwd().resolve()
        for parent in run_dir.resolve().parents:  # and the folders made only for it (outputs/<suite>/...)
            if parent == here or here not in parent.parents or any(parent.iterdir()):
                break
            parent.rmdir()


def _skip(run_dir: Path, cfg_hash: str, finished: Any, tracker: MlflowTracker | None) -> dict[str, Any]:
    """A finished run answers this job: log nothing new, point to it, return its metrics.

    skipped.json names the run directory when it is still whole, and the MLflow run (id and store):
    reports and the gate follow either (experiments.track.finished_runs)."""
    where = finished.run_dir or f"MLflow run {finished.mlflow_run_id}"
    print(f"skipped: config {cfg_hash} already has a finished run ({finished.source}: {where})")
    run_dir.mkdir(parents=True, exist_ok=True)
    note = {
        "config_hash": cfg_hash,
        "source": finished.source,
        "run_dir": finished.run_dir,
        "mlflow_run_id": finished.mlflow_run_id,
        "mlflow_uri": resolve_uri(tracker.uri) if tracker is not None and finished.mlflow_run_id else None,
    }
    (run_dir / "skipped.json").write_text(json.dumps(note, indent=2))
    if tracker is not None and tracker.parent_run_id and finished.mlflow_run_id:
        import mlflow

        from experiments.run.resume import REUSED_TAG_PREFIX

        client = mlflow.MlflowClient(tracking_uri=resolve_uri(tracker.uri))
        client.set_tag(tracker.parent_run_id, f"{REUSED_TAG_PREFIX}{cfg_hash}", finished.mlflow_run_id)
    return {"overall": dict(finished.overall), "skipped": note}


def _tags(
    cfg: DictConfig, suite: Suite, pipeline: Pipeline, system: Mapping[str, Any] | None = None
) -> dict[str, str]:
    revisions = {s.name: s.encoder.fingerprint() for s in pipeline.stages if hasattr(s, "encoder")}
    compute = pipeline.compute()  # each model's device, pinned precision, CPU ISA class or GPU name
    return {
        **suite.tags,  # the loader's provenance: granularity, dataset release and sha256s, errata applied
        "suite": suite.name,
        "suite_hash": suite.content_hash,
        "variant": str(cfg.variant.name),
        "pipeline": " -> ".join(s.name for s in pipeline.stages),
        "model_revisions": json.dumps(revisions) if revisions else "none",
        "compute": json.dumps(compute) if compute else "none",
        "device": ",".join(sorted({c.split(":")[0] for c in compute.values()})) or "none",
        "cpu_isa": cpu_isa(),
        "git_commit": git_commit(),
        "memeval_version": package_version(),
        **(
            service_tags(_live_system(cfg), _choice("system"), (system or {}).get("service"))
            if system
            else {}
        ),
    }


def _live_system(cfg: DictConfig) -> dict[str, Any] | None:
    """The run's `system` config (a live service), resolved, when one of its stages is a live channel."""
    try:
        return OmegaConf.to_container(cfg.system, resolve=True)  # type: ignore[return-value]
    except Exception:  # a system config that does not resolve has failed config_check already
        return None


def _choice(group: str) -> str | None:
    return HydraConfig.get().runtime.choices.get(group) if HydraConfig.initialized() else None


def _job_failed(cfg: DictConfig, run_dir: Path, parent: dict[str, str], err: BaseException) -> None:
    """A failed multirun job: failed.json, and a FAILED child run (and parent) when the sweep is tracked."""
    try:
        tags = {"variant": str(cfg.variant.get("name", "?"))}
        try:
            tags[CONFIG_HASH_TAG] = config_hash(cfg)
        except Exception:  # a config that does not even resolve: the error says why
            pass
        run_name = f"{HydraConfig.get().runtime.choices.get('suite', 'suite')}-{tags['variant']}"
        job_failed(run_dir, parent, err, run_name=run_name, tags=tags)
    except Exception as record_err:  # never hide the job's own error behind this one
        print(f"warning: could not record the failed job in {run_dir}: {record_err}", file=sys.stderr)


@hydra.main(version_base="1.3", config_path="pkg://experiments.conf", config_name="config")
def run_app(cfg: DictConfig) -> float | None:
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    parent = read_parent(hydra_cfg.sweep.dir) if multirun and cfg.tracking.enabled else {}
    if multirun:
        job_started(run_dir)
    try:
        if multirun and cfg.tracking.enabled and not parent:
            raise TrackingError(
                f"this sweep has no MLflow parent run ({hydra_cfg.sweep.dir}/mlflow_parent.json is missing: "
                "its start failed or its callback is not configured); the job refuses to log without one"
            )
        name = None
        if parent.get(VARYING_KEY):  # a sweep's child: named by its values of what the sweep varies
            task = [str(o) for o in hydra_cfg.overrides.task]
            name = child_run_name(str(cfg.variant.name), job_values(cfg, task, parent[VARYING_KEY]))
        metrics = run_experiment(cfg, run_dir, multirun=multirun, parent=parent, run_name=name)
    except (
        ConfigError,
        SuiteError,
        PipelineConfigError,
        TrackingError,
        ModelNotFoundError,
        SystemError_,  # a live system unreachable at start, a replay miss, a malformed answer
    ) as err:
        print(f"error: {err}", file=sys.stderr)
        if not multirun:
            _discard_if_unused(run_dir)
            sys.exit(2)
        # A multirun goes on with its other jobs (sys.exit would abort them); the sweep exits non-zero.
        _job_failed(cfg, run_dir, parent, err)
        raise JobFailed(str(err)) from None
    except OutputError as err:  # the run was done, its results could not be kept: not bad input (exit 2)
        print(f"error: {err.strerror}", file=sys.stderr)
        if not multirun:
            sys.exit(1)
        _job_failed(cfg, run_dir, parent, err)
        raise JobFailed(err.strerror) from None
    except Exception as err:
        if multirun:
            _job_failed(cfg, run_dir, parent, err)
        raise
    value = metrics["overall"].get(cfg.objective)
    return None if value is None else float(value)


@console_script
def main() -> None:
    """`memeval-run`: the Hydra app, or its help text at once (without Hydra's slow group listing)."""
    if not answer_help("config", sys.argv[1:]):
        run_app()


if __name__ == "__main__":
    main()
