"""A live memory system as a retrieval channel, in process (no server): SystemRetriever over a real
MemoryService, the cassette (record, replay, torn tail, miss), and the HTTP adapter against small stdlib
servers that misbehave on purpose (malformed answer, hang, 429 with Retry-After, a secret header)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from experiments.configure.build import pipeline_from_config
from experiments.configure.compose import compose_config
from experiments.evaluate.table import scope_leaks
from experiments.serve.service import MemoryService, ServiceError
from experiments.suites.suite import memory_record
from experiments.systems.cassette import Cassette
from experiments.systems.http import HttpSystem
from experiments.systems.outputs import cost_section
from experiments.systems.protocol import Hit, LiveSystemError, MemorySystem, SearchRequest
from experiments.systems.retriever import SystemRetriever
from retrieval.pipeline import Pipeline
from retrieval.types import Memory, scope_key
from tests.support import tiny_suite


class ServiceSystem:
    """A MemorySystem calling a MemoryService directly (what memeval-serve does over HTTP)."""

    def __init__(self, service: MemoryService, extra: Sequence[Hit] = ()):
        self.service = service
        self.extra = list(extra)  # hits a misbehaving service would add to every answer
        self.searches = 0

    def reset(self, scope: Mapping[str, str]) -> None:
        self.service.reset(scope)

    def ingest(self, scope: Mapping[str, str], memories: Sequence[Memory]) -> None:
        self.service.ingest(scope, [memory_record(m) for m in memories])

    def wait_until_searchable(self, scope: Mapping[str, str], memories: Sequence[Memory]) -> float:
        return searchable(self.service, scope, len(memories))

    def search(self, request: SearchRequest) -> list[Hit]:
        self.searches += 1
        hits = self.service.search(
            request.text, request.scope, request.k, as_of=request.as_of, config_override=request.overrides
        )
        return self.extra + [Hit(h.id, h.score, h.text) for h in hits]

    def close(self) -> None:
        pass


def searchable(service: MemoryService, scope: Mapping[str, str], n: int) -> float:
    """Poll the service's count until its n memories are searchable (it indexes in the background)."""
    started = time.perf_counter()
    while service.count(scope) < n:
        assert time.perf_counter() - started < 60, f"scope {scope} not searchable in 60 s"
        time.sleep(0.01)
    return time.perf_counter() - started


def _bm25_service() -> MemoryService:
    return MemoryService.from_overrides(["variant=bm25", "tracking=none"])


def _system_pipeline(system: MemorySystem, **fields) -> Pipeline:
    return Pipeline((SystemRetriever(system=system, **fields),), depth=100)


def test_a_served_variant_ranks_exactly_as_the_in_process_run():
    suite = tiny_suite()
    cfg = compose_config(["variant=bm25"])
    direct = pipeline_from_config(["bm25"], cfg.stage, depth=cfg.depth).run(
        suite.memories, suite.queries, progress=False
    )
    served = _system_pipeline(ServiceSystem(_bm25_service())).run(
        suite.memories, suite.queries, progress=False
    )
    for a, b in zip(direct.ranked, served.ranked, strict=True):
        assert a.memory_ids == b.memory_ids
        assert np.array_equal(a.scores, b.scores)
    assert any(len(r.memory_ids) for r in served.ranked)


def test_unknown_ids_and_other_scopes_keep_their_rank_and_are_counted_never_silent():
    suite = tiny_suite()
    junk = [Hit("not-in-suite", 9.0), Hit("c2:0", 8.0)]  # c2:0 belongs to scope c2
    output = _system_pipeline(ServiceSystem(_bm25_service(), extra=junk)).run(
        suite.memories, suite.queries, progress=False
    )
    report = output.channel_reports["system"]
    assert report["unknown_ids"] == len(suite.queries)
    c1_queries = sum(q.scope["conversation"] == "c1" for q in suite.queries)
    # c2:0 is a leak for c1's queries only, counted once: by the run's scope_leaks (which counts an id of
    # no known memory as a leak too), not again by the channel
    leaks = scope_leaks(suite, output)
    assert int(leaks.sum()) == len(suite.queries) + c1_queries and "scope_leaks" not in report
    for r in output.ranked:  # both keep the ranks the service gave them; nothing below them moved up
        assert r.memory_ids[:2] == ("not-in-suite", "c2:0")
        assert list(r.scores[:2]) == [9.0, 8.0]
    section = cost_section(report, k=5)
    assert f"{len(suite.queries)} returned ids are not in the suite" in " ".join(section["notes"])


