"""The sweep-cost benchmark (experiments/benchmarks/sweep_cost.py) runs end to end and reports every row
it measured: untracked, with MLflow's default SQLite store (in a scratch folder, never the repository's),
and the study."""

from __future__ import annotations

import re

import pytest

from experiments import PROJECT_ROOT
from tests.sweep_support import write_tiny_suite


@pytest.mark.slow  # 6 subprocess runs of the tiny suite and a new MLflow store: ~15-30 s
def test_a_small_real_run_reports_untracked_and_mlflow_rows(tmp_path):
    from experiments.benchmarks.sweep_cost import main

    suite = write_tiny_suite(tmp_path)
    store_before = sorted(p.name for p in PROJECT_ROOT.glob("mlflow.db*"))
    out = tmp_path / "sweep_cost.md"
    args = ["--suite", "jsonl", "--suite-path", str(suite), "--variant", "bm25", "--sweep", "depth=5,10,20"]
    code = main([*args, "--repeats", "1", "--study", "", "--wait-quiet", "0", "--out", str(out)])
    assert code == 0
    text = out.read_text()
    ratios = re.findall(
        r"\| (warm(?:, MLflow tracking)?): sweep, 3 jobs, memeval launcher .*?\*\*([0-9.]+)x\*\*", text
    )
    assert [name for name, _ in ratios] == ["warm", "warm, MLflow tracking"]
    assert all(float(r) > 0 for _, r in ratios)
    assert "Each sweep job adds" in text and "python -m experiments.benchmarks.sweep_cost" in text
    # committed and read elsewhere: the suite, given absolute, by its name only
    assert str(tmp_path) not in text and f"suite.path=…/{suite.name}" in text
    assert sorted(p.name for p in PROJECT_ROOT.glob("mlflow.db*")) == store_before  # the store was scratch
