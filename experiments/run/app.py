"""`memeval-run` / `python -m experiments.run`: score one variant on one suite, as a Hydra app.

    python -m experiments.run suite=beam suite.path=../shared/beam/100K variant=hybrid
    python -m experiments.run -m variant=exp05 stage.instruction_boost.weight=0,0.1,0.2

A run: check the config (experiments/configure/check.py) and build the pipeline once (configure/build.py)
-> read its settings once (configure/settings.py: a frozen record the run's other modules take)
-> load the suite (experiments/suites/load.py) -> skip it when a finished run answers it (resume.py)
-> run and evaluate -> write the run folder (outputs.py) -> print (console.py) -> log to MLflow
(experiments/track/).
Returns the objective metric, so Hydra sweepers (Optuna) can optimise it.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import instantiate
from omegaconf import DictConfig

from experiments.configure.build import extra_metrics, prepare_run
from experiments.configure.check import ConfigError
from experiments.configure.compose import answer_help, yaml_text
from experiments.configure.settings import RunSettings, resolved_or_none
from experiments.configure.setup import setup
from experiments.evaluate.cost import TOKENIZER_TAG, apply_budget, default_counter
from experiments.evaluate.metrics.official import check_metrics
from experiments.exit_codes import console_script, one_line_warnings
from experiments.run.answer import answer_run, check_answer, write_answer_files
from experiments.run.console import print_results, print_start
from experiments.run.outputs import (
    OutputError,
    discard_if_unused,
    record_failed_job,
    write_run_folder,
    write_skipped,
    writing,
)
from experiments.run.phase_lines import PhaseLines
from experiments.run.resources import add_run_sections
from experiments.run.resume import Resume, config_hash, run_version
from experiments.run_folder import CASSETTE_TAG, CODE_VERSION_TAG, CONFIG_HASH_TAG
from experiments.shards import SHARD_SECTION, shard_suite
from experiments.suites.load import load_suite
from experiments.suites.suite import Problem, Suite, SuiteError
from experiments.systems.outputs import live_section
from experiments.systems.protocol import LiveSystemError
from experiments.track.mlflow_tracker import (
    MlflowTracker,
    TrackingError,
    ensure_store,
    git_commit,
    package_version,
    resolve_uri,
    service_tags,
    statistics_tags,
)
from experiments.track.run_log import log_run
from experiments.track.run_params import child_run_name, job_values, live_run_name
from experiments.track.sweep_parent import (
    VARYING_KEY,
    JobBadInput,
    JobFailed,
    job_started,
    read_parent,
    tracker_fields,
)
from retrieval.compute import cpu_isa
from retrieval.encoder import ModelNotFoundError
from retrieval.pipeline import Pipeline, PipelineConfigError, RunOutput
from retrieval.progress import PhaseCallback
from retrieval.reuse import CandidateCache, ProcessMemo, process_memo

if TYPE_CHECKING:  # evaluation needs pandas and scipy (~2 s to import): imported when a run evaluates, so
    # `memeval-run --help` and a config error answer at once (tests/project/test_entry_points.py checks)
    from experiments.evaluate.table import Evaluation


def execute(
    settings: RunSettings | DictConfig,
    suite: Suite,
    pipeline: Pipeline,
    *,
    memo: ProcessMemo | None = None,
    told: PhaseCallback | None = None,
) -> tuple[RunOutput, Evaluation]:
    """Run the pipeline over the suite (through the candidate cache and `memo`) and evaluate it; `told`
    hears each phase (experiments/run/phase_lines.py). `settings`: the run's record (a composed config
    is read into one)."""
    from experiments.evaluate.table import evaluate  # pandas and scipy (~2 s): see TYPE_CHECKING above

    if isinstance(settings, DictConfig):
        settings = RunSettings.from_config(settings)
    cache = CandidateCache(Path(settings.cache_dir) / "candidates") if settings.cache_dir else None
    try:
        output = pipeline.run(
            suite.memories,
            suite.queries,
            suite_hash=suite.content_hash,
            cache=cache,
            progress=settings.progress,
            memo=memo,
            knowledge=suite.knowledge,
            on_phase=told,
        )
    finally:  # a live system's close(), once, whether the run ended well or not (a failure: a warning)
        for retriever in pipeline.retrievers:
            if callable(close := getattr(retriever, "close_system", None)):
                close()
    budget, cut = settings.budget_tokens, None
    counter = default_counter(str(settings.cache_dir) if settings.cache_dir else None)  # kept in cache_dir
    if budget is not None:  # `budget.tokens=N` instead of k: each list cut to what fits (evaluate/cost.py)
        output, cut = apply_budget(output, budget, counter)
    if told is not None:
        told("metrics")
    evaluation = evaluate(
        suite, output, list(settings.metrics), seed=settings.seed,
        unit=settings.statistics_unit, empty=settings.empty_queries,
        budget_tokens=budget, budget_cut=cut, counter=counter,
    )  # fmt: skip
    # Extra metrics.json sections, e.g. instruction-tagging coverage and precision (configure/build.py).
    evaluation.metrics.update(extra_metrics(settings.extra_metrics, suite, output.corpus))
    live_section(evaluation.metrics, output.channel_reports, suite.k)
    return output, evaluation


def run_experiment(
    cfg: DictConfig,
    run_dir: Path,
    *,
    multirun: bool = False,
    share_memo: bool = True,
    parent: dict[str, Any] | None = None,
    run_name: str | None = None,
    run_tags: dict[str, str] | None = None,
    varying: tuple[Sequence[str], Sequence[str]] | None = None,
    choice: str | None = None,
) -> dict[str, Any]:
    """Run, evaluate, write, log; `choice`: the Hydra job's choice of variant, its name when the config
    states none (experiments/configure/build.py `finish_variant`).
    In a multirun (`multirun`) the process memo is reused (unless
    `share_memo` is false: a study row whose latency must be measured), finished jobs
    are skipped (see experiments.run.resume), and `parent` (the sweep's MLflow parent) makes it a child run;
    `run_name` names its MLflow run (default `<suite>-<variant>`; with `varying`, this job's overrides and
    the keys its sweep or study varies, the variant and its values of those), `run_tags` are added to its
    MLflow tags.
    With `progress=false` a line says where the run is every few seconds (experiments/run/phase_lines.py).
    """
    with PhaseLines(quiet=cfg.get("progress") is not False) as told:  # quiet: the bars say it
        memo = process_memo() if multirun and share_memo else None
        job = (multirun, memo, parent, run_name, run_tags, varying, choice)
        return _run_experiment(cfg, run_dir, told, *job)


def _run_experiment(
    cfg: DictConfig,
    run_dir: Path,
    told: PhaseCallback,
    multirun: bool,
    memo: ProcessMemo | None,
    parent: dict[str, Any] | None,
    run_name: str | None,
    run_tags: dict[str, str] | None,
    varying: tuple[Sequence[str], Sequence[str]] | None,
    choice: str | None,
) -> dict[str, Any]:
    settings, pipeline, suite, shard = _prepare(cfg, choice, memo, multirun, told)
    if run_name is None and varying is not None:  # a sweep's child: named by its values of what varies
        run_name = child_run_name(settings.variant, job_values(settings.config, *varying))
    answer = check_answer(settings, suite)  # None: no answer stage (experiments/run/answer.py)
    tracker: MlflowTracker | None = (
        instantiate(settings.tracking.tracker, **tracker_fields(parent or {}))
        if settings.tracking.enabled
        else None
    )
    if tracker is not None:
        told("check MLflow store")
        ensure_store(resolve_uri(tracker.uri))  # a half-made store is an error before any work
    resume = Resume.ask(settings, suite.content_hash, pipeline, tracker, multirun, told)
    if resume.finished is not None:
        return write_skipped(run_dir, resume.cfg_hash, resume.finished, tracker)
    print_start(suite, settings.variant, pipeline)
    started, started_ms = time.perf_counter(), int(time.time() * 1000)
    output, evaluation = execute(settings, suite, pipeline, memo=memo, told=told)
    answered = None
    if answer is not None:
        told("answer")
        answered, answer_tags = answer_run(answer, settings, suite, output, evaluation)
    # Taken after the run: a record run's cassette now holds this run's exchanges, and its content digest
    # is part of the run version (SystemRetriever.fingerprint), so a re-run is answered by this run only
    # while the cassette is unchanged.
    told("run version")
    version = run_version(pipeline)
    evaluation.metrics.update(
        wall_s=time.perf_counter() - started,
        suite={**suite.summary(), "content_hash": suite.content_hash, "notes": list(suite.notes)},
        variant=settings.variant,
        config_hash=resume.cfg_hash,
        code_version=version,
    )
    add_run_sections(evaluation.metrics, told)  # resource.peak_rss_mb, timings (experiments/run/resources.py)
    if shard is not None:  # a shard says so: its statistics are over its scopes only
        evaluation.metrics[SHARD_SECTION] = shard
    config_text = yaml_text(settings.config)
    # The same provenance as the MLflow tags, on disk too: reports built from run directories read it.
    tags = {
        **_tags(settings.variant, settings.system, suite, pipeline, evaluation.metrics.get("system")),
        CONFIG_HASH_TAG: resume.cfg_hash,
        CODE_VERSION_TAG: version,
        **_cassette_tags(output),
        **statistics_tags(evaluation.metrics),
        TOKENIZER_TAG: evaluation.metrics["cost"]["tokenizer"],
        **(answer_tags if answered is not None else {}),
    }
    told("write results")
    with writing(run_dir):
        if answered is not None:  # before metrics.json, whose presence marks a finished folder
            write_answer_files(answered, run_dir)
        write_run_folder(
            run_dir, config_text=config_text, tags=tags, suite=suite, output=output, evaluation=evaluation,
            tag=settings.variant, metrics=list(settings.metrics),
        )  # fmt: skip
        _keep_cassettes(output, run_dir)
    print_results(evaluation, output, list(settings.metrics), settings.report_label, run_dir)

    def log() -> str:  # after the run folder's checksums: MLflow uploads them with it
        told("log to MLflow")
        run_id = log_run(
            tracker, settings.config, settings.references, suite, evaluation,
            run_name=run_name or _run_name(settings.variant, settings.system, suite, output), tags=tags,
            run_tags=run_tags or {},
            run_dir=run_dir, config_text=config_text, started_ms=started_ms,
        )  # fmt: skip
        print(f"MLflow run {run_id} in {tracker.experiment}")
        return run_id

    resume.record(run_dir, version, log if tracker is not None else None)
    return evaluation.metrics


def _prepare(
    cfg: DictConfig, choice: str | None, memo: ProcessMemo | None, multirun: bool, told: PhaseCallback
) -> tuple[RunSettings, Pipeline, Suite, dict[str, Any] | None]:
    """Every check before any work, in the order that costs least: the config (all its problems at
    once, and the pipeline built once: experiments/configure/build.py `prepare_run`, which reads the run's
    settings once), the models, then the suite and the metrics it can score. Returns the settings, the
    pipeline, the suite (shard i of n's scopes only, with `shard=i/n`) and the shard's section (None for a
    whole run)."""
    settings, pipeline = prepare_run(cfg, choice=choice, memo=memo)
    pipeline.check_models()  # a missing model is a clear error now, not after retrieval ran
    told("load suite")
    suite = load_suite(settings.suite, memoise=multirun)  # validates: bad input fails here, before work
    suite, shard = shard_suite(suite, settings.sharding)  # shard=i/n: its scopes only (experiments/shards.py)
    try:  # a metric only a benchmark's own scorer computes, on a suite without it: refused before work
        check_metrics(suite.scorer, list(settings.metrics))
    except ValueError as err:
        raise SuiteError([Problem("run config", None, "metrics", str(err))]) from None
    return settings, pipeline, suite, shard


def _tags(
    variant: str,
    system_node: Mapping[str, Any] | None,
    suite: Suite,
    pipeline: Pipeline,
    system: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    revisions = {s.name: s.encoder.fingerprint() for s in pipeline.stages if hasattr(s, "encoder")}
    compute = pipeline.compute()  # each model's device, pinned precision, CPU ISA class or GPU name
    return {
        **suite.tags,  # the loader's provenance: granularity, dataset release and sha256s, errata applied
        "suite": suite.name,
        "suite_hash": suite.content_hash,
        "variant": variant,
        "pipeline": " -> ".join(s.name for s in pipeline.stages),
        "model_revisions": json.dumps(revisions) if revisions else "none",
        "compute": json.dumps(compute) if compute else "none",
        "device": ",".join(sorted({c.split(":")[0] for c in compute.values()})) or "none",
        "cpu_isa": cpu_isa(),
        "git_commit": git_commit(),
        "memeval_version": package_version(),
        **(service_tags(system_node, _choice("system"), (system or {}).get("service")) if system else {}),
    }


# --- The live-system section: what a run with a live channel adds to its folder and tags ---


def _run_name(variant: str, system: Mapping[str, Any] | None, suite: Suite, output: RunOutput) -> str:
    """`<suite>-<variant>`; a live run also names its service and mode (`spark25-system atomicmemory
    replay`): ten runs of different services are not ten `spark25-system`."""
    if not output.channel_reports or system is None:
        return f"{suite.name}-{variant}"
    return live_run_name(suite.name, variant, _choice("system"), system.get("mode"))


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


# A run refused as bad input (exit 2): the config, the suite, the tracking store, a model, a live system (one
# unreachable at start, a replay miss, a malformed answer).
BAD_INPUT = (ConfigError, SuiteError, PipelineConfigError, TrackingError, ModelNotFoundError, LiveSystemError)


def _failure_tags(cfg: DictConfig) -> dict[str, str]:
    """A failed job's variant, and its config hash when the config resolves (else the error says why)."""
    tags = {"variant": str(cfg.variant.get("name", "?"))}
    resolved = resolved_or_none(cfg)
    if resolved is not None:
        tags[CONFIG_HASH_TAG] = config_hash(resolved)
    return tags


def _choice(group: str) -> str | None:
    return HydraConfig.get().runtime.choices.get(group) if HydraConfig.initialized() else None


@hydra.main(version_base="1.3", config_path="pkg://experiments.conf", config_name="config")
def run_app(cfg: DictConfig) -> float | None:
    one_line_warnings()  # in a joblib or SLURM worker too (experiments/exit_codes.py)
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
        task = [str(o) for o in hydra_cfg.overrides.task]
        varying = (task, parent[VARYING_KEY]) if parent.get(VARYING_KEY) else None
        choice = hydra_cfg.runtime.choices.get("variant")  # the variant's name, unless its config states one
        metrics = run_experiment(
            cfg, run_dir, multirun=multirun, parent=parent, varying=varying, choice=choice
        )
    except Exception as err:
        bad_input = isinstance(err, BAD_INPUT)
        if bad_input or isinstance(err, OutputError):  # the run was done, its results could not be kept
            print(f"error: {err if bad_input else err.strerror}", file=sys.stderr)
        if not multirun:
            if bad_input:
                discard_if_unused(run_dir)
                sys.exit(2)
            if isinstance(err, OutputError):  # not bad input (exit 2)
                sys.exit(1)
            raise
        # A multirun goes on with its other jobs (sys.exit would abort them); the sweep exits 2 after them.
        record_failed_job(_failure_tags(cfg), run_dir, parent, err)
        if bad_input:
            raise JobBadInput(str(err)) from None
        if isinstance(err, OutputError):
            raise JobFailed(err.strerror) from None
        raise
    value = metrics["overall"].get(cfg.objective)
    return None if value is None else float(value)


@console_script
def main() -> None:
    """`memeval-run`: the Hydra app, or its help text at once (without Hydra's slow group listing)."""
    if not answer_help("config", sys.argv[1:]):
        setup()
        run_app()


if __name__ == "__main__":
    main()
