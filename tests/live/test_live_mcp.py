"""The MCP adapter against memeval-serve's MCP face (experiments/systems/mcp.py, serve/mcp_app.py).

Parity is the specification: a variant served over MCP and scored through the MCP adapter gives the
in-process run's run.trec byte for byte and the same metrics, over stdio (the adapter starts
`memeval-serve --mcp stdio` itself) and over streamable HTTP (`memeval-serve --mcp http`, started here
and stopped by the test; its wait is bounded). The adapter's own contract is checked on the tiny suite:
suite ids back, scopes apart, a refused request named, a server that is not there an error at start.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra.utils import instantiate

from experiments.configure.compose import compose_config
from experiments.run.app import run_experiment
from experiments.systems.mcp import McpSystem
from experiments.systems.protocol import LiveSystemError, MemorySystem, SearchRequest
from retrieval.stage import FieldError
from tests.support import CACHE_DIR, REPO, tiny_suite

EMBEDDINGS = str(CACHE_DIR / "embeddings")
SERVED = ["variant=hybrid", f"encoder.cache_dir={EMBEDDINGS}", "progress=false"]
QUALITY = tuple(compose_config(["tracking=none"]).metrics)  # every metric a run computes by default


def _run(overrides: list[str], run_dir: Path) -> dict:
    cfg = compose_config(["tracking=none", "progress=false", *overrides])
    run_experiment(cfg, run_dir)
    return json.loads((run_dir / "metrics.json").read_text())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _assert_same_run(live_dir: Path, metrics: dict, reference_dir: Path, reference: dict) -> None:
    assert (live_dir / "run.trec").read_bytes() == (reference_dir / "run.trec").read_bytes()
    for name in QUALITY:
        assert metrics["overall"][name] == reference["overall"][name], name
    assert metrics["by_label"] == reference["by_label"]
    system = metrics["system"]
    assert system["unknown_ids"] == metrics["scope_leaks"] == system["errors"] == 0
    assert system["n_queries"] == metrics["n_queries"] and system["latency_ms_p50"] > 0


@pytest.fixture(scope="module")
def in_process(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("in_process")
    return run_dir, _run(
        [
            "suite=spark25",
            "variant=hybrid",
            f"cache_dir={run_dir / 'cache'}",
            f"encoder.cache_dir={EMBEDDINGS}",
        ],
        run_dir,
    )


@pytest.mark.slow
def test_a_variant_served_over_mcp_stdio_scores_exactly_as_in_process(in_process, tmp_path):
    reference_dir, reference = in_process
    args = "[" + ",".join(f"'{a}'" for a in SERVED) + "]"  # quoted: each item holds an `=`
    metrics = _run(
        [
            "suite=spark25",
            "variant=system",
            "system=mcp_memeval_serve",
            f"system.adapter.args={args}",
            "variant.name=hybrid",  # run.trec's tag column is the variant's name
            f"cache_dir={tmp_path / 'cache'}",
        ],
        tmp_path,
    )
    _assert_same_run(tmp_path, metrics, reference_dir, reference)


@pytest.mark.slow
def test_recorded_over_mcp_then_replayed_with_no_server_is_byte_identical(in_process, tmp_path):
    reference_dir, reference = in_process
    cassette = tmp_path / "mcp.cassette.jsonl"
    args = "[" + ",".join(f"'{a}'" for a in SERVED) + "]"
    common = ["suite=spark25", "variant=system", "system=mcp_memeval_serve", "variant.name=hybrid"]
    _run(
        [
            *common,
            f"system.adapter.args={args}",
            "system.mode=record",
            f"system.cassette={cassette}",
            f"cache_dir={tmp_path / 'cache_rec'}",
        ],
        tmp_path / "record",
    )
    # No server can start: the command does not exist, so every answer must come from the cassette.
    metrics = _run(
        [
            *common,
            "system.adapter.command=[/nonexistent/mcp-server]",
            "system.adapter.args=[]",
            "system.mode=replay",
            f"system.cassette={cassette}",
            f"cache_dir={tmp_path / 'cache_rep'}",
        ],
        tmp_path / "replay",
    )
    assert (tmp_path / "replay" / "run.trec").read_bytes() == (reference_dir / "run.trec").read_bytes()
    assert metrics["system"]["cassette"]["answered_live"] == 0
    # every search, and the reset, ingest and count of each scope
    assert metrics["system"]["cassette"]["answered_from_cassette"] > metrics["n_queries"]
    assert metrics["overall"]["nDCG@10"] == reference["overall"]["nDCG@10"]


@pytest.mark.slow
def test_beam_100k_conversation_1_over_mcp_stdio_scores_exactly_as_in_process(beam_100k, tmp_path):
    suite = ["suite=beam", f"suite.path={beam_100k / '1'}", f"encoder.cache_dir={EMBEDDINGS}"]
    reference = _run(
        [*suite, "variant=hybrid", f"cache_dir={tmp_path / 'cache_in'}"], tmp_path / "in_process"
    )
    served = "[" + ",".join(f"'{a}'" for a in SERVED) + "]"
    metrics = _run(
        [
            *suite,
            "variant=system",
            "system=mcp_memeval_serve",
            f"system.adapter.args={served}",
            "variant.name=hybrid",
            f"cache_dir={tmp_path / 'cache_mcp'}",
        ],
        tmp_path / "mcp",
    )
    _assert_same_run(tmp_path / "mcp", metrics, tmp_path / "in_process", reference)


@pytest.fixture
def http_server(tmp_path):
    port = _free_port()
    log = open(tmp_path / "server.log", "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "experiments.serve.cli", "--mcp", "http", "--port", str(port), *SERVED],
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    try:
        deadline = time.monotonic() + 120  # the server loads the encoder before it listens
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None, (tmp_path / "server.log").read_text()[-2000:]
                assert time.monotonic() < deadline, "memeval-serve --mcp http did not listen within 120 s"
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=20)
        log.close()


@pytest.mark.slow
def test_a_variant_served_over_mcp_http_scores_exactly_as_in_process(in_process, http_server, tmp_path):
    reference_dir, reference = in_process
    metrics = _run(
        [
            "suite=spark25",
            "variant=system",
            "system=mcp_memeval_serve_http",
            f"system.adapter.url={http_server}",
            "variant.name=hybrid",
            f"cache_dir={tmp_path / 'cache'}",
        ],
        tmp_path,
    )
    _assert_same_run(tmp_path, metrics, reference_dir, reference)


@pytest.fixture(scope="module")
def dense_over_stdio():
    cfg = compose_config(["tracking=none", "variant=system", "system=mcp_memeval_serve"])
    cfg.system.adapter.args = ["variant=dense", f"encoder.cache_dir={EMBEDDINGS}", "progress=false"]
    system = instantiate(cfg.system.adapter)
    yield system
    system.close()


@pytest.mark.slow
def test_the_adapter_returns_suite_ids_within_scope_and_names_refusals(dense_over_stdio):
    system = dense_over_stdio
    assert isinstance(system, MemorySystem)
    system.check_available()
    suite = tiny_suite()
    for name in ("c1", "c2"):
        scope = {"conversation": name}
        memories = [m for m in suite.memories if m.scope["conversation"] == name]
        system.reset(scope)
        system.ingest(scope, memories)
        system.ingest(scope, memories)  # a retried ingest: the server refuses ids it holds
        assert system.wait_until_searchable(scope, memories) >= 0
    for q in suite.queries:
        hits = system.search(SearchRequest(query_id=q.id, text=q.text, scope=q.scope, k=5))
        assert sorted(h.id for h in hits) == sorted(f"{q.scope['conversation']}:{i}" for i in range(5))
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        if q.id in suite.qrels:
            assert hits[0].id in suite.qrels[q.id]
    bad = SearchRequest(query_id="q9", text="x", scope={"conversation": "c1"}, k=3, overrides={"nope": 1})
    before = system.stats.snapshot()["errors"]
    with pytest.raises(LiveSystemError, match=r"query q9: tool 'search' answered an error: .*'nope'"):
        system.search(bad)
    assert system.stats.snapshot()["errors"] == before + 1
    # A result mapping that does not fit the answer names the query and the JSON path.
    misread = dataclasses.replace(system, results={"hits": "results", "id": "memory_id"})  # its own server
    try:
        query = suite.queries[0]
        misread.ingest(query.scope, [m for m in suite.memories if m.scope == query.scope])
        with pytest.raises(LiveSystemError, match=rf"query {query.id}, result 0: JSON path 'memory_id'"):
            misread.search(SearchRequest(query_id=query.id, text=query.text, scope=query.scope, k=3))
    finally:
        misread.close()


def test_a_server_that_is_not_there_is_an_error_at_start():
    system = McpSystem(
        transport="http",
        url=f"http://127.0.0.1:{_free_port()}/mcp",
        tools={"search": {"tool": "search"}, "ingest": {"tool": "ingest"}},
        connect_timeout_s=20,
    )
    started = time.monotonic()
    with pytest.raises(LiveSystemError, match="not reachable"):
        system.check_available()
    assert time.monotonic() - started < 20
    system.close()


def test_a_bad_adapter_config_names_each_field():
    with pytest.raises(FieldError) as err:
        McpSystem(transport="stdio", tools={"search": {"name": "s"}, "forget": {"tool": "f"}}, timeout_s=0)
    problems = dict(err.value.problems)
    assert sorted(problems) == ["command", "timeout_s", "tools.forget", "tools.ingest", "tools.search"]
    assert problems["tools.ingest"] == "required" and problems["timeout_s"] == "must be > 0, got 0"
    assert problems["tools.forget"].startswith("not an operation")
