"""memeval-serve as a real subprocess on a free loopback port, scored through the HTTP adapter by
memeval-run: parity with the in-process run (spark25, BEAM 100K conversation 1), record then replay
with the server stopped, SIGKILL mid-run then resume, a 429 storm, a service down at start, a live
sweep of a config_override flag (MLflow parent + 5 children, a Holm report) and the gate on replays."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.live_services import free_port
from tests.support import CACHE_DIR, REPO

pytestmark = pytest.mark.slow

ENV = {**os.environ, "MLFLOW_TRACKING_URI": "", "HF_HUB_OFFLINE": "1"}
SPARK_MEMORIES = 306


def health(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return json.loads(response.read())
    except OSError:
        return None


@contextmanager
def served(*args: str, port: int | None = None, log: Path | None = None):
    """memeval-serve <args> on 127.0.0.1; yields (url, process); stopped (SIGTERM) at the end."""
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    out = open(log, "ab") if log else subprocess.DEVNULL
    proc = subprocess.Popen(
        [sys.executable, "-m", "experiments.serve.cli", *args, f"cache_dir={CACHE_DIR}", "--port", str(port)],
        cwd=REPO,
        env=ENV,
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 180
        while health(url) is None:
            assert proc.poll() is None, f"memeval-serve exited with {proc.returncode}"
            assert time.monotonic() < deadline, "memeval-serve did not come up in 180 s"
            time.sleep(0.3)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)
        if log:
            out.close()


def memeval_run(cwd: Path, run_dir: Path, *overrides: str, check: bool = True) -> subprocess.CompletedProcess:
    args = [
        sys.executable,
        "-m",
        "experiments.run",
        f"hydra.run.dir={run_dir}",
        f"cache_dir={cwd / 'cache'}",
        f"encoder.cache_dir={CACHE_DIR / 'embeddings'}",
        "progress=false",
        *overrides,
    ]
    if not any(o.startswith("tracking") for o in overrides):
        args.append("tracking=none")
    proc = subprocess.run(args, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=900)
    if check:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def quality(run_dir: Path) -> dict:
    """metrics.json without what a live run measures on its own (latency, cost, timing, provenance)."""
    metrics = json.loads((run_dir / "metrics.json").read_text())

    def strip(row: dict) -> dict:
        return {k: v for k, v in row.items() if not k.startswith(("latency_ms", "system."))}

    return {
        "overall": strip(metrics["overall"]),
        "overall_ci95": metrics["overall_ci95"],
        "by_label": {
            lab: {v: strip(r) for v, r in rows.items()} for lab, rows in metrics["by_label"].items()
        },
        "scope_leaks": metrics["scope_leaks"],
    }


def system_run(cwd: Path, run_dir: Path, url: str, name: str, *overrides: str, check: bool = True):
    """The served variant through the HTTP adapter, tagged `name` (run.trec's tag is the variant name)."""
    return memeval_run(
        cwd,
        run_dir,
        "variant=system",
        f"variant.name={name}",
        f"system.base_url={url}",
        *overrides,
        check=check,
    )


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The in-process exp05 run on spark25: what every served run must reproduce."""
    tmp = tmp_path_factory.mktemp("reference")
    memeval_run(tmp, tmp / "run", "variant=exp05")
    return tmp / "run"


@pytest.fixture(scope="module")
def exp05_server():
    with served("variant=exp05") as (url, _):
        yield url


def test_parity_on_spark25(tmp_path, reference, exp05_server):
    system_run(tmp_path, tmp_path / "run", exp05_server, "exp05")
    assert (tmp_path / "run" / "run.trec").read_bytes() == (reference / "run.trec").read_bytes()
    assert quality(tmp_path / "run") == quality(reference)
    cost = json.loads((tmp_path / "run" / "metrics.json").read_text())["system"]
    assert cost["n_queries"] == 25 and cost["memories_ingested"] == SPARK_MEMORIES
    assert cost["errors"] == 0 and cost["unknown_ids"] == 0 and cost["latency_ms_p50"] > 0


def test_parity_on_beam_100k_conversation_1(tmp_path, beam_100k):
    suite = ["suite=beam", f"suite.path={beam_100k / '1'}"]
    memeval_run(tmp_path, tmp_path / "in_process", *suite, "variant=hybrid")
    with served("variant=hybrid") as (url, _):
        system_run(tmp_path, tmp_path / "served", url, "hybrid", *suite)
    assert (tmp_path / "served" / "run.trec").read_bytes() == (
        tmp_path / "in_process" / "run.trec"
    ).read_bytes()
    assert quality(tmp_path / "served") == quality(tmp_path / "in_process")


def test_record_then_replay_with_the_server_stopped_is_byte_identical(tmp_path, reference):
    cassette = tmp_path / "exp05.cassette.jsonl"
    record = ["system.mode=record", f"system.cassette={cassette}"]
    with served("variant=exp05") as (url, _):
        system_run(tmp_path, tmp_path / "recorded", url, "exp05", *record)
    assert health(url) is None  # stopped: nothing answers there any more
    replay = ["system.mode=replay", f"system.cassette={cassette}"]
    system_run(tmp_path, tmp_path / "replayed", url, "exp05", *replay)
    for run in ("recorded", "replayed"):
        assert (tmp_path / run / "run.trec").read_bytes() == (reference / "run.trec").read_bytes()
        assert (tmp_path / run / "cassette.jsonl").read_bytes() == cassette.read_bytes()  # a run artifact
    assert quality(tmp_path / "replayed") == quality(reference)
    system = json.loads((tmp_path / "replayed" / "metrics.json").read_text())["system"]
    assert system["mode"] == "replay" and system["cassette"]["answered_live"] == 0 and system["requests"] == 0
    # A cassette lacking a query is an error naming it (exit 2), not a silent zero.
    lines = cassette.read_text().splitlines(keepends=True)
    last_search = max(i for i, line in enumerate(lines) if json.loads(line)["op"] == "search")
    missing = json.loads(lines[last_search])["request"]["query_id"]
    cassette.write_text("".join(lines[:last_search] + lines[last_search + 1 :]))
    proc = system_run(tmp_path, tmp_path / "missed", url, "exp05", *replay, check=False)
    assert proc.returncode == 2 and f"replay miss: query {missing}" in proc.stderr


def test_sigkill_mid_run_then_resume_asks_only_the_missing_queries_and_ingests_nothing_twice(
    tmp_path, reference
):
    state, cassette, port = tmp_path / "state", tmp_path / "c.jsonl", free_port()
    record = [
        "system.mode=record",
        f"system.cassette={cassette}",
        "system.concurrency=1",
        "system.adapter.retries=2",
        "system.adapter.backoff_s=0.05",
    ]
    args = ["variant=exp05", "--state-dir", str(state)]
    with served(*args, "--search-delay-ms", "150", port=port) as (url, server):
        run = subprocess.Popen(
            [sys.executable, "-m", "experiments.run", "variant=system", "variant.name=exp05",
             f"system.base_url={url}", *record, f"hydra.run.dir={tmp_path / 'killed'}", "tracking=none",
             f"cache_dir={tmp_path / 'cache'}", "progress=false"],
            cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 300
        while not cassette.exists() or cassette.read_text().count('"op":"search"') < 5:
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()
            time.sleep(0.05)
        server.send_signal(signal.SIGKILL)
        server.wait()
        _, err = run.communicate(timeout=300)
    assert run.returncode != 0 and "unreachable" in err
    asked_before = cassette.read_text().count('"op":"search"')
    assert 5 <= asked_before < 25
    with served(*args, port=port) as (url, _):
        before = health(url)["counts"]
        assert before["ingested"] == SPARK_MEMORIES  # the killed service kept what it stored
        system_run(tmp_path, tmp_path / "resumed", url, "exp05", *record)
        after = health(url)["counts"]
    assert after["ingested"] == SPARK_MEMORIES  # no memory stored twice, across the kill
    assert after["searches"] == 25 - asked_before  # only the missing queries were asked again
    assert (tmp_path / "resumed" / "run.trec").read_bytes() == (reference / "run.trec").read_bytes()
    assert quality(tmp_path / "resumed") == quality(reference)


def test_a_429_storm_gives_the_same_results_with_the_retries_counted(tmp_path, reference):
    storm = ["--reject-fraction", "0.5", "--retry-after", "0"]
    with served("variant=exp05", *storm) as (url, _):
        system_run(tmp_path, tmp_path / "run", url, "exp05", "system.adapter.retries=20")
        counts = health(url)["counts"]
    assert (tmp_path / "run" / "run.trec").read_bytes() == (reference / "run.trec").read_bytes()
    assert quality(tmp_path / "run") == quality(reference)
    system = json.loads((tmp_path / "run" / "metrics.json").read_text())["system"]
    assert system["rate_limited"] > 0 and system["retries"] == system["rate_limited"]
    assert system["errors"] == 0 and counts["ingested"] == SPARK_MEMORIES


def test_a_service_down_at_start_exits_2_before_any_work(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    proc = system_run(tmp_path, tmp_path / "run", url, "system", check=False)
    assert proc.returncode == 2
    assert f"{url} is not reachable" in proc.stderr
    assert "suite spark25" not in proc.stdout  # refused before the suite was read
    assert not (tmp_path / "run").exists()


def test_a_live_sweep_of_a_served_flag_gives_a_parent_5_children_and_a_holm_report(tmp_path, exp05_server):
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sweep_dir = tmp_path / "sweep"
    weights = "0,0.1,0.2,0.35,0.5"
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.run", "-m", "variant=system", f"system.base_url={exp05_server}",
         f"system.override.instructionBoostWeight={weights}", f"hydra.sweep.dir={sweep_dir}",
         f"tracking.tracker.uri={uri}", "tracking.tracker.experiment=live", f"cache_dir={tmp_path / 'cache'}",
         "progress=false"],
        cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    client = mlflow.MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("live").experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and len(children) == 5
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parents[0].info.run_id}
    sent = sorted(c.data.params["system.override.instructionBoostWeight"] for c in children)
    assert sent == sorted(weights.split(","))
    assert all("system.latency_ms_p50" in c.data.metrics for c in children)
    # Which service answered, and what varied (MLflow's run name).
    assert {c.data.tags["memeval.system.base_url"] for c in children} == {exp05_server}
    assert {c.data.tags["memeval.system.config"] for c in children} == {"memeval_serve"}
    assert {c.data.tags["memeval.system.served.variant"] for c in children} == {"exp05"}  # from /health
    names = sorted(c.info.run_name for c in children)
    assert names == sorted(f"system instructionBoostWeight={w}" for w in weights.split(","))
    report = subprocess.run(
        [sys.executable, "-m", "experiments.compare", "--name", "live_sweep",
         "--out-root", str(tmp_path / "reports"), "--sweep-dir", str(sweep_dir), "--tracking-uri", uri],
        cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-3000:]
    text = (tmp_path / "reports" / "live_sweep" / "report.md").read_text()
    assert "Holm" in text


def test_the_gate_on_replayed_runs_passes_the_same_system_and_fails_a_worsened_one(tmp_path):
    runs = {}
    for variant in ("hybrid", "bm25"):  # bm25: the served hybrid with its dense channel removed
        cassette = tmp_path / f"{variant}.jsonl"
        with served(f"variant={variant}") as (url, _):
            system_run(tmp_path, tmp_path / f"{variant}-rec", url, "system", "system.mode=record",
                       f"system.cassette={cassette}")  # fmt: skip
        for repeat in ("a", "b"):
            runs[variant, repeat] = tmp_path / f"{variant}-replay-{repeat}"
            system_run(tmp_path, runs[variant, repeat], url, "system", "system.mode=replay",
                       f"system.cassette={cassette}")  # fmt: skip

    def gate(run_dir: Path, *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "experiments.gate", "live_spark25", "system", "--run-dir", str(run_dir),
             "--baseline-dir", str(tmp_path / "baselines"), *extra],
            cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600,
        )  # fmt: skip

    refreshed = gate(runs["hybrid", "a"], "--refresh")
    assert refreshed.returncode == 0, refreshed.stdout[-2000:] + refreshed.stderr[-2000:]
    same = gate(runs["hybrid", "b"])
    assert same.returncode == 0, same.stdout[-2000:] + same.stderr[-2000:]
    worse = gate(runs["bm25", "a"])
    assert worse.returncode == 1, worse.stdout[-2000:] + worse.stderr[-2000:]
