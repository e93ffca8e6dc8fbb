"""The console, quiet but never silent: with `progress=false` a run says where it is at least every
MEMEVAL_PROGRESS_EVERY_S seconds (measured in real time on a cold run), with no library bar; a report
read from MLflow prints no download bars and no numpy warning; the study report that MLflow shows has
its figures."""

from __future__ import annotations

import base64
import io
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from experiments.configure.check import ConfigError
from experiments.run.phase_lines import ENV, PhaseLines, every_s_from_env
from retrieval import progress
from tests.support import CACHE_DIR, REPO

BIN = Path(sys.executable).parent
PHASE_LINE = re.compile(r"^\[memeval \d+(m\d\ds|s)\] (?P<phase>.+)$")


def test_phase_lines_repeat_the_latest_phase_at_the_interval():
    out = io.StringIO()
    with PhaseLines(every_s=0.2, stream=out) as told:
        told("index dense")
        with progress.reporting_to(told):
            progress.phase("encode documents", 0, 1024)  # what the encoder says inside the pipeline
            time.sleep(0.05)
            progress.phase("encode documents", 512, 1024)
        time.sleep(1.0)
    text = out.getvalue()
    lines, summary = text.split("[memeval] where the time went")  # after a run of 1 s, at 0.2 s lines
    lines = lines.splitlines()
    assert len(lines) >= 3
    assert all(PHASE_LINE.match(line) for line in lines)
    assert re.fullmatch(r"encode documents 512/1,024 \(50%\) ETA \d+s", PHASE_LINE.match(lines[-1])["phase"])
    assert "index dense" in summary and "encode documents" in summary


def test_an_index_built_scope_by_scope_tells_its_phase_which_scope_it_is_at():
    from retrieval.retrievers.bm25 import BM25Retriever
    from retrieval.types import Corpus, Memory

    memories = tuple(
        Memory(id=f"m{c}-{i}", text=f"note {i} of chat {c}", scope={"conversation": str(c)})
        for c in range(3) for i in range(4)
    )  # fmt: skip
    told: list[tuple] = []
    with progress.reporting_to(lambda *said: told.append(said)):
        progress.phase("index bm25")  # the pipeline names the phase; the index only counts scopes
        BM25Retriever().build(Corpus(memories))
    assert told == [("index bm25", None, None, None), *(("index bm25", k, 3, (k + 1, 3)) for k in range(3))]
    progress.phase("search")  # outside the block again: nothing installed, nothing told
    assert len(told) == 4


def test_a_short_run_prints_no_phase_line():
    out = io.StringIO()
    with PhaseLines(every_s=30, stream=out) as told:
        told("search", 1, 2)
    assert out.getvalue() == ""


def test_phase_outside_a_run_does_nothing():
    progress.phase("encode documents", 1, 2)  # no callback installed: no error, nothing printed


def test_library_bars_are_off_inside_a_run_without_bars_and_as_they_were_after():
    from transformers.utils import logging as hf_logging

    assert hf_logging.is_progress_bar_enabled()
    with progress.library_bars(False):
        assert not hf_logging.is_progress_bar_enabled()  # transformers' "Loading weights" bar
    assert hf_logging.is_progress_bar_enabled()
    with progress.library_bars(True):
        assert hf_logging.is_progress_bar_enabled()


def test_library_bars_import_no_transformers_and_a_model_loaded_in_the_block_has_its_bars_off():
    """A run with no model (bm25) does not import transformers (~0.8 s of CPU) to switch its bars off; one
    that loads a model in the block gets them off all the same, and on again after."""
    code = """
import sys
from retrieval import progress
with progress.library_bars(False):
    assert "transformers" not in sys.modules
    from transformers.utils import logging as hf_logging
    assert not hf_logging.is_progress_bar_enabled()
assert hf_logging.is_progress_bar_enabled()
from huggingface_hub import utils as hub
assert not hub.are_progress_bars_disabled()
print("ok")
"""
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan"])
def test_a_bad_interval_is_a_config_error_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv(ENV, value)
    with pytest.raises(ConfigError, match=ENV):
        every_s_from_env()


def _timed_lines(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, list[tuple[float, str]]]:
    """Run a command; every line of its stdout and stderr with the time it arrived."""
    proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[tuple[float, str]] = []

    def read(stream):
        for line in stream:
            lines.append((time.monotonic(), line.rstrip("\n")))

    readers = [threading.Thread(target=read, args=(s,)) for s in (proc.stdout, proc.stderr)]
    for reader in readers:
        reader.start()
    code = proc.wait(timeout=900)
    for reader in readers:
        reader.join()
    return code, sorted(lines)