def test_a_live_channel_is_never_answered_from_a_cache(tmp_path):
    from retrieval.reuse import CandidateCache, ProcessMemo

    suite = tiny_suite()
    system = ServiceSystem(_bm25_service())
    pipeline = _system_pipeline(system)
    memo, cache = ProcessMemo(), CandidateCache(tmp_path)
    for _ in range(2):
        out = pipeline.run(
            suite.memories, suite.queries, suite_hash="h", cache=cache, memo=memo, progress=False
        )
        assert not out.prefix_cache_hit and out.cache["latency_measured"]
    assert system.searches == 2 * len(suite.queries)
    assert not list(tmp_path.iterdir())


def test_latency_is_each_querys_wall_time_at_the_service():
    suite = tiny_suite()

    class Slow(ServiceSystem):
        def search(self, request: SearchRequest) -> list[Hit]:
            time.sleep(0.05)
            return super().search(request)

    output = _system_pipeline(Slow(_bm25_service()), concurrency=4).run(
        suite.memories, suite.queries, progress=False
    )
    for r in output.ranked:
        assert r.timings_ms["system"] >= 50


def test_record_then_replay_gives_the_same_ranking_without_the_service(tmp_path):
    suite = tiny_suite()
    cassette = tmp_path / "c.jsonl"
    live = ServiceSystem(_bm25_service())
    recorded = _system_pipeline(live, mode="record", cassette=str(cassette)).run(
        suite.memories, suite.queries, progress=False
    )

    gone = ServiceSystem(None)  # the same adapter, with no service behind it: a replay must not ask
    replayed = _system_pipeline(gone, mode="replay", cassette=str(cassette)).run(
        suite.memories, suite.queries, progress=False
    )
    for a, b in zip(recorded.ranked, replayed.ranked, strict=True):
        assert a.memory_ids == b.memory_ids and np.array_equal(a.scores, b.scores)
    assert replayed.channel_reports["system"]["cassette"]["answered_live"] == 0


def test_a_replay_miss_names_the_query(tmp_path):
    suite = tiny_suite()
    cassette = tmp_path / "c.jsonl"
    _system_pipeline(ServiceSystem(_bm25_service()), mode="record", cassette=str(cassette)).run(
        suite.memories, suite.queries[:2], progress=False
    )
    with pytest.raises(LiveSystemError, match=f"replay miss: query {suite.queries[2].id}"):
        _system_pipeline(ServiceSystem(_bm25_service()), mode="replay", cassette=str(cassette)).run(
            suite.memories, suite.queries, progress=False
        )


def test_a_torn_last_line_is_dropped_and_a_corrupt_middle_line_is_an_error(tmp_path):
    suite = tiny_suite()
    cassette = tmp_path / "c.jsonl"
    _system_pipeline(ServiceSystem(_bm25_service()), mode="record", cassette=str(cassette)).run(
        suite.memories, suite.queries, progress=False
    )
    lines = cassette.read_bytes().splitlines(keepends=True)
    cassette.write_bytes(b"".join(lines) + lines[-1][:40])  # a kill mid-write
    loaded = Cassette(cassette, writable=True)
    assert loaded.dropped_tail and len(loaded.entries) == len(lines)
    assert cassette.read_bytes() == b"".join(lines)  # cut, so appends start clean
    broken = lines[1].replace(b'"op"', b'"oq"')
    cassette.write_bytes(lines[0] + broken + b"".join(lines[2:]))
    with pytest.raises(LiveSystemError, match=r"c.jsonl:2: cassette line is corrupt"):
        Cassette(cassette, writable=False)


def test_a_record_run_re_asks_only_what_its_cassette_lacks(tmp_path):
    suite = tiny_suite()
    cassette = tmp_path / "c.jsonl"
    service = _bm25_service()  # kept running between the two runs: it still holds every scope
    _system_pipeline(Counted(service), mode="record", cassette=str(cassette)).run(
        suite.memories, suite.queries[:2], progress=False
    )
    system = Counted(service)
    out = _system_pipeline(system, mode="record", cassette=str(cassette)).run(
        suite.memories, suite.queries, progress=False
    )
    assert system.searches == len(suite.queries) - 2 and system.ingests == 0  # checked by its count
    cassette_report = out.channel_reports["system"]["cassette"]
    assert cassette_report["answered_live"] == len(suite.queries) - 2
    asked = {scope_key(q.scope) for q in suite.queries[2:]}
    assert cassette_report["scopes_verified_by_count"] == len(asked)
    assert cassette_report["scopes_reingested"] == 0


