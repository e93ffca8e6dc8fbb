"""Reports and studies on conversation-shaped data: statistics resample whole conversations by default,
the report names the clusters, the design effect and which query-level differences survive clustering,
and a study compares every row against several references under one Holm family."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from experiments.compare import analysis, build_report
from experiments.evaluate.statistics import holm, paired_randomization_test
from experiments.study import PlanError, load_plan
from experiments.track.finished_runs import RunRecord

CONVERSATIONS, PER_CONVERSATION = 12, 8


def run(name: str, values: np.ndarray) -> RunRecord:
    n = values.size
    ids = [f"c{i // PER_CONVERSATION}:q{i % PER_CONVERSATION}" for i in range(n)]
    table = pd.DataFrame(
        {
            "label.ability": [f"a{i % 2}" for i in range(n)],
            "abstention": False,
            "cluster": [f"conversation=c{i // PER_CONVERSATION}" for i in range(n)],
            "latency_ms": 1.0,
            "R@10": values,
        },
        index=pd.Index(ids, name="query_id"),
    )
    summary = {"variant": name, "suite": {"name": "conv", "content_hash": "f" * 64}}
    return RunRecord(source=f"runs/{name}", params={"variant.name": name}, summary=summary, per_query=table)


@pytest.fixture
def runs() -> list[RunRecord]:
    """bm25; `lucky` gains on every question of two conversations only; `broad` gains a little everywhere."""
    rng = np.random.default_rng(3)
    base = rng.integers(0, 2, CONVERSATIONS * PER_CONVERSATION).astype(float)
    lucky = base.copy()
    lucky[: 2 * PER_CONVERSATION] = 1.0  # conversations c0 and c1 only
    broad = base.copy()
    broad[np.flatnonzero(base == 0)[::2]] = 1.0  # every conversation
    return [run("bm25", base), run("lucky", lucky), run("broad", broad)]


def test_a_gain_from_two_conversations_is_significant_by_query_but_not_by_cluster(runs):
    comp = analysis.build_comparison(runs, baseline="bm25")
    sig = analysis.significance(comp)
    assert sig.attrs["unit"] == "cluster" and sig.attrs["n_clusters"] == CONVERSATIONS
    lucky = sig.set_index("run").loc["lucky"]
    assert lucky["significant_query"] and not lucky["significant"]
    values = comp.values["R@10"]
    clusters = comp.clusters.to_numpy()
    # Two clusters differ: an exact sign-flip over them gives p = 2 / 2**2 at best.
    assert lucky["p_value"] == paired_randomization_test(values["lucky"], values["bm25"], clusters=clusters)
    assert lucky["p_value"] == 0.5
    broad = sig.set_index("run").loc["broad"]
    assert broad["significant"] and broad["significant_query"]


def test_query_level_statistics_remain_an_option(runs):
    comp = analysis.build_comparison(runs, baseline="bm25")
    sig = analysis.significance(comp, unit="query")
    assert sig.attrs["unit"] == "query" and "significant_query" not in sig.columns
    assert sig.set_index("run").loc["lucky", "significant"]


def test_the_report_states_clusters_design_effect_and_what_survives(runs, tmp_path):
    build_report(runs, tmp_path, title="conversations", baseline="bm25", drilldown=None)
    text = (tmp_path / "report.md").read_text()
    assert "Clustering: which differences survive" in text
    assert f"whole clusters: the {CONVERSATIONS} conversations" in text
    assert "design effect" in text
    assert (
        "Of the 2 differences significant with queries treated as independent, 1 survive clustering" in text
    )
    assert "lucky vs bm25, R@10" in text.split("do not (")[1]


def test_every_run_against_several_references_is_one_holm_family(runs, tmp_path):
    comp = analysis.build_comparison(runs, baseline="bm25")
    family = analysis.comparisons(comp, ["lucky"])
    tested = family[family["run"] != family["reference"]]
    assert len(tested) == 4 and family.attrs["comparisons"] == 4
    assert "each of 2 references (bm25, lucky)" in family.attrs["family"]
    np.testing.assert_array_equal(tested["p_holm"], holm(tested["p_value"].to_numpy()))
    # The baseline's own table is corrected over the whole family, not only its two comparisons.
    sig = analysis.significance(comp, references=["lucky"])
    assert sig.attrs["comparisons"] == 4
    build_report(runs, tmp_path, title="refs", baseline="bm25", references=["lucky"], drilldown=None)
    text = (tmp_path / "report.md").read_text()
    assert "every run against each reference" in text and "| vs bm25 | vs lucky |" in text


def test_a_plan_names_more_references_and_the_statistics_unit():
    raw = {
        "name": "p",
        "suite": "spark25",
        "variant": "bm25",
        "rows": [{"name": "a", "overrides": []}, {"name": "b", "overrides": ["variant=dense"]}],
        "baseline": "a",
        "baselines": ["b"],
        "metrics": ["P@5"],
        "stats": {"unit": "query"},
    }
    plan = load_plan(raw)
    assert plan.references == ("a", "b") and plan.stats.unit == "query"
    with pytest.raises(PlanError, match="stats.unit"):
        load_plan({**raw, "stats": {"unit": "conversation"}})
    with pytest.raises(PlanError, match=r"baselines\[0\]"):
        load_plan({**raw, "baselines": ["nope"]})


def test_one_conversation_is_stated_in_the_report_with_the_unit_used_and_why(runs, tmp_path):
    one = []
    for record in runs:
        table = record.per_query.assign(cluster="conversation=only")
        one.append(RunRecord(record.source, record.params, record.summary, table))
    with pytest.warns(UserWarning, match="one cluster"):
        build_report(one, tmp_path, title="one conversation", baseline="bm25", drilldown=None)
    text = (tmp_path / "report.md").read_text()
    assert "statistics by query: all 96 queries are in one cluster" in text
    assert "**Statistics by query**" in text and "fall back to the query level" in text
    assert "one cluster (conversation=only)" in text  # the cluster's own field, as the suite names it
    # each significance mark of the means table says it is query-level only (issue 41): no bare † or ‡
    section = text.split("## Variants × metrics", 1)[1].split("\n## ", 1)[0]
    rows = "\n".join(line for line in section.splitlines() if line.startswith("|"))
    marks = re.findall(r"[†‡]q?", rows)
    assert marks and all(m.endswith("q") for m in marks), marks
    assert "query-level significance" in text


def test_cluster_reports_print_the_calibrated_intervals(runs, tmp_path):
    from experiments.evaluate.statistics import cluster_delta_ci

    comp = analysis.build_comparison(runs, baseline="bm25")
    broad = analysis.significance(comp).set_index("run").loc["broad"]
    values, clusters = comp.values["R@10"], comp.clusters.to_numpy()
    expected = cluster_delta_ci(values["broad"] - values["bm25"], clusters)
    assert (broad["delta_ci_low"], broad["delta_ci_high"]) == expected
    build_report(runs, tmp_path, title="conversations", baseline="bm25", drilldown=None)
    text = (tmp_path / "report.md").read_text()
    assert f"{broad['delta']:+.3f} [{expected.low:+.3f}, {expected.high:+.3f}]" in text
    assert "calibrated for few clusters" in text
