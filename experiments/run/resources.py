"""A run's own cost, as metrics.json sections beside `wall_s`: `resource` (peak memory) and `timings`
(wall seconds per phase, from the phase clock of experiments/run/phase_lines.py).

    "resource": {"peak_rss_mb": 812.4}

`peak_rss_mb` is this process's peak resident set since it started (getrusage RUSAGE_SELF ru_maxrss, KiB
on Linux): in a sweep run in one process (memeval's launcher) it is the peak over the jobs so far, not
this job's alone; a joblib or SLURM job is its worker's. Only the process's own: memeval's stages
compute in it (BLAS and torch threads) and spawn no workers. Its children are left out on purpose:
RUSAGE_CHILDREN's figure for a short helper such as `git`, forked from a process of 800 MB, is those 800
MB (Linux counts the pages the fork shared), so it would report the parent again, not a worker's memory.
The figure goes to MLflow as the metric `resource.peak_rss_mb`.
"""

from __future__ import annotations

import resource
import sys
from typing import Any

from experiments.run.phase_lines import PhaseLines

# ru_maxrss is KiB on Linux, bytes on macOS
_RSS_UNIT_MB = 1 / (1024 * 1024) if sys.platform == "darwin" else 1 / 1024


def peak_rss_mb() -> float:
    """This process's peak resident set size so far, in MiB."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * _RSS_UNIT_MB, 1)


def add_run_sections(metrics: dict[str, Any], told: object) -> None:
    """metrics.json's `resource` section, and its `timings` (phase -> wall s) when `told` clocked them."""
    metrics["resource"] = {"peak_rss_mb": peak_rss_mb()}
    if isinstance(told, PhaseLines):
        metrics["timings"] = {name: round(seconds, 3) for name, seconds in told.timings().items()}
