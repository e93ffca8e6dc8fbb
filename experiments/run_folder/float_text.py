"""`repr` of many floats at once: the text run.trec and ranking.csv hold for every score.

Python's `repr(float)` (the shortest text that reads back to the same float), one number at a time, was most
of a sweep job's write time. orjson prints the same shortest round-trip digits in C, but in its
own layout outside [1e-4, 1e16) (`0.00005` for `5e-05`, `1e-6` for `1e-06`) and `null` for NaN and
infinities: those numbers, rare among scores, are printed by `repr` itself. tests/run/test_run_files.py
compares the two on millions of floats and on every edge case.
"""

from __future__ import annotations

import numpy as np
import orjson


def float_reprs(values: np.ndarray) -> list[str]:
    """[repr(float(v)) for v in values], fast."""
    array = np.ascontiguousarray(values, dtype=np.float64).reshape(-1)
    if not len(array):
        return []
    texts = orjson.dumps(array, option=orjson.OPT_SERIALIZE_NUMPY).decode()[1:-1].split(",")
    magnitude = np.abs(array)
    own_layout = ~(np.isfinite(array) & (magnitude < 1e16) & ((magnitude >= 1e-4) | (array == 0)))
    for i in np.flatnonzero(own_layout).tolist():
        texts[i] = repr(float(array[i]))
    return texts
