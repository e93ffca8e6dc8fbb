"""A run's own cost, as metrics.json sections beside `wall_s`: `resource` (peak memory) and `timings`
(wall seconds per phase, from the phase clock of experiments/run/phase_lines.py).

    "resource": {"peak_rss_mb": 812.4, "children_peak_rss_mb": 0.0}

`peak_rss_mb` is this process's peak resident set (getrusage RUSAGE_SELF ru_maxrss) since it started: in
a sweep run in one process (the basic launcher) it is the peak over the jobs so far, not this job's
alone. `children_peak_rss_mb` is the largest peak of a child process it waited for (RUSAGE_CHILDREN: the
biggest one child, not a sum), 0 when it spawned none; memeval's stages compute in-process (BLAS and
torch threads), so the first is the run's figure. Both go to MLflow as metrics (`resource.peak_rss_mb`).
"""

from __future__ import annotations

import resource
import sys
from typing import Any

from experiments.run.phase_lines import PhaseLines

# ru_maxrss is KiB on Linux, bytes on macOS
_RSS_UNIT_MB = 1 / (1024 * 1024) if sys.platform == "darwin" else 1 / 1024


def peak_rss_mb() -> dict[str, float]:
    """{"peak_rss_mb": this process's peak RSS, "children_peak_rss_mb": the largest waited-for child's}."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {
        "peak_rss_mb": round(own * _RSS_UNIT_MB, 1),
        "children_peak_rss_mb": round(children * _RSS_UNIT_MB, 1),
    }


def add_run_sections(metrics: dict[str, Any], told: object) -> None:
    """metrics.json's `resource` section, and its `timings` (phase -> wall s) when `told` clocked them."""
    metrics["resource"] = peak_rss_mb()
    if isinstance(told, PhaseLines):
        metrics["timings"] = {name: round(seconds, 3) for name, seconds in told.timings().items()}
