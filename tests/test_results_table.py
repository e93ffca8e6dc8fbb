"""The console table a run prints: pandas' layout of the same rows, without pandas."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from experiments.evaluate.table import Evaluation
from experiments.run.app import results_table

METRICS = ["P@5", "R@10", "nDCG@10", "noise@5"]


def pandas_table(summary, metrics, label) -> str:
    rows = {"overall": summary["overall"]}
    if label and label in summary["by_label"]:
        rows.update(summary["by_label"][label])
    table = pd.DataFrame.from_dict(rows, orient="index")
    cols = ["n_queries", *[m for m in metrics if m in table.columns]]
    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.precision", 3):
        return str(table[cols])


@pytest.mark.parametrize("seed", range(10))
def test_the_table_is_what_pandas_prints(seed):
    rng = np.random.default_rng(seed)
    labels = [f"ability_{i}" for i in range(int(rng.integers(0, 12)))] + ["abstention"]

    def row(empty: bool = False) -> dict:
        out = {"n_queries": int(rng.integers(1, 300)), "n_answerable": 0}
        # means with three decimals somewhere in each column (pandas trims a column's common zeros)
        out |= {m: None if empty else float(rng.choice([rng.random(), 0.123, 1.0, 0.0])) for m in METRICS[:3]}
        return out

    by_label = {"ability": {name: row(empty=name == "abstention") for name in labels}}
    overall = row() | {"P@5": 0.125, "R@10": 0.333, "nDCG@10": 0.4567}
    summary = {"overall": overall, "by_label": by_label}
    evaluation = Evaluation(pd.DataFrame(), summary)
    for label in ("ability", None, "missing"):
        assert results_table(evaluation, METRICS, label) == pandas_table(summary, METRICS, label)
