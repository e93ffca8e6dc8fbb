"""What a metric module declares: `METRICS = {"<name>": MetricFamily(<kernel>, needs_cutoff=...)}`.

A metric is one file of this package: its kernel and that declaration. The package's scan
(experiments/evaluate/metrics/__init__.py `families`) finds it by its names; the names a run accepts and
the error that lists them are derived from what it found.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Kernel = Callable[[np.ndarray, np.ndarray, np.ndarray, int | None], np.ndarray]


@dataclass(frozen=True)
class MetricFamily:
    kernel: Kernel
    needs_cutoff: bool  # `P@5` only, never `P`: the name must carry a cutoff
    raw_grades: bool = False  # the kernel sees the qrels grades as they are, negatives included