@pytest.mark.slow  # a cold dense run on spark25: its memories are encoded again (a fresh embedding cache)
def test_a_cold_run_without_bars_prints_a_phase_line_at_every_interval(tmp_path):
    every = 2.0
    env = {**os.environ, ENV: str(every), "HF_HUB_OFFLINE": "1"}
    code, lines = _timed_lines(
        [str(BIN / "memeval-run"), "variant=dense", "progress=false", "tracking=none",
         f"cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}"],
        tmp_path, env,
    )  # fmt: skip
    text = "\n".join(line for _, line in lines)
    assert code == 0, text[-3000:]
    phase = [(t, m["phase"]) for t, line in lines if (m := PHASE_LINE.match(line))]
    assert any(re.fullmatch(r"encode documents [\d,]+/[\d,]+ \(\d+%\)( ETA \S+)?", p) for _, p in phase), text
    # Never silent for long: from the first phase line to the results table, no gap much over the
    # interval (slack for a loaded 2-core machine; without the lines the gap is the whole run).
    end = next(t for t, line in lines if line.startswith("overall"))
    times = [t for t, _ in phase] + [end]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert max(gaps) <= every + 3, (gaps, text)
    # No library bar either (transformers' "Loading weights", sentence-transformers' "Batches").
    assert "Loading weights" not in text and "Batches" not in text and "it/s]" not in text, text