class Counted(ServiceSystem):
    """A ServiceSystem with a `count` (as the HTTP and MCP adapters have), counting its ingests."""

    ingests = 0

    def ingest(self, scope: Mapping[str, str], memories: Sequence[Memory]) -> None:
        self.ingests += 1
        super().ingest(scope, memories)

    def count(self, scope: Mapping[str, str]) -> int:
        return self.service.count(scope)


@pytest.mark.parametrize("adapter", [ServiceSystem, Counted], ids=["without count", "with count"])
def test_a_resumed_record_run_against_a_service_that_lost_its_memories_re_ingests_never_mixes(
    tmp_path, adapter
):
    suite = tiny_suite()
    reference = _system_pipeline(ServiceSystem(_bm25_service())).run(
        suite.memories, suite.queries, progress=False
    )
    cassette = tmp_path / "c.jsonl"
    _system_pipeline(adapter(_bm25_service()), mode="record", cassette=str(cassette)).run(
        suite.memories, suite.queries[:2], progress=False
    )  # the same adapter class: a cassette is keyed by the adapter's identity
    restarted = adapter(_bm25_service())  # the service came back without its state
    out = _system_pipeline(restarted, mode="record", cassette=str(cassette)).run(
        suite.memories, suite.queries, progress=False
    )
    for a, b in zip(reference.ranked, out.ranked, strict=True):  # as if nothing had been lost
        assert a.memory_ids == b.memory_ids and np.array_equal(a.scores, b.scores)
    asked = {scope_key(q.scope) for q in suite.queries[2:]}
    assert out.channel_reports["system"]["cassette"]["scopes_reingested"] == len(asked)
    assert restarted.searches == len(suite.queries) - 2


def test_config_override_keys_map_onto_stage_fields_and_unknown_ones_are_refused():
    service = MemoryService.from_overrides(
        [
            "variant=exp05",
            "tracking=none",
            "stage.dense.enabled=false",
            "variant.stages=[instruction_tagging,bm25,instruction_boost]",
        ]
    )
    assert service._pipeline({"instructionBoostWeight": 0.5}).rank[0].weight == 0.5
    assert service._pipeline({"stage.instruction_boost.weight": 0.25}).rank[0].weight == 0.25
    with pytest.raises(ServiceError, match="nosuchKey"):
        service._pipeline({"nosuchKey": 1})
    with pytest.raises(ServiceError, match="runs no stage 'mmr'"):
        service._pipeline({"stage.mmr.lambda_": 0.5})
    with pytest.raises(ServiceError, match="weight"):
        service._pipeline({"instructionBoostWeight": "heavy"})


def test_ingest_is_idempotent_by_id_and_counted_on_the_service(tmp_path):
    service = MemoryService.from_overrides(["variant=bm25", "tracking=none"], state_dir=tmp_path)
    scope = {"conversation": "1"}
    records = [{"id": "a", "text": "alpha"}, {"id": "b", "text": "beta"}, {"id": "c", "text": "gamma"}]
    assert service.ingest(scope, records) == {"stored": 3, "duplicates_refused": 0}
    assert service.ingest(scope, records[:2]) == {"stored": 0, "duplicates_refused": 2}
    restarted = MemoryService.from_overrides(["variant=bm25", "tracking=none"], state_dir=tmp_path)
    searchable(restarted, scope, 3)
    assert restarted.count(scope) == 3 and restarted.counts()["ingested"] == 3
    assert [h.id for h in restarted.search("alpha", scope, 5)] == ["a"]


# --- the HTTP adapter against small misbehaving servers --------------------------------------------------


