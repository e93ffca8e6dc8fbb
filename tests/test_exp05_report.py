"""EXP-05 report logic on synthetic per-query tables: the sweep plan, the selection rule, the tests."""

from __future__ import annotations

import numpy as np
import pandas as pd

from experiments.exp05_report import WEIGHTS, Run, best_weight, other_macro, paired_tests, plan
from experiments.exp05_runs import compose_config


def test_plan_sweeps_the_issue_weights_and_the_wide_list_against_hybrid():
    runs = plan()
    assert runs[0].name == "hybrid"
    assert set(WEIGHTS) == {0.0, 0.05, 0.1, 0.15, 0.25, 0.5}
    assert {f"exp05 w={w:g}" for w in WEIGHTS} <= {r.name for r in runs}
    assert "exp05_wide" in {r.variant for r in runs}


def test_exp05_variant_turns_the_boost_on_and_keeps_the_issue_stage_order():
    cfg = compose_config("exp05")
    assert cfg.stage.instruction_boost.enabled is True
    assert list(cfg.variant.stages) == [
        "instruction_tagging",
        "bm25",
        "dense",
        "fusion",
        "current_state",
        "instruction_boost",
        "conciseness_penalty",
    ]
    wide = compose_config("exp05_wide")
    assert set(cfg.stage.instruction_tagging.markers) < set(wide.stage.instruction_tagging.markers)


def test_best_weight_clears_both_acceptance_tests_by_the_widest_margin():
    summary = pd.DataFrame(
        {
            "run": ["hybrid", "exp05 w=0.1", "exp05 w=0.25", "exp05 w=0.35", "exp05 w=0.5"],
            "d_if": [0.0, 0.05, 0.2, 0.3, 0.5],
            "d_other": [0.0, 0.0, 0.01, 0.0, -0.008],
        }
    )
    # margins: w=0.1 -0.05; w=0.25 min(0.10, 0.02)=0.02; w=0.35 min(0.2, 0.01)=0.01; w=0.5 0.002
    best, _ = best_weight(summary)
    assert best["run"] == "exp05 w=0.25"
    none, why = best_weight(summary.assign(d_other=-0.5))
    assert none is None and "budget" in why


def frame(if_values, other_values):
    n_if, n_other = len(if_values), len(other_values)
    return pd.DataFrame(
        {
            "label.ability": ["instruction_following"] * n_if + ["a"] * n_other + ["abstention"],
            "abstention": [False] * (n_if + n_other) + [True],
            "R@10": [*if_values, *other_values, np.nan],
            "nDCG@10": [*if_values, *other_values, np.nan],
        }
    )


def test_paired_tests_compare_every_run_with_hybrid_and_holm_correct():
    base = frame([0, 0, 0, 0, 0, 0], [1, 1, 1, 1])
    better = frame([1, 1, 1, 1, 1, 1], [1, 1, 1, 1])
    tests = paired_tests({"hybrid": base, "x": better}, [Run("hybrid", "hybrid"), Run("x", "exp05")])
    target = tests[tests["metric"].str.startswith("instruction")].iloc[0]
    assert target["delta"] == 1.0 and target["W/T/L"] == "6/0/0"
    assert target["p"] == 2 / 2**6  # exact sign-flip: only all-plus and all-minus are as extreme
    other = tests[tests["metric"].str.startswith("other")].iloc[0]
    assert other["delta"] == 0.0 and other["p"] == 1.0
    assert (tests["p_holm"] >= tests["p"]).all()
    assert other_macro(better, "nDCG@10") == 1.0
