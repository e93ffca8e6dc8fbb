"""Where `memeval-study` writes its report: an output folder by default, reports/ only on request.

A study run must leave the checkout's tracked files as they were (issue 25): `reports/<study>/` is what the
docs link to, so only `refresh=true` (or naming it as `output_dir`) rewrites it.
"""

from __future__ import annotations

from pathlib import Path

from experiments.configure.app_settings import StudySettings
from experiments.configure.compose import compose_config
from experiments.study.cli import report_dir


def _cfg(*overrides: str) -> StudySettings:
    return StudySettings.from_config(
        compose_config(["study=boost_beam100k", *overrides], config_name="run_study")
    )


def test_by_default_the_report_goes_beside_the_rows_runs_not_into_reports():
    cfg = _cfg()
    assert report_dir(cfg, "boost_beam100k") == Path("outputs/studies/boost_beam100k")
    assert report_dir(cfg, "boost_beam100k").parts[0] != "reports"


def test_the_output_folder_follows_runs_root():
    assert report_dir(_cfg("runs_root=/x/studies"), "s") == Path("/x/studies/s")


def test_refresh_rewrites_the_committed_report():
    assert report_dir(_cfg("refresh=true"), "boost_beam100k") == Path("reports/boost_beam100k")


def test_an_output_dir_is_used_as_given_even_with_refresh():
    assert report_dir(_cfg("output_dir=reports/boost_beam100k"), "x") == Path("reports/boost_beam100k")
    assert report_dir(_cfg("output_dir=elsewhere", "refresh=true"), "x") == Path("elsewhere")


def _record(source: str, **params: str):
    import pandas as pd

    from experiments.track.finished_runs import RunRecord

    return RunRecord(source, {"variant.name": "exp05", **params}, {"variant": "exp05"}, pd.DataFrame())


def test_row_labels_name_only_what_changes_the_results():
    """A study reuses finished runs made with resume=auto beside its own resume=True rows: how a run
    was started is no difference between rows (issue 25 found `resume=auto` in labels)."""
    from experiments.compare.analysis import name_runs

    runs = [
        _record("a", **{"stage.instruction_boost.weight": "0", "resume": "auto"}),
        _record("b", **{"stage.instruction_boost.weight": "0.1", "resume": "True"}),
    ]
    labels, swept = name_runs(runs)
    assert labels == ["exp05[instruction_boost.weight=0]", "exp05[instruction_boost.weight=0.1]"]
    assert swept == "stage.instruction_boost.weight"
