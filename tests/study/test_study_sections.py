"""Domain report sections of a study (experiments/study/sections/) on small synthetic comparisons.

Each run is a RunRecord built by hand (per-query values, params, metrics.json summary), so every
expected number below is worked out from the table in the test, not read back from the code.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from experiments.compare import analysis
from experiments.compare.render import Paragraph, Table, to_markdown
from experiments.configure.compose import compose_config
from experiments.study import SectionContext, load_plan
from experiments.study.sections import available_sections, resolve_section
from experiments.study.sections.targets import target_lines
from experiments.track.finished_runs import RunRecord

WEIGHT = "stage.instruction_boost.weight"
# Six instruction_following queries, four of another ability, two abstention questions.
ABILITY = ["instruction_following"] * 6 + ["other"] * 4 + ["abstention"] * 2
ABSTAIN = [False] * 10 + [True] * 2


def record(variant, target, other, *, params=None, returned=None, tagging=None, top=0.5):
    """A finished run: R@10 = nDCG@10 = the given per-query values (target, then other ability)."""
    values = [*target, *other, np.nan, np.nan]
    frame = pd.DataFrame(
        {
            "label.ability": ABILITY,
            "abstention": ABSTAIN,
            "n_returned": returned if returned is not None else [10] * 12,
            "top_score": [top] * 12,
            "scope_leaks": [0] * 12,
            "R@10": values,
            "nDCG@10": values,
        },
        index=pd.Index([f"q{i}" for i in range(12)], name="query_id"),
    )
    summary = {"variant": variant, "suite": {"content_hash": "h" * 16, "name": "syn"}}
    if tagging is not None:
        summary["tagging"] = tagging
    return RunRecord(f"/runs/{variant}-{params}", dict(params or {}), summary, frame)


def context(runs, baseline, metrics=("R@10", "nDCG@10"), **options) -> SectionContext:
    comp = analysis.build_comparison(runs, baseline=baseline, metrics=list(metrics), label="ability")
    sig = analysis.significance(comp, seed=0)
    return SectionContext(comp, sig, metrics[-1], 0.05, 0, options)


def render(section: str, ctx: SectionContext) -> str:
    return to_markdown(resolve_section(section)(ctx))


def table_of(blocks) -> pd.DataFrame:
    return next(b.frame for b in blocks if isinstance(b, Table))


ZERO, ONE = [0] * 6, [1] * 6
OTHER = [1.0, 1.0, 0.5, 0.5]


def exp05_rows():
    """hybrid; exp05 at weights 0, 0.25 (target +2/6, others -0.005) and 0.5 (target +5/6, others
    -0.25); an ablation at the default weight 0.25; two gate thresholds."""
    w = lambda x: {WEIGHT: str(x)}  # noqa: E731
    return [
        record("hybrid", ZERO, OTHER),
        record("exp05", ZERO, OTHER, params=w(0)),
        record("exp05", [1, 1, 0, 0, 0, 0], [1.0, 1.0, 0.5, 0.49], params=w(0.25)),
        record("exp05", [1, 1, 1, 1, 1, 0], [0.5, 0.5, 0.5, 0.5], params=w(0.5)),
        record("exp05_no_penalty", [1, 0, 0, 0, 0, 0], [1.0, 1.0, 0.4, 0.4], params=w(0.25)),
        record(
            "exp05_gate_low",
            [1, 1, 0, 0, 0, 0],
            [1.0, 1.0, 0.5, 0.49],
            params=w(0.25),
            returned=[10] * 10 + [0, 10],
        ),  # fmt: skip
        record(
            "exp05_gate_high",
            [1, 0, 0, 0, 0, 0],
            [0, 1.0, 0.5, 0.49],
            params=w(0.25),
            returned=[10, 0, 10, 10, 10, 10, 0, 10, 10, 10, 0, 0],
        ),  # fmt: skip
    ]


def test_every_plugin_module_registers_its_sections():
    assert {
        "exp05_acceptance",
        "exp05_headline",
        "exp05_answer",
        "tagging_coverage",
        "abstention",
        "per_label",
    } <= set(available_sections())


def test_acceptance_tests_every_row_against_the_baseline_with_exact_p_and_holm():
    ctx = context([record("hybrid", ZERO, OTHER), record("x", ONE, OTHER)], "hybrid")
    blocks = resolve_section("exp05_acceptance")(ctx)
    table = table_of(blocks)
    row = table.loc["x"]
    assert row["Δ [95% CI]"].startswith("+1.000") and row["W/T/L"] == "6/0/0"
    # exact sign-flip test: only all-plus and all-minus are as extreme, 2 / 2**6; Holm over 2 tests
    assert row["p Holm"] == f"{min(1.0, 2 * 2 / 2**6):.2g}"
    assert row["other macro nDCG@10 Δ"] == "+0.000" and row["acceptance"] == "**met**"
    assert "**x**" in to_markdown(blocks)  # the verdict names the row; **met** is markup, not escaped


def test_headline_shows_the_target_gain_and_the_other_abilities_macro_means():
    runs = exp05_rows()
    table = table_of(resolve_section("exp05_headline")(context(runs, "hybrid")))
    row = table.loc["exp05[instruction_boost.weight=0.5]"]
    assert row["instruction_following R@10 [95% CI]"].startswith("0.833 [")
    assert row["Δ vs baseline"] == "+0.833"
    # one other ability: its macro mean is its mean, 0.5 against hybrid's 0.75
    assert row["other macro nDCG@10"] == "0.500" and row["Δ other"] == "-0.250"
    assert row["overall R@10"] == f"{(5 + 2.0) / 10:.3f}"
    assert table.loc["hybrid", "Δ vs baseline"] == "+0.000"


def test_answer_picks_the_widest_margin_and_names_the_default_from_the_ablations_weight():
    runs = exp05_rows()
    ctx = context(
        runs,
        "hybrid",
        no_penalty="exp05_no_penalty",
        current_state="exp05_no_penalty",
        current_state_ability="other",
        gates=["exp05_gate_low", "exp05_gate_high"],
        tuned_on="../somewhere",
    )
    text = render("exp05_answer", ctx)
    # margins: w=0 -0.10; w=0.25 min(0.333-0.10, -0.0025+0.01) = +0.0075; w=0.5 -0.24
    assert "**exp05[instruction_boost.weight=0.25]** is the best swept configuration" in text
    assert "(the widest margin on both acceptance tests, +0.007)" in text
    assert "The committed default, exp05[instruction_boost.weight=0.25]" in text
    assert "it is the best swept configuration." in text
    # (0.4 + 0.4 - 0.5 - 0.49) / 4 = -0.0475 on the one other ability: its R@10 change vs the default
    assert "and other R@10 -0.04" in text and "vs the default (no gain here)." in text
    assert "Across weights 0, 0.25, 0.5" in text and "runs 0.000, 0.333, 0.833" in text
    assert "exp05_gate_low: 1/2 abstentions, 0 answerable emptied" in text
    assert "exp05_gate_high: 2/2 abstentions, 2 answerable emptied" in text
    # worth a look: abstains on >= half the abstention questions, empties <= 5% of the answerable ones
    assert "Thresholds worth a look: exp05_gate_low." in text
    assert "Nothing was tuned on these questions" in text  # the runs have no suite.path ../somewhere


def test_answer_says_when_no_swept_weight_meets_the_budget():
    w = {WEIGHT: "0.3"}
    runs = [record("hybrid", ZERO, OTHER), record("exp05", ONE, [0, 0, 0, 0], params=w)]
    text = render("exp05_answer", context(runs, "hybrid"))
    assert "No swept weight raises the target" in text or "No row sweeps" in text


def test_tagging_coverage_reads_each_runs_tagging_block():
    tagged = {
        "tagged": 40,
        "instruction_evidence_tagged_share": 0.81,
        "precision": 1.0,
        "precision_ci95": [0.785, 1.0],
        "precision_judged": 14,
    }
    runs = [record("hybrid", ZERO, OTHER), record("exp05", ONE, OTHER, tagging=tagged)]
    table = table_of(resolve_section("tagging_coverage")(context(runs, "hybrid")))
    assert table.loc["exp05"].tolist() == ["40", "0.810", "1.000 [0.785, 1.000]", "14"]
    assert table.loc["hybrid", "precision [95% CI]"].startswith("n/a")


def test_abstention_counts_emptied_questions_and_the_cost_against_the_reference():
    runs = exp05_rows()
    rows = ["exp05_gate_low", "exp05_gate_high"]
    ctx = context(runs, "hybrid", rows=rows, reference="exp05_gate_low")
    table = table_of(resolve_section("abstention")(ctx))
    assert list(table.index) == rows
    high = table.loc["exp05_gate_high"]
    assert high["abstention questions returning nothing"] == "2/2 (1.00)"
    assert high["answerable questions returning nothing"] == "2"
    # R@10 over the 10 answerable: low (2 + 2.99) / 10, high (1 + 1.99) / 10
    assert high["Δ R@10 vs exp05_gate_low"] == f"{(2.99 - 4.99) / 10:+.3f}"
    with pytest.raises(KeyError, match="no row named"):
        resolve_section("abstention")(context(runs, "hybrid", rows=["nope"]))


def test_per_label_tables_the_non_primary_metrics_with_the_overall_ci():
    runs = [record("hybrid", ZERO, OTHER), record("x", ONE, [0.5, 0.5, 0.5, 0.5])]
    blocks = resolve_section("per_label")(context(runs, "hybrid", metrics=("R@10", "nDCG@10")))
    assert [b.text for b in blocks if not isinstance(b, (Paragraph, Table))] == ["R@10 per ability"]
    table = table_of(blocks)
    assert table.loc["x", "instruction_following (n=6)"].startswith("1.000")
    assert table.loc["x", "other (n=4)"] == "0.500"
    assert table.loc["hybrid", "all [95% CI]"].startswith(f"{3 / 10:.3f} [")


def test_exp05_plans_keep_the_studys_rows_and_differ_only_in_suite():
    plans = {}
    for name in ("exp05_beam100k", "exp05_beam500k", "exp05_beam500k_conv1-5"):
        cfg = compose_config([f"study={name}"], config_name="run_study")
        plans[name] = load_plan(OmegaConf.to_container(cfg.study, resolve=True), name=name)
    base = plans["exp05_beam100k"]
    weights = {float(v) for r in base.rows for k, v in r.swept}
    assert {0.0, 0.05, 0.1, 0.15, 0.25, 0.5} <= weights and base.baseline == "hybrid"
    assert {"exp05_wide", "exp05_no_conciseness", "exp05_gate_0.3"} <= {r.name for r in base.rows}
    for name in ("exp05_beam500k", "exp05_beam500k_conv1-5"):
        assert plans[name].rows == base.rows and plans[name].sections == base.sections
    assert plans["exp05_beam500k_conv1-5"].suite[1].startswith("suite.path=[")


def test_exp05_variant_turns_the_boost_on_and_widens_its_markers_in_exp05_wide():
    # its stage order: tests/run/test_variant_composition.py
    cfg = compose_config(["suite=beam", "variant=exp05"])
    assert cfg.stage.instruction_boost.enabled is True
    wide = compose_config(["suite=beam", "variant=exp05_wide"])
    assert set(cfg.stage.instruction_tagging.markers) < set(wide.stage.instruction_tagging.markers)


def test_targets_judge_gains_and_drops_overall_and_per_label_with_holm():
    # x: instruction_following 0 -> 1 on all six (+1.0), other 1,1,.5,.5 -> .5 each (-0.25)
    runs = [record("hybrid", ZERO, OTHER), record("x", ONE, [0.5, 0.5, 0.5, 0.5])]
    checks = [
        {"metric": "R@10", "min_gain": 0.05},
        {"metric": "R@10", "labels": ["instruction_following"], "min_gain": 1.0},
        {"metric": "nDCG@10", "labels": "each", "max_drop": 0.02},
    ]
    ctx = context(runs, "hybrid", row="x", checks=checks)
    lines = target_lines(ctx).set_index(["metric", "label"])
    overall = lines.loc[("R@10", "all")]
    assert overall["delta"] == pytest.approx((6 - 1.0) / 10) and overall["met"]  # 0.3 -> 0.8
    assert lines.loc[("R@10", "instruction_following"), "met"]  # exactly the target passes
    assert lines.loc[("nDCG@10", "instruction_following"), "met"]
    other = lines.loc[("nDCG@10", "other")]
    assert other["delta"] == pytest.approx(-0.25) and not other["met"] and other["wtl"] == "0/2/2"
    assert lines.loc[("R@10", "instruction_following"), "p"] == pytest.approx(2 / 2**6)
    assert (lines["p_holm"] >= lines["p"]).all()
    text = render("targets", ctx)
    assert "3 of 4 targets met" in text and "| NO |" in text


def test_targets_name_a_bad_check():
    runs = [record("hybrid", ZERO, OTHER), record("x", ONE, OTHER)]
    with pytest.raises(KeyError, match="exactly one of min_gain, max_drop"):
        resolve_section("targets")(context(runs, "hybrid", checks=[{"metric": "R@10"}]))
    with pytest.raises(KeyError, match="not among"):
        resolve_section("targets")(context(runs, "hybrid", checks=[{"metric": "P@5", "min_gain": 0}]))
    with pytest.raises(KeyError, match="no answerable query labelled"):
        resolve_section("targets")(
            context(runs, "hybrid", checks=[{"metric": "R@10", "labels": ["nope"], "min_gain": 0}])
        )