@pytest.mark.slow  # a 3-point tracked sweep into a new SQLite store (~10 s to create), then its report
def test_a_report_from_mlflow_prints_no_download_bar_or_numpy_warning(tmp_path, monkeypatch):
    import mlflow

    from experiments.study.cli import _log_report

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", ENV)}
    env["HF_HUB_OFFLINE"] = "1"
    env.pop("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", None)  # memeval's default, not the test's
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sweep = subprocess.run(
        [str(BIN / "memeval-run"), "-m", "variant=exp05", "stage.instruction_boost.weight=0,0.2,0.35",
         "progress=false", f"cache_dir={tmp_path / 'cache'}", f"encoder.cache_dir={CACHE_DIR / 'embeddings'}",
         f"tracking.tracker.uri={uri}", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
        cwd=tmp_path, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    report = subprocess.run(
        [str(BIN / "memeval-report"), "--name", "sweep", "--sweep-dir", str(tmp_path / "sweep"),
         "--out-root", str(tmp_path / "reports")],
        cwd=tmp_path, env=env, capture_output=True, text=True,
    )  # fmt: skip
    said = report.stdout + report.stderr
    assert report.returncode == 0, said[-3000:]
    assert "Downloading artifacts" not in said, said
    assert "All-NaN" not in said and "RuntimeWarning" not in said, said
    # What the user should know (spark25's queries are one cluster: statistics by query) is one line, once.
    assert said.count("in one cluster") <= 1 and "table = compare(" not in said, said

    # docs/metrics.md's search syntax: the MLflow key finds the runs, the printed name none, silently.
    client = mlflow.MlflowClient(tracking_uri=uri)
    eid = client.get_experiment_by_name("memeval").experiment_id
    assert len(client.search_runs([eid], "metrics.nDCG_at_10 >= 0")) == 3
    assert len(client.search_runs([eid], "metrics.`category.code_editing.nDCG_at_10` >= 0")) == 3
    assert client.search_runs([eid], "metrics.`nDCG@10` >= 0") == []

    # A parent all of whose jobs were answered by the sweep's finished runs (a study of the same weights
    # in the same experiment: resume finds them in MLflow) does not end before it started.
    from experiments.run.resume import REUSED_TAG_PREFIX
    from experiments.track.mlflow_tracker import finish_parent

    (parent,) = client.search_runs([eid], "tags.`memeval.sweep_key` != ''")
    children = client.search_runs([eid], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    later = client.create_run(
        eid,
        run_name="study",
        tags={f"{REUSED_TAG_PREFIX}{c.info.run_id[:8]}": c.info.run_id for c in children},
    )
    finish_parent(uri, later.info.run_id, status="FINISHED", objective="nDCG@10")
    info = client.get_run(later.info.run_id).info
    assert info.end_time >= info.start_time > max(c.info.end_time for c in children)

    # The report as MLflow shows it (under the parent, as memeval-study logs a study's): every figure
    # inline, the same bytes as the PNG beside report.md.
    folder = tmp_path / "reports" / "sweep"
    _log_report(parent.info.run_id, uri, folder)
    logged = Path(client.download_artifacts(parent.info.run_id, "report/index.html", str(tmp_path / "dl")))
    sources = re.findall(r'<img src="([^"]+)"', logged.read_text())
    pngs = sorted(p.name for p in folder.glob("*.png"))
    assert sources and len(sources) == len(re.findall(r"<img ", (folder / "index.html").read_text()))
    assert all(s.startswith("data:image/png;base64,") for s in sources)
    inlined = {base64.b64decode(s.split(",", 1)[1]) for s in sources}
    assert inlined == {(folder / n).read_bytes() for n in pngs}
    # What is written beside report.md keeps its relative sources (each figure stored once).
    assert 'src="data:' not in (folder / "index.html").read_text()


def test_the_mlflow_names_in_docs_metrics_are_the_logged_ones():
    """Every key in docs/metrics.md's MLflow table is one memeval logs for the printed names beside it."""
    from experiments.track.mlflow_tracker import mlflow_metric_names

    doc = (REPO / "docs" / "metrics.md").read_text()
    table = doc.split("## The same metrics in MLflow", 1)[1].split("\n\n")[2]
    rows = [line.split("|")[1:3] for line in table.splitlines()[2:]]
    assert len(rows) >= 8
    printed = {"P@5", "R@10", "R_all@10", "hit@10", "noise@5", "nDCG@10", "RR", "RR@10", "AP", "AP@100",
               "P(rel=2)@5", "latency_ms_p50", "latency_ms_p95"}  # fmt: skip
    summary = {
        "overall": dict.fromkeys(printed, 0.5),
        "overall_ci95": {"nDCG@10": [0.4, 0.6]},
        "by_label": {
            "ability": {"instruction_following": {"nDCG@10": 0.5}},
            "category": {"C++ & tools": {"P@5": 0.2}},
        },
        "scope_leaks": 0,
        "resource": {"peak_rss_mb": 812.5},
    }
    logged = mlflow_metric_names(summary)
    for left, right in rows:
        keys = re.findall(r"`([^`]+)`", right.split("(")[0])
        assert keys and all(k in logged for k in keys), (left, keys)
        names = [n for n in re.findall(r"`([^`]+)`", left) if n in printed]
        if len(names) == len(keys):  # each key is its name's (under a label's), in order
            assert [logged[k].rsplit(".", 1)[-1] for k in keys] == names


def test_a_run_with_no_query_does_not_say_its_latency_was_reused_from_cache():
    """Issue 41: an empty shard (its scopes hold no query) said "reused from cache"; nothing was."""
    import dataclasses

    from experiments.evaluate.table import evaluate
    from experiments.run.console import latency_text
    from retrieval.pipeline import Pipeline
    from retrieval.retrievers.bm25 import BM25Retriever
    from tests.support import tiny_suite

    suite = tiny_suite()
    for queries, expected in ((), "no query to time"), (suite.queries, "latency ms p50"):
        part = dataclasses.replace(suite, queries=queries, qrels=suite.qrels if queries else {})
        output = Pipeline((BM25Retriever(),), depth=10).run(part.memories, part.queries, progress=False)
        said = latency_text(evaluate(part, output, ["P@5"]).metrics)
        assert said.startswith(expected) and "cache" not in said, said


def test_a_live_http_clients_request_lines_are_not_printed(capsys):
    """Issue 41: Chroma runs printed every httpx request (INFO); the run's logging keeps httpx to warnings."""
    import logging
    import logging.config

    from omegaconf import OmegaConf

    from experiments.configure.compose import compose_config

    cfg = compose_config(["variant=system", "system=chroma"], hydra_node=True)
    setup = OmegaConf.to_container(cfg.hydra.job_logging)  # as a job sets it up, but for its log file
    setup["handlers"].pop("file")
    setup["root"]["handlers"] = [h for h in setup["root"]["handlers"] if h != "file"]
    logging.config.dictConfig(setup)
    logging.getLogger("httpx").info('HTTP Request: POST http://127.0.0.1/api "HTTP/1.1 200 OK"')
    logging.getLogger("httpx").warning("a refused connection")
    said = capsys.readouterr()
    assert "HTTP Request" not in said.out + said.err and "a refused connection" in said.out + said.err


@pytest.mark.slow
def test_a_sweep_jobs_statistics_warning_is_one_line_in_a_joblib_worker(tmp_path):
    """Issue 41: the one-cluster warning came out of joblib's workers as a raw UserWarning with its source
    line; a sweep's job says it as the console script does, one `warning:` line."""
    import dataclasses

    from experiments.suites.jsonl import save_suite
    from tests.support import tiny_suite

    suite = tiny_suite()
    one = dataclasses.replace(  # one scope: its two queries are one cluster, so statistics fall back
        suite,
        name="one_scope",
        memories=tuple(m for m in suite.memories if m.scope["conversation"] == "c1"),
        queries=tuple(q for q in suite.queries if q.scope["conversation"] == "c1"),
        qrels={q: r for q, r in suite.qrels.items() if q.startswith("c1:")},
    )
    save_suite(one, tmp_path / "suite")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MLFLOW_TRACKING_URI": ""}
    done = subprocess.run(
        [sys.executable, "-m", "experiments.run", "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
         "suite=jsonl", f"suite.path={tmp_path / 'suite'}", "variant=bm25", "stage.bm25.k1=1.2,1.5",
         "tracking=none", "progress=false", f"cache_dir={tmp_path / 'cache'}",
         f"hydra.sweep.dir={tmp_path / 'sweep'}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-3000:]
    assert "warning: all 2 queries are in one cluster (conversation=c1)" in said, said[-3000:]
    assert "UserWarning" not in said and "warn_once(" not in said, said[-3000:]