class _Server:
    """A stdlib HTTP server on a free loopback port answering every POST with `respond(path, body)`."""

    def __init__(self, respond):
        outer = self
        self.seen: list[tuple[str, dict, dict]] = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self._send(200, {"status": "ok"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.seen.append((self.path, body, dict(self.headers)))
                status, payload, headers = respond(self.path, body)
                self._send(status, payload, headers)

            def _send(self, status, payload, headers=None):
                data = json.dumps(payload).encode()
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def _adapter(url: str, **fields) -> HttpSystem:
    config = compose_config(["variant=system", "tracking=none"]).system.adapter
    from omegaconf import OmegaConf

    values = OmegaConf.to_container(config, resolve=False)
    values.pop("_target_")
    values["base_url"] = url
    return HttpSystem(**{**values, **fields})


def _request(qid: str = "q7") -> SearchRequest:
    return SearchRequest(qid, "what?", {"conversation": "1"}, 5)


def test_a_malformed_answer_names_the_query_and_the_json_path():
    server = _Server(lambda path, body: (200, {"results": [{"identifier": "x"}]}, {}))
    try:
        with pytest.raises(LiveSystemError, match=r"query q7, result 0: JSON path 'id': no key 'id'"):
            _adapter(server.url).search(_request())
    finally:
        server.close()


def test_a_hung_service_times_out_and_the_timeouts_are_counted():
    def hang(path, body):
        time.sleep(1.0)
        return 200, {"results": []}, {}

    server = _Server(hang)
    try:
        adapter = _adapter(server.url, timeout_s=0.2, retries=1, backoff_s=0.01)
        with pytest.raises(LiveSystemError, match="q7: no answer within 0.2 s"):
            adapter.search(_request())
        assert adapter.stats.snapshot()["timeouts"] == 2 and adapter.stats.snapshot()["retries"] == 1
    finally:
        server.close()


def test_429_is_retried_after_the_retry_after_the_service_asks_for():
    calls: list[float] = []

    def limited(path, body):
        calls.append(time.perf_counter())
        if len(calls) == 1:
            return 429, {"error": "slow down"}, {"Retry-After": "0.3"}
        return 200, {"results": [{"id": "m1", "score": 0.5, "text": "t"}]}, {}

    server = _Server(limited)
    try:
        adapter = _adapter(server.url, backoff_s=0.01)
        assert adapter.search(_request()) == [Hit("m1", 0.5, "t")]
        assert calls[1] - calls[0] >= 0.3
        counts = adapter.stats.snapshot()
        assert counts["rate_limited"] == 1 and counts["retries"] == 1 and counts["errors"] == 0
    finally:
        server.close()


def test_a_secret_header_comes_from_the_environment_and_reaches_no_cassette(tmp_path, monkeypatch):
    secret = "s3cr3t-token-value"
    monkeypatch.setenv("MEMEVAL_TEST_TOKEN", secret)
    answer = {"results": [{"id": "c1:0", "score": 1.0, "text": "t"}], "count": 5}
    server = _Server(lambda path, body: (200, answer, {}))
    try:
        adapter = _adapter(server.url, headers={"Authorization": "Bearer {env:MEMEVAL_TEST_TOKEN}"})
        suite = tiny_suite()
        cassette = tmp_path / "c.jsonl"
        _system_pipeline(adapter, mode="record", cassette=str(cassette)).run(
            suite.memories, suite.queries, progress=False
        )
        assert all(headers["Authorization"] == f"Bearer {secret}" for _, _, headers in server.seen)
        assert secret not in cassette.read_text()
        assert secret not in repr(adapter) and secret not in adapter.fingerprint()
        monkeypatch.delenv("MEMEVAL_TEST_TOKEN")
        with pytest.raises(LiveSystemError, match="environment variable MEMEVAL_TEST_TOKEN is not set"):
            adapter.search(_request())
    finally:
        server.close()


def test_overrides_reach_the_search_body_and_nulls_are_not_sent():
    server = _Server(lambda path, body: (200, {"results": []}, {}))
    try:
        request = SearchRequest("q1", "x", {"conversation": "1"}, 5, overrides={"a": 0.1, "b": None})
        _adapter(server.url).search(request)
        path, body, _ = server.seen[0]
        assert path == "/v1/memories/search" and body["config_override"] == {"a": 0.1}
        assert body["query_id"] == "q1" and body["k"] == 5 and body["scope"] == {"conversation": "1"}
    finally:
        server.close()


def test_a_service_down_at_start_is_named(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(LiveSystemError, match=f"127.0.0.1:{port} is not reachable"):
        SystemRetriever(system=_adapter(f"http://127.0.0.1:{port}")).check_available()


def test_the_composed_system_variant_builds_and_states_its_mode():
    cfg = compose_config(["variant=system", "system.mode=record", "system.cassette=x.jsonl", "tracking=none"])
    stage = pipeline_from_config(list(cfg.variant.stages), cfg.stage, depth=cfg.depth).stages[0]
    assert isinstance(stage, SystemRetriever) and stage.mode == "record" and stage.live
    with pytest.raises(Exception, match="cassette"):
        pipeline_from_config(
            list(cfg.variant.stages),
            compose_config(["variant=system", "system.mode=replay"]).stage,
            cfg.depth,
        )


def test_cassette_path_is_a_real_file_after_record(tmp_path):
    suite = tiny_suite()
    cassette = tmp_path / "sub" / "c.jsonl"
    _system_pipeline(ServiceSystem(_bm25_service()), mode="record", cassette=str(cassette)).run(
        suite.memories, suite.queries, progress=False
    )
    ops = [json.loads(line)["op"] for line in Path(cassette).read_text().splitlines()]
    assert ops.count("search") == len(suite.queries) and ops.count("ingest") == 2
