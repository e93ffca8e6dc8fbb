"""The gate's cost rules (experiments/gate_costs.py) beside its quality rules, on a real bm25 run of the
gate's tiny suite: each rule has its verdict line, a broken bound fails (exit 1) while quality passes, a
malformed rule and a number the run lacks are exit 2."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from experiments.gate import main
from experiments.suites.jsonl import save_suite
from tests.gate.test_gate import gate_suite


@pytest.fixture
def gated(tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    suite_dir = save_suite(gate_suite(), tmp_path / "suite")

    def gate(rules) -> str:
        path = tmp_path / f"gate{len(list(tmp_path.glob('gate*.yaml')))}.yaml"
        path.write_text(yaml.safe_dump({
            "name": "tiny", "overrides": ["suite=jsonl", f"suite.path={suite_dir}", "cache_dir=null"],
            "metrics": ["P@5"], "floors": {"P@5": 0.1}, "tolerance": {"P@5": 0.01}, "cost_rules": rules,
            "allow_few_clusters": True,
        }))  # fmt: skip
        return str(path)

    baseline, run = tmp_path / "base.json", tmp_path / "run"
    assert main([gate([]), "bm25", "--baseline", str(baseline), "--out", str(run), "--refresh"]) == 0
    overall = json.loads((run / "metrics.json").read_text())["overall"]
    return gate, run, baseline, overall


def test_each_cost_rule_has_its_verdict_line_and_a_broken_bound_fails(gated, capsys):
    gate, run, baseline, overall = gated
    tokens = overall["tokens_returned_p95"]
    assert tokens > 1
    ok = gate([f"tokens_returned_p95 <= {tokens}", "latency_ms_p95 <= 1e9"])
    assert main([ok, "bm25", "--baseline", str(baseline), "--run-dir", str(run)]) == 0
    out = capsys.readouterr().out
    assert (
        f"**cost tokens_returned_p95 <= {tokens:g}: pass**" in out
        and "**cost latency_ms_p95 <= 1e+09: pass**" in out
    )
    assert "all-MiniLM-L6-v2" in out  # what the tokens were counted by
    tight = gate([f"tokens_returned_p95 < {tokens}"])
    assert main([tight, "bm25", "--baseline", str(baseline), "--run-dir", str(run)]) == 1
    out = capsys.readouterr().out
    assert "**FAIL**" in out and f"**cost tokens_returned_p95 < {tokens:g}: FAIL**" in out
    assert "**P@5: pass**" in out  # quality alone passes


@pytest.mark.parametrize(
    ("rule", "said"),
    [
        ("tokens_returned_p99 <= 5", "cost_rules[0]"),
        ("latency_ms_p95 =< 5", "cost_rules[0]"),
        ("x", "cost_rules[0]"),
    ],
)
def test_a_malformed_rule_is_exit_2_naming_the_file_and_rule(gated, capsys, rule, said):
    gate, run, baseline, _ = gated
    path = gate([rule])
    assert main([path, "bm25", "--baseline", str(baseline), "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err
    assert path in err and said in err


def test_a_number_the_run_lacks_cannot_be_judged(gated, capsys, tmp_path):
    gate, run, baseline, _ = gated
    cached = shutil.copytree(run, tmp_path / "cached")
    metrics = json.loads((cached / "metrics.json").read_text())
    metrics["overall"]["latency_ms_p95"] = None  # answered from a cache: not timed
    (cached / "metrics.json").write_text(json.dumps(metrics))
    assert (
        main([gate(["latency_ms_p95 <= 50"]), "bm25", "--baseline", str(baseline), "--run-dir", str(cached)])
        == 2
    )
    assert "cannot judge" in capsys.readouterr().err
