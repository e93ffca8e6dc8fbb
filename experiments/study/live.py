"""Re-running a study row's pipeline in-process, for report sections that measure what a run file cannot
hold: latency timed live (no candidate cache, a warm-up pass first), CPU time, the machine's load, and the
ranked lists' own score columns (which gate fell back, which tier answered).

Sits after a study's rows ran: the rows' metrics come from their finished runs; a section calls
`rerun(study, row)` only for what it measures. The machine is shared, so every timed pass records
`time.process_time` and `resource.getrusage` CPU beside wall time, and `os.getloadavg()` at its start.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from experiments.configure.build import settings_pipeline
from experiments.configure.settings import RunSettings
from experiments.suites.load import load_suite
from experiments.suites.suite import Suite
from retrieval.pipeline import RunOutput


@dataclass(frozen=True)
class TimedPass:
    """One pass of a pipeline over every query of a suite."""

    output: RunOutput
    latency_ms: np.ndarray  # per query: the sum of its stage timings (what metrics.json's latency is)
    wall_s: float  # the whole pass
    cpu_s: float  # this process's CPU time in the pass (user + system, all threads)
    load_avg: tuple[float, float, float]  # 1, 5, 15-minute load average at the start

    def summary(self) -> dict[str, float]:
        return {
            "p50_ms": float(np.percentile(self.latency_ms, 50)),
            "p95_ms": float(np.percentile(self.latency_ms, 95)),
            "wall_s": self.wall_s,
            "cpu_s": self.cpu_s,
            "cpu_ms_per_query": 1000 * self.cpu_s / max(1, len(self.latency_ms)),
            "load_1m": self.load_avg[0],
        }


def row_settings(study: Any, row_name: str, extra: Sequence[str] = ()) -> RunSettings:
    """The run settings of a study row (its name in the plan), plus `extra` overrides, tracking off: read
    from the study's own row config (experiments/study/experiment.py `StudyResult.row_settings`), so this
    module, below the study runner, imports none of it."""
    return study.row_settings(row_name, extra)


def live_scorers(settings: RunSettings) -> list[str]:
    """Overrides that switch off every model-score cache (a cross-encoder scores live, as in production)."""
    stages = settings.config["stage"]
    return [
        f"stage.{s}.scorer.cache_dir=null" for s in settings.stage_order if "scorer" in (stages.get(s) or {})
    ]


def timed_pass(settings: RunSettings, suite: Suite) -> TimedPass:
    """One pass of the settings' pipeline (built afresh) over the suite: no candidate cache, so every
    stage is timed."""
    pipeline = settings_pipeline(settings)
    load = os.getloadavg()
    before = resource.getrusage(resource.RUSAGE_SELF)
    wall = time.perf_counter()
    output = pipeline.run(suite.memories, suite.queries, progress=False)
    wall_s = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    latency = np.array([r.latency_ms for r in output.ranked], dtype=float)
    return TimedPass(output, latency, wall_s, cpu_s, load)


def rerun(
    study: Any, row_name: str, extra: Sequence[str] = (), *, warm: bool = True
) -> tuple[Suite, TimedPass]:
    """A row's pipeline run again: a warm-up pass (model loading, embedding reads), then a timed live pass
    with model-score caches off. Scores are the same either way; only the timing differs."""
    settings = row_settings(study, row_name, extra)
    suite = load_suite(settings.suite)
    if warm:
        timed_pass(settings, suite)
    live = live_scorers(settings)
    return suite, timed_pass(row_settings(study, row_name, [*extra, *live]) if live else settings, suite)


def query_encoding_ms(settings: RunSettings, texts: Sequence[str], threads: int | None = None) -> np.ndarray:
    """Time to embed each query text with the configured bi-encoder, uncached (what a live system pays);
    `threads`: torch threads while timing (1 is steadier on a shared machine)."""
    import torch
    from hydra.utils import instantiate

    from retrieval.encoder import load_sentence_transformer

    encoder = instantiate(settings.config["encoder"], _convert_="all")
    model = load_sentence_transformer(encoder.path, encoder.device)
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        model.encode(list(texts[:2]), show_progress_bar=False)  # warm-up
        out = []
        for text in texts:
            started = time.perf_counter()
            model.encode([text], normalize_embeddings=True, show_progress_bar=False)
            out.append((time.perf_counter() - started) * 1000)
    finally:
        torch.set_num_threads(before)
    return np.array(out)


def interleaved_passes(
    configs: Mapping[str, RunSettings], suite: Suite, repeats: int
) -> dict[str, list[TimedPass]]:
    """`repeats` timed passes of each row's settings, interleaved so a burst of others' load hits every
    pipeline alike; a warm-up pass of each first (model loading, embedding reads)."""
    for cfg in configs.values():
        timed_pass(cfg, suite)
    passes: dict[str, list[TimedPass]] = {name: [] for name in configs}
    for _ in range(repeats):
        for name, cfg in configs.items():
            passes[name].append(timed_pass(cfg, suite))
    return passes


def latency_summary(runs: Sequence[TimedPass]) -> dict[str, float]:
    """Per-query latency over repeats: per query the fastest repeat is its intrinsic cost (others' load
    only ever adds time), summarised as mean/p50/p95; the median repeat's mean; CPU ms a query; load."""
    times = np.array([p.latency_ms for p in runs])
    fastest, median = times.min(axis=0), np.median(times, axis=0)
    cpu = np.array([p.cpu_s for p in runs]) * 1000 / times.shape[1]
    return {
        "mean_ms": float(fastest.mean()),
        "p50_ms": float(np.percentile(fastest, 50)),
        "p95_ms": float(np.percentile(fastest, 95)),
        "median_repeat_mean_ms": float(median.mean()),
        "cpu_ms_per_query": float(np.median(cpu)),
        "load_1m": float(np.median([p.load_avg[0] for p in runs])),
    }


def latency_table(summaries: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, str]]:
    """The report's latency columns, one row per pipeline (its `latency_summary`, formatted)."""
    return {
        name: {
            "mean ms (fastest repeat)": f"{t['mean_ms']:.3f}",
            "p50 ms": f"{t['p50_ms']:.3f}",
            "p95 ms": f"{t['p95_ms']:.3f}",
            "mean ms (median repeat)": f"{t['median_repeat_mean_ms']:.3f}",
            "CPU ms / query (median repeat)": f"{t['cpu_ms_per_query']:.3f}",
            "load avg 1 min": f"{t['load_1m']:.1f}",
        }
        for name, t in summaries.items()
    }
