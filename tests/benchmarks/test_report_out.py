"""`--out <a folder>` writes the benchmark's report inside it (issue 41: `python -m
experiments.benchmarks.live_system --out <folder>` ended in a traceback after minutes of measuring)."""

from __future__ import annotations

import json

from experiments.benchmarks import live_system
from experiments.benchmarks.report_paths import report_file


def test_report_file_is_the_file_or_a_name_inside_a_folder(tmp_path):
    assert report_file(tmp_path, "x.md") == tmp_path / "x.md"
    assert report_file(f"{tmp_path}/new/", "x.md") == tmp_path / "new" / "x.md"
    assert (tmp_path / "new").is_dir()
    assert report_file(tmp_path / "deep" / "r.md", "x.md") == tmp_path / "deep" / "r.md"


def test_live_system_out_a_folder_writes_its_report_and_json_inside(tmp_path, monkeypatch):
    # the measurements are replaced (minutes of BEAM work): what is under test is where the report goes
    monkeypatch.setattr(live_system, "overhead", lambda *a: {"measured": "overhead"})
    monkeypatch.setattr(live_system, "concurrency", lambda *a: {"measured": "concurrency"})
    monkeypatch.setattr(live_system, "report", lambda results, command: f"report of {command}")
    live_system.main(["--out", str(tmp_path), "--repeats", "1"])
    assert (tmp_path / "live_system.md").read_text().startswith("report of python -m")
    assert json.loads((tmp_path / "live_system.json").read_text())["overhead"] == {"measured": "overhead"}
