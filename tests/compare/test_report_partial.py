"""memeval-report and a partial merge (memeval-merge --allow-partial): marked at the top and in its label,
and never kept over the whole run of its config. Real runs: the tiny suite as a 2-shard sweep."""

from __future__ import annotations

import pytest

from experiments.compare.cli import main
from tests.sweep_support import sharded_tiny_runs


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report_partial")
    return {**sharded_tiny_runs(tmp), "tmp": tmp}


def _report(out_root, *run_dirs) -> str:
    argv = ["--name", "r", "--out-root", str(out_root), "--drilldown", "0"]
    for folder in run_dirs:
        argv += ["--run-dir", str(folder)]
    assert main(argv) == 0
    return (out_root / "r" / "report.md").read_text()


def test_the_whole_run_is_kept_over_a_later_partial_merge_of_its_config(sharded, tmp_path):
    text = _report(tmp_path, sharded["whole"], sharded["partial"])  # the partial one is the later
    assert "from 1 runs" in text
    left_out = next(line for line in text.splitlines() if "were left out" in line)
    assert str(sharded["partial"]) in left_out and str(sharded["whole"]) not in left_out
    assert "(partial)" not in text.split("## Variants × metrics")[1]


def test_a_partial_merge_is_marked_at_the_top_and_in_its_label(sharded, tmp_path):
    text = _report(tmp_path, sharded["partial"])
    top = text.split("## Commands")[0]
    assert "**Partial: 1 run(s) merge some shards only**" in top and "1 of 2 shards; missing 1/2" in top
    table = text.split("## Variants × metrics")[1].split("\n\n")[1]
    assert "| bm25 (partial) |" in table
