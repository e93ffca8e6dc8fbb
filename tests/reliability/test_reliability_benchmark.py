"""The benchmark command: its growth fit, and a small end-to-end smoke run (slow) of what CI can afford."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from experiments.benchmarks.pipeline import percentiles
from experiments.benchmarks.pipeline_readme import VARIANTS, loglog_slope
from tests.support import REPO


def test_loglog_slope_recovers_the_exponent_of_a_power_law():
    sizes = [1_000, 10_000, 100_000]
    assert loglog_slope(sizes, [3 * n**0.5 for n in sizes]) == pytest.approx(0.5)
    assert loglog_slope(sizes, [7.0, 7.0, 7.0]) == pytest.approx(0.0, abs=1e-12)
    assert loglog_slope([1_000], [2.0]) is None  # one point fits nothing


def test_percentiles_are_numpy_percentiles():
    values = np.arange(1, 101, dtype=float)
    assert percentiles(values) == {"p50": 50.5, "p95": pytest.approx(95.05), "mean": 50.5}


@pytest.mark.slow
def test_a_small_benchmark_run_writes_every_section_from_its_own_numbers(tmp_path):
    out = tmp_path / "out"
    command = [
        sys.executable,
        "-m",
        "experiments.benchmarks.pipeline",
        "--sizes",
        "200",
        "400",
        "--no-beam500k",
        "--queries",
        "10",
        "--ce-queries",
        "2",
        "--bm25-queries",
        "5",
        "--metric-queries",
        "500",
        "--cold-sample",
        "8",
        "--embed-limit",
        "0",
        "--work",
        str(tmp_path / "work"),
        "--shared-cache",
        str(tmp_path / "no-shared-cache"),
        "--out",
        str(out),
    ]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert list(results["suites"]) == ["synth 200", "synth 400"]
    for suite in results["suites"].values():
        prepare, measure = suite["prepare"], suite["measure"]
        assert (
            prepare["vector_source"]["seeded"] + prepare["vector_source"]["already_cached"]
            == (prepare["distinct_texts"])
        )
        assert measure["scopes"] == 1 and set(measure["variants"]) == set(VARIANTS)
        assert all(v["latency_ms"]["p95"] >= v["latency_ms"]["p50"] > 0 for v in measure["variants"].values())
        assert "cross_encoder" in measure["variants"]["cross_encoder"]["stage_ms"]
        bm25 = measure["bm25_side_by_side"]
        assert bm25["identical_top10"] + bm25["differ_only_within_ties"] == bm25["queries"] == 5
        second = measure["second_run"]
        assert not second["first"]["prefix_cache_hit"] and second["second"]["prefix_cache_hit"]
        assert second["first"]["hit_rate"] == 1.0  # prepared cache: every vector found
        assert measure["maxrss_mb_after"]["hybrid"] > 0
    metrics = results["metrics_vs_ir_measures"]
    assert metrics["max_abs_difference"] < 1e-9 and metrics["values_compared"] > 0
    readme = (out / "README.md").read_text()
    for heading in (
        "## Machine",
        "## Per-query latency",
        "## How cost grows",
        "## bm25s vs rank-bm25",
        "## Metric computation vs ir_measures",
        "## Embedding cache",
        "## Targets",
    ):
        assert heading in readme, heading
    assert "synth 400" in readme and results["machine"]["cpu"] in readme


def test_the_load_note_says_shared_or_quiet_from_the_load_it_was_given():
    from experiments.benchmarks.pipeline import load_note

    shared = load_note({"nproc": 2, "loadavg_start": [1.0, 0, 0], "loadavg_end": [9.5, 0, 0]})
    quiet = load_note({"nproc": 2, "loadavg_start": [1.2, 0, 0], "loadavg_end": [0.8, 0, 0]})
    assert "shared (1-minute load up to 9.5" in shared and "quiet" not in shared
    assert "quiet (1-minute load at most 1.2 on 2 cores)" in quiet
