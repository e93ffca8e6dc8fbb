"""Where a long run is and where its time went: per-phase lines with an ETA and, over queries, the scope
(conversation k/n) the current one is in; a phase clock whose summary and metrics.json `timings` name every
phase; the run's peak memory in metrics.json (`resource.peak_rss_mb`) and in its MLflow run. Structure, not
timings: what a line says and which phases are named, never how long they took."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time

import mlflow
import pytest

from experiments.run.phase_lines import PhaseLines
from retrieval.pipeline import Pipeline
from retrieval.retrievers.bm25 import BM25Retriever
from tests.support import CACHE_DIR, tiny_suite

LINE = re.compile(
    r"^\[memeval \d+(m\d\ds|s)\] (?P<phase>[a-z_ 0-9.]+?)"
    r"(?: (?P<done>[\d,]+)/(?P<total>[\d,]+) \(\d+%\))?(?: scope (?P<k>\d+)/(?P<n>\d+))?"
    r"(?: ETA (?P<eta>\S+))?$"
)


def test_a_phase_over_queries_tells_each_querys_scope_among_all():
    suite = tiny_suite()  # two scopes, two queries each
    heard: list[tuple] = []
    Pipeline((BM25Retriever(),), depth=10).run(
        suite.memories, suite.queries, progress=False, on_phase=lambda *told: heard.append(told)
    )
    search = [told for told in heard if told[0] == "search"]
    assert [(done, total, scope) for _, done, total, scope in search] == [
        (0, 4, (1, 2)), (1, 4, (1, 2)), (2, 4, (2, 2)), (3, 4, (2, 2)),
    ]  # fmt: skip
    assert [told[0] for told in heard][:2] == ["ingest", "index bm25"]


def test_a_line_names_the_phase_its_units_its_scope_and_an_eta():
    lines = PhaseLines(every_s=60)
    lines("search", 0, 40, (1, 10))
    time.sleep(0.05)
    lines("search", 10, 40, (3, 10))
    match = LINE.match(lines.line())
    assert match, lines.line()
    told = (match["phase"], match["done"], match["total"], match["k"], match["n"])
    assert told == ("search", "10", "40", "3", "10")
    assert re.fullmatch(r"\d+(m\d\ds|s)", match["eta"])
    lines("rank boost", 40, 80, (1, 10))  # a phase that starts part-way: no rate yet, no ETA
    assert "ETA" not in lines.line()
    time.sleep(0.05)
    lines("rank boost", 60, 80, (5, 10))  # its rate is of its own units: 20 in the time since it began
    assert LINE.match(lines.line())["eta"]
    lines("index bm25")  # a phase without units: no count, no scope, no ETA
    assert LINE.match(lines.line())["phase"] == "index bm25" and "ETA" not in lines.line()


def test_the_clock_sums_each_phase_and_the_summary_names_every_one_with_its_share():
    out = io.StringIO()
    with PhaseLines(every_s=0.01, stream=out, quiet=True) as told:  # quiet: no lines, still clocked
        for name in ("ingest", "encode documents", "index dense", "encode documents", "search", "metrics"):
            told(name, 1, 2)
            time.sleep(0.02)
    spent = told.timings()
    assert list(spent) == ["start", "ingest", "encode documents", "index dense", "search", "metrics"]
    assert spent["encode documents"] >= 0.04  # its two stretches summed
    summary = out.getvalue().splitlines()
    assert summary[0].startswith("[memeval] where the time went")
    row = re.compile(r"(?P<phase>.+?)\s+(?P<s>[\d.]+) s\s+(?P<share>[\d.]+)%")
    rows = [row.fullmatch(line) for line in summary[1:]]
    assert all(rows) and {r["phase"] for r in rows} == set(spent)
    assert sum(float(r["share"]) for r in rows) == pytest.approx(100, abs=0.5)


def test_a_failed_run_ends_with_its_error_not_a_summary():
    out = io.StringIO()
    with pytest.raises(RuntimeError), PhaseLines(every_s=0.01, stream=out, quiet=True) as told:
        told("search", 0, 2)
        time.sleep(0.02)
        raise RuntimeError("the index is gone")
    assert out.getvalue() == ""


def test_a_run_writes_its_peak_memory_and_phase_times_and_logs_the_memory_to_mlflow(tmp_path):
    """A tracked bm25 run on spark25 into a fresh SQLite store, with a phase line every 0.05 s."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**os.environ, "MLFLOW_TRACKING_URI": "", "MEMEVAL_PROGRESS_EVERY_S": "0.05", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.run", "variant=bm25", "progress=false",
         f"tracking.tracker.uri={uri}", "tracking.tracker.experiment=resource",
         f"cache_dir={tmp_path / 'cache'}", f"encoder.cache_dir={CACHE_DIR / 'embeddings'}",
         f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=900, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    peak = metrics["resource"]["peak_rss_mb"]
    assert peak > 50  # a Python process with numpy and the suite loaded: tens of MB at least
    assert {"load suite", "ingest", "index bm25", "search", "metrics"} <= set(metrics["timings"])
    # named for what they do, not counted as loading the suite (issue 41)
    assert {"check MLflow store", "run version"} <= set(metrics["timings"])
    assert all(seconds >= 0 for seconds in metrics["timings"].values())
    client = mlflow.MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("resource").experiment_id])
    assert run.data.metrics["resource.peak_rss_mb"] == pytest.approx(peak)
    lines = [m for line in proc.stderr.splitlines() if (m := LINE.match(line))]
    assert lines, proc.stderr[-3000:]  # at one line per 0.05 s, a run of seconds prints some
    assert "[memeval] where the time went" in proc.stderr


def test_a_live_service_ingesting_or_indexing_is_told_per_scope_and_shown_with_the_bars_on():
    """Issue 41: minutes of a service ingesting or indexing showed nothing on the client's console."""
    from experiments.serve.service import MemoryService
    from experiments.systems.retriever import SystemRetriever
    from tests.live.test_live_system import ServiceSystem

    suite = tiny_suite()  # two scopes of five memories
    heard: list[tuple] = []
    system = ServiceSystem(MemoryService.from_overrides(["variant=bm25", "tracking=none"]))
    Pipeline((SystemRetriever(system=system),), depth=10).run(
        suite.memories, suite.queries, progress=False, on_phase=lambda *told: heard.append(told)
    )
    service = [told for told in heard if told[0].startswith("service")]
    assert service == [
        ("service ingest", 0, 10, (1, 2)), ("service index (wait until searchable)", 0, 10, (1, 2)),
        ("service ingest", 5, 10, (2, 2)), ("service index (wait until searchable)", 5, 10, (2, 2)),
    ]  # fmt: skip
    out = io.StringIO()
    with PhaseLines(every_s=0.01, stream=out, quiet=True) as told:  # the bars are on
        told("encode documents", 1, 4)
        time.sleep(0.1)
        told("service ingest", 5, 10, (2, 2))
        time.sleep(0.1)
    lines = [m for line in out.getvalue().splitlines() if (m := LINE.match(line))]
    assert lines and all(m["phase"] == "service ingest" and m["k"] == "2" for m in lines), out.getvalue()
