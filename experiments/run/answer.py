"""The answer stage inside `memeval-run` (experiments/run/app.py): checked before any work, run after the
retrieval run is evaluated, its results added to the run's per_query.csv, metrics.json, tags and folder.

A run whose config has no `answer` node (the default: `answer: null` in conf/config.yaml) never reaches
this module: it writes exactly what it wrote before the answer stage existed.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from experiments.answer.client import AnswerError
from experiments.answer.settings import AnswerSettings, read_settings
from experiments.answer.stage import (
    AnswerOutcome,
    benchmark_of,
    build_judges,
    gold_problem,
    run_answer_stage,
    write_answers,
)
from experiments.suites.suite import Problem, Suite, SuiteError
from retrieval.pipeline import RunOutput

if TYPE_CHECKING:
    from experiments.configure.settings import RunSettings
    from experiments.evaluate.table import Evaluation

ANSWER_CASSETTE_TAG = "memeval.answer_cassette_sha256"
CASSETTE_FILE = "answer_cassette.jsonl"


def check_answer(run: RunSettings, suite: Suite) -> AnswerSettings | None:
    """The run's answer settings (None: no answer stage), or a ConfigError / SuiteError naming every
    problem, before any retrieval or call."""
    from experiments.configure.check import ConfigError

    if run.answer is None:
        return None
    protocol = run.suite.get("protocol")
    settings, problems = read_settings(dict(run.answer), suite_k=suite.k, suite_protocol=protocol)
    if problems:
        raise ConfigError(problems)
    try:  # a judge's own options (a prompt set it needs, one it does not know) are refused before any call
        build_judges(settings)
    except ValueError as err:
        raise ConfigError([str(err)]) from None
    problem = gold_problem(suite)
    if problem is not None:
        raise SuiteError([Problem("run config", None, "answer", problem.removeprefix("answer: "))])
    return settings


def settings_view(settings: AnswerSettings) -> dict[str, Any]:
    """What metrics.json states of the settings (never a URL's secret, never a key: only its variable)."""
    return {
        "source": settings.source, "model": settings.model, "k": settings.k,
        "protocol": settings.protocol, "sampling": settings.sampling, "concurrency": settings.concurrency,
        "window_tokens": settings.window_tokens, "chars_per_token": settings.chars_per_token,
        "judges": [s.name for s in settings.judges], "sample": settings.sample,
    }  # fmt: skip


def answer_run(
    settings: AnswerSettings, run: RunSettings, suite: Suite, output: RunOutput, evaluation: Evaluation
) -> tuple[AnswerOutcome, dict[str, str]]:
    """Answer and judge, then add the results to `evaluation` (per_query columns, the `answer` block,
    `answer_acc_<judge>` in overall with its interval); returns the outcome and the tags to add."""
    from experiments.answer.labels import LabelsError, read_labels
    from experiments.answer.summary import answer_block, mlflow_numbers, per_query_columns

    benchmark = benchmark_of(run.suite.get("_target_"))
    raw = None
    if benchmark == "locomo" and settings.protocol == "official" and run.suite.get("path"):
        from experiments.suites.locomo import raw_texts  # upstream's prompt reads the raw turns

        raw = raw_texts(str(run.suite["path"]))
    outcome = run_answer_stage(settings, suite, output, benchmark=benchmark, raw=raw)
    frame = evaluation.per_query
    for name, values in per_query_columns(outcome, list(frame.index)).items():
        frame[name] = values
    labels = None
    if settings.labels:
        primary = next(iter(outcome.judged.values()))
        answers = {j.query.id: j.record["answer"] for j in primary}
        try:
            labels = {qid: entry.label for qid, entry in read_labels(settings.labels, answers).items()}
        except LabelsError as err:
            raise AnswerError(str(err)) from None
    block = answer_block(
        outcome, benchmark=benchmark, settings_view=settings_view(settings), seed=int(run.seed),
        labels=labels,
    )  # fmt: skip
    if settings.protocol == "official":
        block["lafs_lme_v2"] = official_frontier(outcome, frame)
    evaluation.metrics["answer"] = block
    # How the calls were answered: apart from the block, which a record run and its replay write alike.
    evaluation.metrics["answer_calls"] = {"mode": settings.mode, **outcome.counts}
    values, cis = mlflow_numbers(block)
    evaluation.metrics["overall"].update(values)
    evaluation.metrics.setdefault("overall_ci95", {}).update(cis)
    tags = {ANSWER_CASSETTE_TAG: outcome.cassette_digest} if outcome.cassette_digest else {}
    return outcome, tags


def official_frontier(outcome: AnswerOutcome, frame: Any) -> dict[str, Any]:
    """Under `official`: each judge's answer accuracy as a LongMemEval-V2 operating point against the run's
    mean retrieval latency in seconds, scored as upstream's compute_lafs.py scores it
    (frontier.lme_v2_summary); a run whose latency was not measured (stages answered from a cache) has no
    point, and says so."""
    from experiments.evaluate.frontier import lme_v2_summary

    latency = frame["latency_ms"].to_numpy(dtype=float) / 1000.0 if "latency_ms" in frame else None
    if latency is None or np.isnan(latency).all() or (latency[~np.isnan(latency)] <= 0).all():
        return {"not_measured": "no query's retrieval latency was measured: no LongMemEval-V2 point"}
    clusters = frame["cluster"].to_numpy(dtype=object)
    by_judge: dict[str, Any] = {}
    for key, columns in outcome.judge_columns.items():
        correct = frame[columns[0]].to_numpy(dtype=float)
        if not np.isnan(correct).all():
            by_judge[key] = lme_v2_summary(key, correct, np.where(latency > 0, latency, np.nan), clusters)
    return {"reference": "LongMemEval-V2 leaderboard/compute_lafs.py", "by_judge": by_judge}


def write_answer_files(outcome: AnswerOutcome, run_dir: Path) -> None:
    """answers.jsonl (and answers.<context>.jsonl), and the cassette copied in (MLflow logs the folder)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    write_answers(outcome, run_dir)
    path = outcome.cassette_path
    if path and Path(path).is_file() and Path(path).resolve() != (run_dir / CASSETTE_FILE).resolve():
        shutil.copyfile(path, run_dir / CASSETTE_FILE)
