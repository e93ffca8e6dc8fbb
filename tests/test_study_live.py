"""Report sections re-run a study row live (experiments.study.live) to time it: same ranking, timed."""

from __future__ import annotations

import numpy as np

from experiments.evaluate import evaluate
from experiments.study import Experiment, Row
from experiments.study.live import rerun, row_run_config
from experiments.suites.jsonl import save_suite
from tests.support import tiny_suite


def test_a_live_rerun_ranks_as_the_row_did_and_records_cpu_and_load(tmp_path):
    suite_dir = save_suite(tiny_suite(), tmp_path / "tiny")
    result = Experiment(
        [Row("bm25", ("variant=bm25",)), Row("bm25_b0", ("variant=bm25", "stage.bm25.b=0"))],
        suite={"name": "jsonl", "path": str(suite_dir)},
        metrics=["nDCG@10"],
        tracking=False,
        cache_dir=None,
        runs_dir=tmp_path / "runs",
    )
    assert row_run_config(result, "bm25_b0").stage.bm25.b == 0
    suite, timed = rerun(result, "bm25_b0")
    assert len(timed.latency_ms) == len(suite.queries) and np.all(timed.latency_ms >= 0)
    assert timed.cpu_s > 0 and len(timed.load_avg) == 3
    again = evaluate(suite, timed.output, ["nDCG@10"]).per_query["nDCG@10"]
    recorded = result.runs[1].per_query["nDCG@10"]
    np.testing.assert_array_equal(again.reindex(recorded.index).to_numpy(), recorded.to_numpy())
    assert set(timed.summary()) >= {"p50_ms", "p95_ms", "cpu_ms_per_query", "load_1m"}
