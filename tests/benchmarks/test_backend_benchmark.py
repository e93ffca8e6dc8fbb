"""The backend benchmark: its report judges the speed and quality targets from the numbers (ratios to
torch), and a small real run writes both files."""

from __future__ import annotations

import json

import pytest

from experiments.benchmarks.backend_tradeoffs import main, render, targets


def _row(texts_per_cpu_s: float, query_p95: float, rerank_p95_cpu: float, ndcg: float) -> dict:
    pct = {"p50": query_p95 / 2, "p95": query_p95, "mean": query_p95 / 2}
    return {
        "bi_encoder": {
            "cold_texts_per_s": texts_per_cpu_s / 2,
            "cold_texts_per_cpu_s": texts_per_cpu_s,
            "query_wall_ms": pct,
            "query_cpu_ms": pct,
        },
        "cross_encoder": {
            "rerank_wall_ms": {"p50": rerank_p95_cpu, "p95": rerank_p95_cpu, "mean": rerank_p95_cpu},
            "rerank_cpu_ms": {"p50": rerank_p95_cpu, "p95": rerank_p95_cpu, "mean": rerank_p95_cpu},
            "scores": [[0.1, 0.2]],
        },
        "dense_quality": {"queries": 179, "nDCG@10": ndcg, "R@10": 0.6},
    }


def _results() -> dict:
    machine = {
        "cpu": "test",
        "nproc": 2,
        "ram_gb": 1.0,
        "platform": "linux",
        "versions": {"torch": "x"},
        "date_utc": "today",
        "loadavg_start": [1.0, 1.0, 1.0],
        "loadavg_end": [1.0, 1.0, 1.0],
        "command": "python -m experiments.benchmarks.backend_tradeoffs",
    }
    return {
        "machine": machine,
        "args": {"cold_sample": 8, "reranker": "none"},
        "trained_reranker": False,
        "backends": {"torch": _row(10.0, 500.0, 1000.0, 0.470), "onnx-int8": _row(35.0, 12.0, 150.0, 0.462)},
    }


def test_targets_are_judged_against_torch_in_the_same_run():
    (line,) = targets(_results())
    assert "cold throughput 3.50× torch by CPU time" in line and "meets ≥ 3×" in line
    assert "dense nDCG@10 Δ -0.0080 misses |Δ| ≤ 0.005" in line
    assert "query p95 12.0 ms wall" in line and "meets ≤ 30 ms" in line
    assert "rerank-16 p95 150 ms CPU meets ≤ 200 ms" in line


def test_the_report_says_when_reranker_quality_is_only_agreement():
    text = render(_results())
    assert "No trained reranker on this machine" in text and "| onnx-int8 | 17.5 | 35.0 | 3.50× |" in text


@pytest.mark.slow
def test_a_small_real_run_writes_the_report_and_the_numbers(tmp_path, beam_100k):
    code = main(
        [
            "--backends",
            "torch,onnx",
            "--cold-sample",
            "4",
            "--queries",
            "3",
            "--rerank-queries",
            "2",
            "--no-quality",
            "--suite-path",
            str(beam_100k),
            "--work",
            str(tmp_path / "cache"),
            "--out",
            str(tmp_path / "out"),
            "--wait-quiet",
            "0",
        ]
    )
    assert code == 0
    results = json.loads((tmp_path / "out" / "backends.json").read_text())
    assert set(results["backends"]) == {"torch", "onnx"}
    onnx = results["backends"]["onnx"]
    assert (
        onnx["bi_encoder"]["cold_texts"] == 4
        and onnx["cross_encoder"]["agreement_with_torch"]["spearman_mean"] > 0.9
    )
    assert "## Targets" in (tmp_path / "out" / "backends.md").read_text()


def test_the_report_judges_spark_phase3_per_query_cpu_against_400_ms():
    results = _results()

    def spark(cpu_p95: float) -> dict:
        pct = lambda p95: {"p50": p95 / 2, "p95": p95, "mean": p95 / 2}  # noqa: E731
        return {
            "queries": 25,
            "reranker_backend": "openvino",
            "nDCG@10": 0.17,
            "query_wall_ms": pct(900),
            "query_cpu_ms": pct(cpu_p95),
        }

    results["backends"]["torch"]["spark_phase3"] = spark(700)
    results["backends"]["onnx-int8"]["spark_phase3"] = spark(350)
    text = render(results)
    assert "| torch | openvino | 25 | 450.0 | 900.0 | 350.0 | 700.0 | 0.1700 | no |" in text
    assert "| onnx-int8 | openvino | 25 | 450.0 | 900.0 | 175.0 | 350.0 | 0.1700 | yes |" in text
