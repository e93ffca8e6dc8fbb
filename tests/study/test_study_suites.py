"""A study over several suites (`suites:`): checked before anything runs, one comparison per suite."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from experiments.evaluate.table import evaluate
from experiments.study import PlanError, Row, SuiteResults, load_plan, write_report
from experiments.study.experiment import run_plan
from experiments.study.live import rerun
from experiments.suites.jsonl import save_suite
from tests.support import tiny_suite


def plan(**changes) -> dict:
    raw = {
        "name": "two_suites",
        "suites": [{"id": "a", "name": "jsonl", "path": "/a"}, {"id": "b", "name": "jsonl", "path": "/b"}],
        "variant": "bm25",
        "rows": [
            {"name": "bm25", "overrides": []},
            {"name": "bm25_b0", "overrides": ["stage.bm25.b=0"], "suites": ["b"]},
        ],
        "baseline": "bm25",
        "metrics": ["nDCG@10", "R@10"],
    }
    raw.update(changes)
    return raw


def test_each_suite_is_its_own_plan_with_only_its_rows_and_sections():
    p = load_plan(plan(sections=[{"name": "stage_rows", "suites": ["a"], "stages": ["bm25"]}]))
    assert [s.id for s in p.suites] == ["a", "b"]
    a, b = p.for_suite("a"), p.for_suite("b")
    assert a.name == "two_suites.a" and a.suites == () and b.suite == ("suite=jsonl", "suite.path=/b")
    assert [r.name for r in a.rows] == ["bm25"] and [r.name for r in b.rows] == ["bm25", "bm25_b0"]
    assert [s.name for s in a.sections] == ["stage_rows"] and b.sections == ()
    assert a.sections[0].options == {"stages": ["bm25"]}  # `suites` is the plan's, not the section's
    assert b.row_overrides(b.rows[1])[:2] == ["suite=jsonl", "suite.path=/b"]


def test_a_suite_key_the_config_lacks_is_added_with_a_plus():
    suites = ["spark25", {"id": "b", "name": "beam", "path": "/x", "+topics": True}]
    p = load_plan(plan(suites=suites))
    assert p.suites[0].overrides == ("suite=spark25",)
    assert p.suites[1].overrides == ("suite=beam", "suite.path=/x", "+suite.topics=true")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"suite": "spark25"}, "study.suites: give `suite` (one) or `suites` (several), not both"),
        ({"suites": []}, "study.suites: must be a non-empty list"),
        ({"suites": ["spark25", "spark25"]}, "study.suites: suite ids must be unique"),
        ({"suites": [{"id": "a b", "name": "spark25"}]}, "study.suites[0].id"),
        ({"suites": [3]}, "study.suites[0]"),
        (
            {"rows": [{"name": "bm25"}, {"name": "x", "suites": ["c"]}]},
            "study.rows[1].suites: ['c'] are not among the plan's suite ids ['a', 'b']",
        ),
        (
            {"rows": [{"name": "bm25", "suites": ["a"]}]},
            "study.baseline: the baseline 'bm25' must run on every",
        ),
        ({"sections": [{"name": "stage_rows", "suites": ["z"]}]}, "study.sections[0].suites"),
    ],
)
def test_a_bad_suites_plan_is_an_error_naming_the_field(change, field):
    with pytest.raises(PlanError) as err:
        load_plan(plan(**change))
    assert field in str(err.value)


def test_a_single_suite_plan_cannot_restrict_rows_to_suites():
    raw = plan(suite="spark25", rows=[{"name": "bm25"}, {"name": "x", "suites": ["a"]}])
    del raw["suites"]
    with pytest.raises(PlanError, match=r"study.rows\[1\].suites: only a plan with `suites:`"):
        load_plan(raw)


def test_a_two_suite_study_writes_a_report_per_suite_and_an_index(tmp_path):
    """Real runs on two tiny suites (different content): one comparison and report per suite."""
    first = save_suite(tiny_suite(), tmp_path / "one")
    second = save_suite(dataclasses.replace(tiny_suite(), name="tiny_two"), tmp_path / "two")
    p = load_plan(
        plan(
            suites=[
                {"id": "one", "name": "jsonl", "path": str(first)},
                {"id": "two", "name": "jsonl", "path": str(second)},
            ],
            rows=[
                {"name": "bm25", "overrides": []},
                {"name": "bm25_b0", "overrides": ["stage.bm25.b=0"], "suites": ["two"]},
            ],
            sections=[
                {"name": "stage_rows", "suites": ["two"], "stages": ["bm25"]},
                {"name": "latency", "suites": ["two"], "repeats": 2, "budget_ms": 60_000},
                {"name": "relevant_counts", "suites": ["one"], "k": [1]},
            ],
        )
    )
    result = run_plan(p, runs_dir=tmp_path / "runs", tracking=False, cache_dir=None)
    assert isinstance(result, SuiteResults)
    assert [len(r.runs) for _, r in result.results] == [1, 2]
    assert result["two"].runs[0].suite_name == "tiny_two" != result["one"].runs[0].suite_name
    # A section re-runs a row live (experiments.study.live) to time it: the same ranking, timed.
    suite, timed = rerun(result["two"], "bm25_b0")
    assert len(timed.latency_ms) == len(suite.queries) and timed.cpu_s > 0 and len(timed.load_avg) == 3
    again = evaluate(suite, timed.output, ["nDCG@10"]).per_query["nDCG@10"]
    recorded = result["two"].runs[1].per_query["nDCG@10"]
    np.testing.assert_array_equal(again.reindex(recorded.index).to_numpy(), recorded.to_numpy())
    out = write_report(result, tmp_path / "reports", commands=["memeval-study study=two_suites"])
    index = (out / "report.md").read_text()
    assert "[one](one/report.md)" in index and "| bm25_b0 | – |" in index
    assert (out / "index.html").is_file() and (out / "two" / "index.html").is_file()
    two = (out / "two" / "report.md").read_text()
    assert "Rows against the baseline (stage report)" in two and "| bm25_b0 |" in two
    latency = two[two.index("## Query latency") :]  # both rows re-timed live, within a generous budget
    assert latency.count("| yes |") == 2 and "2 interleaved live passes" in latency
    one = (out / "one" / "report.md").read_text()
    assert "Rows against the baseline" not in one and "## Relevant memories per question" in one
    # tiny's answerable questions: one `if` and two `ie`, each with one relevant memory: R@1 can reach 1
    assert "| if | 1 | 1.0 | 1 | 1 | 1.000 |" in one and "| ie | 2 | 1.0 | 1 | 1 | 1.000 |" in one


def test_row_is_importable_for_the_notebook_api():
    assert Row("x").suites == ()
