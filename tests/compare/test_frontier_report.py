"""The report's quality-against-cost section (experiments/compare/frontier_section.py): both frontiers, the
Pareto set, each variant's frontier score with its conversation interval and its difference from the
baseline; a run whose latency was not measured is left out of the latency frontier and named."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from experiments.compare import analysis, build_report
from experiments.compare.frontier_section import frontier_blocks
from experiments.compare.render import Image, Paragraph, Table
from experiments.evaluate import frontier
from experiments.track.finished_runs import RunRecord

CONVERSATIONS, PER = 12, 8


def _run(name: str, quality: np.ndarray, latency: np.ndarray, tokens: np.ndarray) -> RunRecord:
    n = quality.size
    table = pd.DataFrame(
        {
            "abstention": False,
            "cluster": [f"conversation=c{i // PER}" for i in range(n)],
            "latency_ms": latency,
            "tokens_returned": tokens,
            "R@10": quality,
        },
        index=pd.Index([f"c{i // PER}:q{i % PER}" for i in range(n)], name="query_id"),
    )
    summary = {"variant": name, "suite": {"name": "conv", "content_hash": "f" * 64}}
    return RunRecord(source=f"runs/{name}", params={"variant.name": name}, summary=summary, per_query=table)


@pytest.fixture
def runs() -> list[RunRecord]:
    rng = np.random.default_rng(7)
    n = CONVERSATIONS * PER
    base = rng.integers(0, 2, n).astype(float)
    better = np.maximum(base, rng.integers(0, 2, n))
    return [
        _run("fast", base, rng.uniform(1, 2, n), rng.uniform(100, 200, n)),
        _run("slow_better", better, rng.uniform(20, 40, n), rng.uniform(900, 1100, n)),
        _run("slow_worse", base * 0.5, rng.uniform(30, 50, n), rng.uniform(50, 60, n)),
        _run("cached", better, np.full(n, np.nan), rng.uniform(100, 200, n)),
    ]


def test_both_frontiers_mark_the_pareto_set_and_score_each_variant(runs):
    comp = analysis.build_comparison(runs, baseline="fast")
    blocks = frontier_blocks(comp)
    tables = [b.frame for b in blocks if isinstance(b, Table)]
    images = [b.filename for b in blocks if isinstance(b, Image)]
    assert images == ["frontier_latency_ms.png", "frontier_tokens_returned.png"]
    latency, tokens = tables
    assert "cached" not in latency.index  # not measured: out of the latency frontier, and said so
    assert any("Left out (not measured): `cached`" in b.text for b in blocks if isinstance(b, Paragraph))
    assert latency.loc["fast", "Pareto"] == "fast" and latency.loc["slow_better", "Pareto"] == "slow_better"
    assert latency.loc["slow_worse", "Pareto"] == "–"  # worse and slower than fast
    assert tokens.loc["slow_worse", "Pareto"] == "slow_worse"  # the cheapest in tokens
    quality = comp.values["R@10"]
    for name in ("fast", "slow_better"):
        cost = comp.run_by_label[name].per_query["latency_ms"].reindex(quality.index)
        point = frontier.Point(name, float(quality[name].mean()), float(np.percentile(cost, 50)))
        assert latency.loc[name, "frontier score"] == f"{frontier.lafs([point], frontier.LATENCY_MS):.4f}"
        low, high = (float(x) for x in latency.loc[name, "95% CI"].strip("[]").split(", "))
        assert low < float(latency.loc[name, "frontier score"]) < high
    assert latency.loc["fast", "Δ vs baseline (95% CI)"] == "(baseline)"  # not a blank "nan" cell
    assert latency["Δ vs baseline (95% CI)"].notna().all()


def test_memeval_report_shows_both_frontiers(runs, tmp_path):
    build_report(runs, tmp_path, title="frontier", baseline="fast", drilldown=None)
    text = (tmp_path / "report.md").read_text()
    assert "Quality against cost" in text and "against p50 latency (ms)" in text
    assert "against p50 tokens returned" in text and "LAFS" in text
    assert (tmp_path / "frontier_latency_ms.png").stat().st_size > 0
    assert (tmp_path / "frontier_tokens_returned.png").stat().st_size > 0
