"""The console table a run prints: pandas' layout of the same rows, without pandas; the query counts say
answerable/all, since the means are over the answerable queries (issue 25)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from experiments.evaluate.table import Evaluation
from experiments.run.console import ANSWERABLE_COLUMN, results_table

METRICS = ["P@5", "R@10", "nDCG@10", "noise@5"]


def pandas_table(summary, metrics, label) -> str:
    rows = {"overall": summary["overall"]}
    if label and label in summary["by_label"]:
        rows.update(summary["by_label"][label])
    table = pd.DataFrame.from_dict(rows, orient="index")
    table[ANSWERABLE_COLUMN] = [f"{r['n_answerable']}/{r['n_queries']}" for r in rows.values()]
    cols = [ANSWERABLE_COLUMN, *[m for m in metrics if m in table.columns]]
    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.precision", 3):
        return str(table[cols])


@pytest.mark.parametrize("seed", range(10))
def test_the_table_holds_what_pandas_prints(seed):
    rng = np.random.default_rng(seed)
    labels = [f"ability_{i}" for i in range(int(rng.integers(0, 12)))] + ["abstention"]

    def row(empty: bool = False) -> dict:
        n = int(rng.integers(1, 300))
        out = {"n_queries": n, "n_answerable": int(rng.integers(0, n + 1))}
        # means with three decimals somewhere in each column (pandas trims a column's common zeros)
        out |= {m: None if empty else float(rng.choice([rng.random(), 0.123, 1.0, 0.0])) for m in METRICS[:3]}
        return out

    by_label = {"ability": {name: row(empty=name == "abstention") for name in labels}}
    overall = row() | {"P@5": 0.125, "R@10": 0.333, "nDCG@10": 0.4567}
    summary = {"overall": overall, "by_label": by_label}
    evaluation = Evaluation(pd.DataFrame(), summary)
    for label in ("ability", None, "missing"):
        ours = results_table(evaluation, METRICS, label)
        # Same rows, columns and cell text as pandas; the layout: labels left, columns right-aligned
        # (pandas pads a text column by one more space, the only difference).
        assert [line.split() for line in ours.splitlines()] == [
            line.split() for line in pandas_table(summary, METRICS, label).splitlines()
        ]
        lines = ours.splitlines()
        assert len({len(line) for line in lines}) == 1  # every column right-aligned to one width


def test_the_counts_say_answerable_of_all_queries():
    summary = {
        "overall": {"n_queries": 25, "n_answerable": 24, "P@5": 0.2},
        "by_label": {"category": {"code": {"n_queries": 8, "n_answerable": 8, "P@5": 0.25}}},
    }
    lines = results_table(Evaluation(pd.DataFrame(), summary), ["P@5"], "category").splitlines()
    assert lines[0].split() == ["answerable/all", "P@5"]
    assert lines[1].split() == ["overall", "24/25", "0.200"] and lines[2].split() == ["code", "8/8", "0.250"]


def test_with_empty_queries_scored_zero_the_counts_say_every_query_is_averaged():
    summary = {
        "overall": {"n_queries": 500, "n_answerable": 410, "R@10": 0.3},
        "by_label": {},
        "empty_queries": "zero",
    }
    lines = results_table(Evaluation(pd.DataFrame(), summary), ["R@10"], None).splitlines()
    assert lines[0].split() == ["scored/all", "R@10"] and lines[1].split()[1] == "500/500"


def test_harm_states_its_own_denominator_under_the_table():
    summary = {
        "overall": {"n_queries": 60, "n_answerable": 25, "P@5": 0.2, "harm@5": 0.29,
                    "denominators": {"harm@5": 35}},
        "by_label": {},
    }  # fmt: skip
    text = results_table(Evaluation(pd.DataFrame(), summary), ["P@5", "harm@5"], None)
    assert text.splitlines()[-1] == "harm@5 over 35 queries (those with must-not judgements)"
