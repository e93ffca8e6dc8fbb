"""memeval-gate never judges or records a partial merge (memeval-merge --allow-partial): it holds some
shards' queries under the whole suite's hash. Real runs: the tiny suite as a 2-shard sweep
(tests/sweep_support.py)."""

from __future__ import annotations

import pytest
import yaml

from experiments.gate import main
from tests.sweep_support import sharded_tiny_runs


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gate_partial")
    runs = sharded_tiny_runs(tmp)
    gate_file = tmp / "tiny.yaml"
    gate_file.write_text(
        yaml.safe_dump(
            {
                "name": "tiny",
                "overrides": ["suite=jsonl", f"suite.path={runs['suite']}", "cache_dir=null"],
                "metrics": ["RR"],
                "tolerance": {"RR": 0.5},
                "allow_few_clusters": True,
                "allow_tolerance_below_mde": True,
            }
        )
    )
    return {**runs, "gate": gate_file, "tmp": tmp}


def test_refresh_from_a_partial_merge_is_refused_and_writes_no_baseline(sharded, tmp_path, capsys):
    baseline = tmp_path / "tiny-bm25.json"
    args = [str(sharded["gate"]), "bm25", "--baseline", str(baseline), "--run-dir", str(sharded["partial"])]
    assert main([*args, "--refresh"]) == 2
    err = capsys.readouterr().err
    assert f"{sharded['partial']} is a partial run (partial: 1 of 2 shards; missing 1/2)" in err
    assert not baseline.exists()


def test_a_partial_merge_is_not_judged_against_the_whole_runs_baseline(sharded, tmp_path, capsys):
    baseline = tmp_path / "tiny-bm25.json"
    args = [str(sharded["gate"]), "bm25", "--baseline", str(baseline)]
    assert main([*args, "--run-dir", str(sharded["whole"]), "--refresh"]) == 0  # the whole merge: recorded
    assert main([*args, "--run-dir", str(sharded["whole"])]) == 0
    capsys.readouterr()
    assert main([*args, "--run-dir", str(sharded["partial"])]) == 2
    err = capsys.readouterr().err
    assert "is a partial run" in err and "judges and records whole runs only" in err
