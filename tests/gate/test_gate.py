"""The CI regression gate: passes an unchanged run, fails a worse one naming its queries, refuses a baseline
recorded on another suite version, and only `--refresh` writes a baseline.

Runs are real: `experiments.run` with the bm25 variant on a tiny suite saved in the canonical format.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import MappingProxyType

import pandas as pd
import pytest
import yaml

from experiments.gate import main
from experiments.suites.jsonl import save_suite
from experiments.suites.suite import Suite
from retrieval.types import Memory, Query
from tests.support import worse_run

TOPICS = [
    "python formatter black line length", "postgres connection pool size", "kubernetes pod memory limit",
    "react component state hooks", "rust borrow checker lifetimes", "docker image layer caching",
    "git rebase interactive squash", "redis cache eviction policy", "terraform state locking backend",
    "pytest fixture scope session", "nginx reverse proxy timeout", "graphql schema resolver batching",
]  # fmt: skip


def gate_suite(name: str = "gate-tiny", extra: str = "", conversations: int = 0) -> Suite:
    """12 queries, one relevant memory each, in one project scope, or spread over `conversations` scopes."""

    def scope(i: int) -> MappingProxyType:
        if not conversations:
            return MappingProxyType({"project": "p1"})
        return MappingProxyType({"conversation": f"c{i % conversations}"})

    memories = [
        Memory(id=f"m{i}", text=f"note about {t} {extra}".strip(), scope=scope(i))
        for i, t in enumerate(TOPICS)
    ]
    memories += [
        Memory(id=f"noise{i}", text=f"meeting notes number {i} about lunch", scope=scope(i)) for i in range(4)
    ]
    queries = [
        Query(
            id=f"q{i}",
            text=f"what about {t}",
            scope=scope(i),
            labels=MappingProxyType({"category": f"c{i % 3}"}),
        )
        for i, t in enumerate(TOPICS)
    ]
    qrels = {f"q{i}": {f"m{i}": 1} for i in range(len(TOPICS))}
    return Suite(name=name, memories=tuple(memories), queries=tuple(queries), qrels=qrels, k=5)


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    suite_dir = save_suite(gate_suite(), tmp_path / "suite")
    gate_file = tmp_path / "tiny.yaml"
    gate_file.write_text(
        yaml.safe_dump(
            {
                "name": "tiny",
                "overrides": ["suite=jsonl", f"suite.path={suite_dir}", "cache_dir=null"],
                "metrics": ["P@5", "RR"],
                "floors": {"P@5": 0.1},
                "variant_floors": {"dense": {"P@5": 0.9}},  # another variant's floor: not bm25's
                "tolerance": {"P@5": 0.01, "RR": 0.1},
                "alpha": 0.05,
            }
        )
    )
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    run_dir = tmp_path / "run"
    baseline = tmp_path / "baselines" / "tiny-bm25.json"
    args = [str(gate_file), "bm25", "--baseline", str(baseline)]
    assert main([*args, "--out", str(run_dir), "--refresh"]) == 0
    return {"tmp": tmp_path, "gate": gate_file, "run": run_dir, "baseline": baseline, "args": args}


def test_refresh_writes_the_per_query_baseline_with_suite_hash_and_config(setup):
    saved = json.loads(setup["baseline"].read_text())
    metrics = json.loads((setup["run"] / "metrics.json").read_text())
    assert saved["suite_hash"] == metrics["suite"]["content_hash"]
    assert saved["variant"] == "bm25" and saved["config"]["variant.name"] == "bm25"
    assert sorted(saved["per_query"]["P@5"]) == sorted(f"q{i}" for i in range(len(TOPICS)))
    per_query = pd.read_csv(setup["run"] / "per_query.csv", index_col="query_id")
    assert saved["means"]["RR"] == pytest.approx(per_query["RR"].mean())
    assert "--refresh" in saved["command"]


def test_gate_passes_an_unchanged_run_and_never_touches_its_baseline(setup, capsys):
    before = setup["baseline"].read_bytes()
    summary = setup["tmp"] / "summary.md"
    code = main([*setup["args"], "--run-dir", str(setup["run"]), "--summary", str(summary)])
    assert code == 0
    assert "**PASS**" in capsys.readouterr().out
    assert "No query regressed" in summary.read_text()
    assert setup["baseline"].read_bytes() == before


def test_gate_reruns_the_suite_itself_and_passes(setup):
    assert main([*setup["args"], "--out", str(setup["tmp"] / "rerun")]) == 0


def _degraded_copy(run: Path, target: Path, queries: list[str]) -> Path:
    shutil.copytree(run, target)
    return worse_run(target, queries)  # their relevant memories out of the ranking: P@5 and RR 0


def test_gate_fails_a_worse_run_with_exit_1_and_names_the_regressed_queries(setup, capsys, monkeypatch):
    worse = [f"q{i}" for i in range(8)]
    run = _degraded_copy(setup["run"], setup["tmp"] / "worse", worse)
    step_summary = setup["tmp"] / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    assert main([*setup["args"], "--run-dir", str(run)]) == 1
    out = capsys.readouterr().out
    assert "**FAIL**" in out
    assert "P@5 mean dropped by" in out and "drop is significant" in out
    listed = {q for q in (f"q{i}" for i in range(len(TOPICS))) if f"`{q}`" in out}
    assert listed == set(worse)
    assert "**FAIL**" in step_summary.read_text()


def test_one_lost_query_is_within_tolerance_of_rr_but_not_of_p_at_5(setup, capsys):
    run = _degraded_copy(setup["run"], setup["tmp"] / "one", ["q3"])
    assert main([*setup["args"], "--run-dir", str(run)]) == 1
    out = capsys.readouterr().out
    assert "P@5 mean dropped by" in out and "RR mean dropped" not in out
    assert "significant" not in out.split("Failures:")[1].split("W/T/L")[0]  # 1 of 12 queries: no evidence


def test_a_failed_verdict_names_the_rule_that_failed(setup, capsys):
    # One lost query of 12: P@5 drops by more than its tolerance, not significantly, so the verdict says it
    # failed by the tolerance, not by the test ("FAIL: Δ ... smaller than the suite can detect (MDE ...)"
    # read as a contradiction when it did not say which rule failed).
    run = _degraded_copy(setup["run"], setup["tmp"] / "one", ["q3"])
    assert main([*setup["args"], "--run-dir", str(run)]) == 1
    lines = capsys.readouterr().out.splitlines()
    p5 = next(line for line in lines if line.startswith("- **P@5:"))
    rr = next(line for line in lines if line.startswith("- **RR:"))
    verdict = p5.split("**")[1]
    assert verdict == "P@5: FAIL by the tolerance (the mean moved the wrong way by more than it allows)"
    assert "the test" not in verdict  # 1 of 12 queries: no evidence, the tolerance alone fails it
    assert rr.startswith("- **RR: pass**")


def test_an_unknown_variant_is_refused_naming_the_closest_before_any_baseline_is_looked_for(capsys):
    assert main(["spark25", "hybird"]) == 2
    err = capsys.readouterr().err
    assert "unknown variant 'hybird'" in err and "did you mean 'hybrid'" in err
    assert "--refresh" not in err  # no baseline suggested for a variant that does not exist


def test_a_class_moved_to_another_module_is_no_config_drift(setup, capsys):
    # `_target_` names where a class lives; a baseline recorded before a module move still measures the same.
    saved = json.loads(setup["baseline"].read_text())
    saved["config"]["stage.bm25._target_"] = "retrieval.old_place.BM25Stage"
    moved = setup["tmp"] / "moved.json"
    moved.write_text(json.dumps(saved))
    assert main([str(setup["gate"]), "bm25", "--baseline", str(moved), "--run-dir", str(setup["run"])]) == 0
    out = capsys.readouterr().out
    assert "_target_" not in out and "Config differs" not in out
    saved["config"]["stage.bm25.k1"] = "9.9"  # what a stage computes with is still shown
    moved.write_text(json.dumps(saved))
    assert main([str(setup["gate"]), "bm25", "--baseline", str(moved), "--run-dir", str(setup["run"])]) == 0
    assert "stage.bm25.k1" in capsys.readouterr().out.split("Config differs")[1]


def test_a_key_added_later_at_its_class_default_is_no_config_drift(setup, capsys):
    # A baseline recorded before a stage gained a field lacks its key; the run holds the field's default, so
    # it measured the same (issue 41: `stage.bm25.channel: (absent) → bm25` on a fresh clone's gate).
    saved = json.loads(setup["baseline"].read_text())
    assert saved["config"].pop("stage.bm25.channel") == "bm25"  # BM25Retriever.channel's default
    older = setup["tmp"] / "older.json"
    older.write_text(json.dumps(saved))
    args = [str(setup["gate"]), "bm25", "--baseline", str(older)]
    assert main([*args, "--run-dir", str(setup["run"])]) == 0
    assert "Config differs" not in capsys.readouterr().out
    # A key the baseline lacks whose value here is not its class's default is drift, and shown.
    changed = setup["tmp"] / "k1"
    shutil.copytree(setup["run"], changed)
    config = yaml.safe_load((changed / "config.yaml").read_text())
    config["stage"]["bm25"]["k1"] = 1.2  # BM25Retriever.k1's default is 1.5
    (changed / "config.yaml").write_text(yaml.safe_dump(config))
    del saved["config"]["stage.bm25.k1"]
    older.write_text(json.dumps(saved))
    main([*args, "--run-dir", str(changed)])
    drift = capsys.readouterr().out.split("Config differs")[1]
    assert "- `stage.bm25.k1`: (absent) → `1.2`" in drift and "channel" not in drift


def test_a_baseline_for_another_suite_version_is_a_clear_error(setup, capsys):
    other_dir = save_suite(gate_suite(extra="v2"), setup["tmp"] / "suite_v2")
    gate = yaml.safe_load(setup["gate"].read_text())
    gate["overrides"][1] = f"suite.path={other_dir}"
    setup["gate"].write_text(yaml.safe_dump(gate))
    assert main([*setup["args"], "--out", str(setup["tmp"] / "v2")]) == 2
    err = capsys.readouterr().err
    assert "suite hash mismatch" in err and "--refresh" in err


def test_a_changed_suite_is_refused_before_the_suite_is_run(setup, capsys):
    other_dir = save_suite(gate_suite(extra="v2"), setup["tmp"] / "suite_v2")
    gate = yaml.safe_load(setup["gate"].read_text())
    gate["overrides"][1] = f"suite.path={other_dir}"
    setup["gate"].write_text(yaml.safe_dump(gate))
    out = setup["tmp"] / "never-run"
    assert main([*setup["args"], "--out", str(out)]) == 2
    assert not out.exists()  # judged impossible before any work
    assert "suite hash mismatch" in capsys.readouterr().err


def test_a_missing_baseline_is_refused_before_the_suite_is_run(setup, capsys):
    out = setup["tmp"] / "never-run"
    args = [str(setup["gate"]), "bm25", "--baseline", str(setup["tmp"] / "none.json"), "--out", str(out)]
    assert main(args) == 2
    assert not out.exists()
    assert "--refresh" in capsys.readouterr().err


def test_baselines_are_found_from_the_project_from_any_directory_or_from_a_flag(setup, tmp_path, monkeypatch):
    from experiments import PROJECT_ROOT
    from experiments.gate import baseline_dir

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MEMEVAL_BASELINE_DIR", raising=False)
    assert baseline_dir() == PROJECT_ROOT / "reports" / "baselines"
    monkeypatch.setenv("MEMEVAL_BASELINE_DIR", str(setup["baseline"].parent))
    assert baseline_dir() == setup["baseline"].parent
    monkeypatch.delenv("MEMEVAL_BASELINE_DIR")
    args = [str(setup["gate"]), "bm25", "--baseline-dir", str(setup["baseline"].parent)]
    assert main([*args, "--run-dir", str(setup["run"])]) == 0


def test_a_missing_baseline_says_how_to_create_it(setup, capsys):
    args = [str(setup["gate"]), "bm25", "--baseline", str(setup["tmp"] / "none.json")]
    assert main([*args, "--run-dir", str(setup["run"])]) == 2
    assert "--refresh" in capsys.readouterr().err


def test_committed_gate_configs_load(tmp_path):
    from experiments.gate import GateConfig

    for name in ("spark25", "beam100k"):
        gate = GateConfig.load(name)
        assert gate.metrics and set(gate.floors) <= set(gate.metrics)


def test_committed_baselines_hold_the_gated_metrics_of_their_gate():
    from experiments import PROJECT_ROOT as ROOT
    from experiments.gate import Baseline, GateConfig

    files = sorted((ROOT / "reports" / "baselines").glob("*.json"))
    assert {f.stem for f in files} >= {"spark25-hybrid", "beam100k-hybrid"}
    for path in files:
        baseline = Baseline.load(path)
        gate = GateConfig.load(baseline.gate)
        assert path.stem == f"{gate.name}-{baseline.variant}"
        assert set(baseline.per_query) == set(gate.metrics) and len(baseline.suite_hash) == 64
        for metric, values in baseline.per_query.items():
            assert all(0.0 <= v <= 1.0 for v in values.values())
            assert baseline.means[metric] == pytest.approx(sum(values.values()) / len(values))


def test_a_variant_floor_overrides_the_gate_floor_for_that_variant_only(setup, capsys):
    gate = yaml.safe_load(setup["gate"].read_text())
    gate["variant_floors"] = {"bm25": {"P@5": 0.5}}
    setup["gate"].write_text(yaml.safe_dump(gate))
    assert main([*setup["args"], "--run-dir", str(setup["run"])]) == 1
    assert "under the floor 0.5000" in capsys.readouterr().out


def test_a_missing_model_is_exit_2_cannot_judge_not_a_regression(setup, capsys):
    missing = setup["tmp"] / "no-such-model"
    args = [str(setup["gate"]), "cross_encoder", "--baseline", str(setup["baseline"])]
    assert (
        main([*args, f"stage.cross_encoder.scorer.model={missing}", "--out", str(setup["tmp"] / "ce")]) == 2
    )
    assert str(missing) in capsys.readouterr().err


def test_the_gate_measures_fresh_even_with_a_warm_cache_and_resume_asked_for(setup):
    """A candidate cache and a finished run that would answer this config are both ignored by the gate."""
    from experiments.configure.compose import compose_config
    from experiments.run.app import run_experiment

    cache = setup["tmp"] / "warm_cache"
    suite_overrides = yaml.safe_load(setup["gate"].read_text())["overrides"][:2]
    asked = [f"cache_dir={cache}", "resume=true"]
    cfg = compose_config([*suite_overrides, "variant=bm25", "tracking=none", "progress=false", *asked])
    run_experiment(cfg, setup["tmp"] / "warm")  # fills the candidate cache and the finished-run index
    assert list((cache / "candidates").glob("*.npz")) and list((cache / "finished").glob("*.json"))
    out = setup["tmp"] / "gated"
    assert main([*setup["args"], "--out", str(out), *asked]) == 0
    assert not (out / "skipped.json").exists()  # not answered by the finished run
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["cache"]["prefix_candidates"]["hit"] is False  # not read from the warm cache
    assert metrics["overall"]["latency_measured"] is True and metrics["overall"]["latency_ms_p50"] > 0


# Query ids that pandas reads as missing values by default: they must stay ids everywhere.
NA_LIKE = ["NA", "null", "NaN", "None", "N/A", "#N/A", "<NA>", "nan", "NULL", "n/a", "-nan", "1.0"]


def test_query_ids_like_na_and_null_round_trip_through_run_report_and_gate(tmp_path, monkeypatch, capsys):
    from experiments.compare import analysis
    from experiments.run_folder.trec import read_run
    from experiments.track.finished_runs import load_run_dir

    base = gate_suite()
    rename = dict(zip((q.id for q in base.queries), NA_LIKE, strict=True))
    queries = tuple(
        Query(id=rename[q.id], text=q.text, scope=q.scope, labels=MappingProxyType({"category": "NA"}))
        for q in base.queries
    )
    qrels = {rename[q]: judged for q, judged in base.qrels.items()}
    suite = Suite(name="na-ids", memories=base.memories, queries=queries, qrels=qrels, k=5)
    suite_dir = save_suite(suite, tmp_path / "suite")
    gate_file = tmp_path / "na.yaml"
    gate_file.write_text(
        yaml.safe_dump(
            {
                "name": "na",
                "overrides": ["suite=jsonl", f"suite.path={suite_dir}", "cache_dir=null"],
                "metrics": ["P@5", "RR"],
                "floors": {"P@5": 0.1},
                "tolerance": {"P@5": 0.01, "RR": 0.1},
                "alpha": 0.05,
            }
        )
    )
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    baseline = tmp_path / "baselines" / "na-bm25.json"
    args = [str(gate_file), "bm25", "--baseline", str(baseline)]
    assert main([*args, "--out", str(tmp_path / "run"), "--refresh"]) == 0

    run = load_run_dir(tmp_path / "run")
    assert list(run.per_query.index) == NA_LIKE  # strings, in suite order, none turned into NaN
    assert set(run.per_query["label.category"]) == {"NA"}
    assert set(read_run(tmp_path / "run" / "run.trec")) <= set(NA_LIKE)
    assert set(json.loads(baseline.read_text())["per_query"]["P@5"]) == set(NA_LIKE)
    assert main([*args, "--run-dir", str(tmp_path / "run")]) == 0

    worse = tmp_path / "worse"
    shutil.copytree(tmp_path / "run", worse)
    worse_run(worse, ["NA", "null"])
    capsys.readouterr()
    assert main([*args, "--run-dir", str(worse)]) == 1
    out = capsys.readouterr().out
    assert {q for q in NA_LIKE if f"`{q}`" in out} == {"NA", "null"}

    comparison = analysis.build_comparison([run, load_run_dir(worse)], metrics=["P@5"])
    assert list(comparison.values["P@5"].index) == NA_LIKE
    losers = analysis.biggest_changes(comparison, "P@5", comparison.labels[1])
    assert set(losers.index) == {"NA", "null"} and set(losers["label"]) == {"NA"}


HOSTILE_LABELS = ["a|b", "<img src=x onerror=alert(1)>", "**bold** _em_ [link](http://evil.example)"]
HOSTILE_IDS = ["q|0", "<b>q1</b>", "**q2**", "[q3](http://evil.example)", "_q4_", "q`5`"]


def test_the_markdown_summary_shows_labels_ids_and_names_as_literal_text(tmp_path, monkeypatch, capsys):
    from markdown_it import MarkdownIt

    base = gate_suite()
    renamed = dict(zip([q.id for q in base.queries], HOSTILE_IDS, strict=False))
    queries = tuple(
        Query(
            id=renamed.get(q.id, q.id),
            text=q.text,
            scope=q.scope,
            labels=MappingProxyType({"category": HOSTILE_LABELS[i % 3]}),
        )
        for i, q in enumerate(base.queries)
    )
    qrels = {renamed.get(q, q): judged for q, judged in base.qrels.items()}
    suite = Suite(name=base.name, memories=base.memories, queries=queries, qrels=qrels, k=5)
    suite_dir = save_suite(suite, tmp_path / "suite")
    gate_file = tmp_path / "tiny.yaml"
    overrides = ["suite=jsonl", f"suite.path={suite_dir}", "cache_dir=null", "variant.name='<i>x</i>|y'"]
    gate_file.write_text(
        yaml.safe_dump(
            {
                "name": "tiny",
                "overrides": overrides,
                "metrics": ["P@5", "RR"],
                "allow_tolerance_below_mde": True,  # a tiny suite: its power is not what this test is about
            }
        )
    )
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    args = [str(gate_file), "bm25", "--baseline", str(tmp_path / "baseline.json")]
    assert main([*args, "--out", str(tmp_path / "run"), "--refresh"]) == 0
    worse = _degraded_copy(tmp_path / "run", tmp_path / "worse", HOSTILE_IDS)
    step_summary = tmp_path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    capsys.readouterr()
    assert main([*args, "--run-dir", str(worse), "--summary", str(tmp_path / "summary.md")]) == 1
    out = capsys.readouterr().out
    for text in (out, (tmp_path / "summary.md").read_text(), step_summary.read_text()):
        html = MarkdownIt("commonmark").enable("table").render(text)
        # the only markup is the summary's own: headings, bold verdict, tables, lists, code spans
        for tag in ("<img", "<a ", "<em>", "<i>", "<b>"):
            assert tag not in html, tag
        assert html.count("<strong>") == 3  # **FAIL**, and the verdict line of each of the 2 metrics
        rows = [r for r in html.split("<tr>") if "<td>" in r and ("P@5" in r or "RR" in r)]
        regressed = [r for r in rows if r.count("<td>") == 6]  # metric query label baseline run delta
        assert len(regressed) == len(rows) - 2 > 0, "every regressed-query row keeps its 6 cells"
        for qid in HOSTILE_IDS:
            shown = qid.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            assert shown in html, qid  # the id as text, whole


def _independent_mde(values: list[float], alpha: float, power: float = 0.8) -> float:
    """(t[1 - alpha/2] + t[power]) * sd / sqrt(n), n - 1 degrees of freedom: the textbook formula."""
    from scipy import stats

    n = len(values)
    sd = float(pd.Series(values).std(ddof=1))
    return (stats.t.ppf(1 - alpha / 2, n - 1) + stats.t.ppf(power, n - 1)) * sd / n**0.5


@pytest.fixture
def uneven(setup) -> dict:
    """A baseline whose per-query values vary (half the queries lost), so its MDE is not zero."""
    weak = _degraded_copy(setup["run"], setup["tmp"] / "weak", [f"q{i}" for i in range(6)])
    baseline = setup["tmp"] / "baselines" / "uneven.json"
    args = [str(setup["gate"]), "bm25", "--baseline", str(baseline)]
    assert main([*args, "--run-dir", str(weak), "--refresh", "--allow-tolerance-below-mde"]) == 0
    values = json.loads(baseline.read_text())["per_query"]
    return {
        **setup,
        "args": args,
        "mde": {m: _independent_mde(list(v.values()), 0.05 / 2) for m, v in values.items()},
    }


def test_a_tolerance_below_the_detectable_effect_is_refused_with_exit_2_unless_allowed(uneven, capsys):
    mde = uneven["mde"]["P@5"]
    assert mde > 0.01  # 12 queries: far coarser than the configured tolerance
    capsys.readouterr()
    assert main([*uneven["args"], "--run-dir", str(uneven["run"])]) == 2
    err = capsys.readouterr().err
    assert f"P@5: tolerance 0.0100 < MDE {mde:.4f}" in err and "allow_tolerance_below_mde" in err
    # Refused before the suite is run, too (no run directory is made).
    assert main([*uneven["args"], "--out", str(uneven["tmp"] / "never")]) == 2
    assert not (uneven["tmp"] / "never").exists()
    # Said explicitly (flag or config key): the gate judges, and prints what it can detect.
    assert main([*uneven["args"], "--run-dir", str(uneven["run"]), "--allow-tolerance-below-mde"]) == 0
    out = capsys.readouterr().out
    assert f"| {mde:.3g} |" in out and "MDE (80% power)" in out
    gate = yaml.safe_load(uneven["gate"].read_text())
    uneven["gate"].write_text(yaml.safe_dump({**gate, "allow_tolerance_below_mde": True}))
    assert main([*uneven["args"], "--run-dir", str(uneven["run"])]) == 0


def test_a_tolerance_at_the_detectable_effect_is_accepted(uneven):
    gate = yaml.safe_load(uneven["gate"].read_text())
    gate["tolerance"] = {m: float(mde) + 1e-9 for m, mde in uneven["mde"].items()}
    uneven["gate"].write_text(yaml.safe_dump(gate))
    assert main([*uneven["args"], "--run-dir", str(uneven["run"])]) == 0


def test_the_verdict_states_the_ci_of_the_paired_difference_and_resamples_conversations(tmp_path, capsys):
    suite_dir = save_suite(gate_suite(conversations=4), tmp_path / "suite")
    gate_file = tmp_path / "conv.yaml"
    gate_file.write_text(
        yaml.safe_dump(
            {
                "name": "conv",
                "overrides": ["suite=jsonl", f"suite.path={suite_dir}", "cache_dir=null"],
                "metrics": ["RR"],
                "tolerance": {"RR": 0.05},
            }
        )
    )
    baseline = tmp_path / "conv-bm25.json"
    args = [str(gate_file), "bm25", "--baseline", str(baseline)]
    assert main([*args, "--out", str(tmp_path / "run"), "--refresh"]) == 0
    clusters = json.loads(baseline.read_text())["clusters"]
    assert set(clusters.values()) == {f"conversation=c{i}" for i in range(4)}
    worse = _degraded_copy(tmp_path / "run", tmp_path / "worse", ["q0", "q4", "q8"])  # conversation c0
    capsys.readouterr()
    # 4 clusters: no sign-flip p can be below 2/2^4 = 0.125, so the gate cannot judge by its test.
    assert main([*args, "--run-dir", str(worse)]) == 2
    err = capsys.readouterr().err
    assert "only 4 clusters" in err and "2/2^4 = 0.125" in err and "allow_few_clusters" in err
    assert main([*args, "--out", str(tmp_path / "never")]) == 2  # refused before running, too
    assert not (tmp_path / "never").exists()
    assert main([*args, "--run-dir", str(worse), "--allow-few-clusters"]) == 1  # told: floors and tolerance
    out = capsys.readouterr().out
    assert "4 clusters, inverted sign-flip test" in out and "only 4 clusters" in out
    # 4 conversations: the smallest p any difference could get is 2/2^4; the interval is unbounded
    assert "95% CI [-inf, +inf]" in out and "the smallest attainable p 0.125 (at or above alpha 0.05" in out
    assert (
        "**RR: FAIL by the tolerance (the mean moved the wrong way by more than it allows)**: Δ -0.2500"
        in out
    )
