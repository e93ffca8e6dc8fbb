"""What real vector-store APIs need from the YAML adapter (experiments/systems/http.py), against a small
loopback service shaped like one (Chroma's REST API is the model):

- a `setup` call per scope whose answer is captured (a server-made collection id) and used in later
  paths, made again after a reset (the reset drops the collection);
- a memory template naming `{scope}`/`{scope.<name>}`, and `{memories.<field>}` as parallel arrays;
- search answers given as parallel arrays (`results: {ids, scores, texts}`);
- an `after_ingest` call (an index build) without which nothing ingested is searchable.

Each feature is checked through the whole run path (SystemRetriever over the tiny two-scope suite),
and each bad configuration or answer is an error naming the place.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from experiments.evaluate.table import scope_leaks
from experiments.systems.http import HttpSystem
from experiments.systems.protocol import LiveSystemError, SearchRequest
from experiments.systems.retriever import SystemRetriever
from retrieval.pipeline import Pipeline
from retrieval.stage import FieldError
from tests.support import tiny_suite


class CollectionService:
    """A vector-store-shaped HTTP service on a free loopback port: collections with server-made ids,
    parallel-array add and query, and an explicit index build (added records are not searchable before).
    It ranks by shared words, and records every request it answers."""

    def __init__(self):
        self.collections: dict[str, dict] = {}  # name -> {id, pending, indexed}
        self.requests: list[tuple[str, str, dict | None]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                outer.requests.append((method, self.path, body))
                status, payload = outer.respond(method, self.path, body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._answer("GET")

            def do_POST(self):
                self._answer("POST")

            def do_DELETE(self):
                self._answer("DELETE")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._lock = threading.Lock()
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def by_id(self, cid: str) -> dict | None:
        return next((c for c in self.collections.values() if c["id"] == cid), None)

    def respond(self, method: str, path: str, body: dict | None) -> tuple[int, object]:
        with self._lock:
            if method == "GET" and path == "/health":
                return 200, {"ok": True}
            if method == "POST" and path == "/collections":  # get or create by name
                made = {"id": str(uuid.uuid4()), "pending": {}, "indexed": {}}
                return 200, {"id": self.collections.setdefault(body["name"], made)["id"]}
            if method == "DELETE" and path.startswith("/collections/"):
                self.collections.pop(path.rsplit("/", 1)[1], None)
                return 200, {}
            found = re.fullmatch(r"/collections/([^/]+)/(add|index|count|query)", path)
            collection = self.by_id(found[1]) if found else None
            if collection is None:
                return 404, {"error": f"no collection at {path}"}
            op = found[2]
            if op == "add":
                sizes = {len(body[k]) for k in ("ids", "documents", "metadatas")}
                if len(sizes) != 1:
                    return 400, {"error": "ids, documents and metadatas differ in length"}
                for mid, doc, meta in zip(body["ids"], body["documents"], body["metadatas"], strict=True):
                    collection["pending"][mid] = (doc, meta)
                return 200, {}
            if op == "index":
                collection["indexed"].update(collection["pending"])
                collection["pending"].clear()
                return 200, {}
            if op == "count":
                return 200, {"count": len(collection["indexed"])}
            words = set(body["query_text"].lower().split())
            scored = sorted(
                (
                    (len(words & set(doc.lower().split())), mid, doc)
                    for mid, (doc, _) in collection["indexed"].items()
                ),
                key=lambda t: (-t[0], t[1]),
            )[: body["n_results"]]
            return 200, {
                "ids": [[mid for _, mid, _ in scored]],
                "scores": [[float(s) for s, _, _ in scored]],
                "documents": [[doc for _, _, doc in scored]],
            }

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def collection_adapter(url: str, **fields) -> HttpSystem:
    """The YAML a user would write for CollectionService, as the adapter's fields."""
    config = {
        "base_url": url,
        "endpoints": {
            "health": {"method": "GET", "path": "/health"},
            "setup": {
                "method": "POST",
                "path": "/collections",
                "body": {"name": "memeval-{scope.conversation}"},
                "capture": {"collection": "id"},
            },
            "reset": {"method": "DELETE", "path": "/collections/memeval-{scope.conversation}"},
            "ingest": {
                "method": "POST",
                "path": "/collections/{setup.collection}/add",
                "body": {
                    "ids": "{memories.id}",
                    "documents": "{memories.text}",
                    "metadatas": "{memories.meta}",
                },
            },
            "after_ingest": {"method": "POST", "path": "/collections/{setup.collection}/index", "body": {}},
            "count": {
                "method": "GET",
                "path": "/collections/{setup.collection}/count",
                "path_in_response": "count",
            },
            "search": {
                "method": "POST",
                "path": "/collections/{setup.collection}/query",
                "body": {"query_text": "{text}", "n_results": "{k}"},
            },
        },
        "memory": {
            "id": "{id}",
            "text": "{text}",
            "meta": {"scope": "{scope.conversation}", "whole": "{scope}"},
        },
        "results": {"ids": "ids[0]", "scores": "scores[0]", "texts": "documents[0]"},
        "searchable_timeout_s": 2.0,
        "retries": 0,
    }
    return HttpSystem(**{**config, **fields})


@pytest.fixture()
def service():
    server = CollectionService()
    yield server
    server.close()


def run_tiny(system: HttpSystem):
    suite = tiny_suite()
    output = Pipeline((SystemRetriever(system=system),), depth=100).run(
        suite.memories, suite.queries, progress=False
    )
    return suite, output


def test_a_collection_api_runs_end_to_end_through_setup_parallel_arrays_and_an_index_call(service):
    suite, output = run_tiny(collection_adapter(service.url))
    ranked = {r.query_id: r for r in output.ranked}
    for qid, relevant in suite.qrels.items():
        assert ranked[qid].memory_ids[0] in relevant, qid  # ranked by the service, read from parallel arrays
    assert ranked["c1:q0"].scores[0] > 0
    # One collection per scope, made by the service; the scope reached the memory template.
    assert set(service.collections) == {"memeval-c1", "memeval-c2"}
    stored = service.collections["memeval-c2"]["indexed"]
    assert sorted(stored) == [m.id for m in suite.memories if m.scope["conversation"] == "c2"]
    assert {meta["scope"] for _, meta in stored.values()} == {"c2"}
    assert {json.dumps(meta["whole"]) for _, meta in stored.values()} == {'{"conversation": "c2"}'}
    report = output.channel_reports["system"]
    assert report["unknown_ids"] == report["hits_without_text"] == 0
    assert int(scope_leaks(suite, output).sum()) == 0


def test_setup_runs_once_per_scope_and_again_after_a_reset(service):
    system = collection_adapter(service.url)
    suite, _ = run_tiny(system)
    setups = [r for r in service.requests if r[:2] == ("POST", "/collections")]
    # One setup per scope, at its first ingest; its count and searches reuse what it captured.
    assert len(setups) == 2
    first = service.collections["memeval-c1"]["id"]
    system.reset({"conversation": "c1"})  # drops the collection
    assert "memeval-c1" not in service.collections
    memories = [m for m in suite.memories if m.scope["conversation"] == "c1"]
    system.ingest({"conversation": "c1"}, memories)  # sets up anew: a new collection, a new id
    assert service.collections["memeval-c1"]["id"] != first
    assert service.requests[-2][1] == f"/collections/{service.collections['memeval-c1']['id']}/add"


def test_without_the_after_ingest_call_nothing_becomes_searchable(service):
    system = collection_adapter(service.url)
    endpoints = {k: v for k, v in system.endpoints.items() if k != "after_ingest"}
    with pytest.raises(LiveSystemError, match=r"scope \{'conversation': 'c1'\}: 0 of 5 memories searchable"):
        run_tiny(collection_adapter(service.url, endpoints=endpoints))


def test_parallel_arrays_of_different_lengths_name_the_query_and_the_paths(service):
    system = collection_adapter(service.url, results={"ids": "ids[0]", "scores": "scores"})
    scope = {"conversation": "c1"}
    system.ingest(scope, [m for m in tiny_suite().memories if m.scope == scope])
    with pytest.raises(
        LiveSystemError, match=r"query q7: parallel arrays of different lengths: .*'ids\[0\]': 5.*'scores': 1"
    ):
        system.search(SearchRequest("q7", "code snippets", scope, 10))


def test_a_parallel_array_that_is_not_a_list_is_named(service):
    system = collection_adapter(service.url, results={"ids": "ids[0][0]"})
    scope = {"conversation": "c1"}
    system.ingest(scope, [m for m in tiny_suite().memories if m.scope == scope])
    with pytest.raises(LiveSystemError, match=r"query q7: JSON path 'ids\[0\]\[0\]' is not a list"):
        system.search(SearchRequest("q7", "code snippets", scope, 10))


def test_a_memories_field_that_a_memory_lacks_is_named(service):
    system = collection_adapter(service.url, memory={"id": "{id}", "text": "{text}"})  # no `meta`
    with pytest.raises(LiveSystemError, match=r"\{memories.meta\}, item 0: JSON path 'meta': no key 'meta'"):
        system.ingest({"conversation": "c1"}, list(tiny_suite().memories[:2]))


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            {"capture": {"other": "id"}},
            r"endpoints.ingest: names \{setup.collection\}, but endpoints.setup captures \['other'\]",
        ),
        (None, r"endpoints.ingest: names \{setup.collection\}, but endpoints.setup captures nothing"),
    ],
)
def test_a_setup_value_nobody_captures_is_a_config_error(change, problem):
    endpoints = dict(collection_adapter("http://127.0.0.1:9").endpoints)
    if change is None:
        del endpoints["setup"]
    else:
        endpoints["setup"] = {**endpoints["setup"], **change}
    with pytest.raises(ValueError, match=problem):
        collection_adapter("http://127.0.0.1:9", endpoints=endpoints)


def test_a_bad_http_config_names_each_field():
    endpoints = {**collection_adapter("http://127.0.0.1:9").endpoints, "forget": {"path": "/f"}}
    with pytest.raises(FieldError) as err:
        collection_adapter("http://127.0.0.1:0", endpoints=endpoints, retries=-1, timeout_s=0)
    problems = dict(err.value.problems)
    assert sorted(problems) == ["base_url", "endpoints.forget", "retries", "timeout_s"]
    assert problems["retries"] == "must be >= 0, got -1" and "port 0" in problems["base_url"]


def test_results_are_either_a_list_of_hits_or_parallel_arrays():
    with pytest.raises(ValueError, match="either hits .* or ids .*, not both"):
        collection_adapter("http://127.0.0.1:9", results={"hits": "results", "id": "id", "ids": "ids"})
    with pytest.raises(ValueError, match="results.hits: a JSON path is required"):
        collection_adapter("http://127.0.0.1:9", results={"scores": "s"})


def test_a_reset_cannot_name_a_setup_value_because_it_runs_before_setup():
    endpoints = dict(collection_adapter("http://127.0.0.1:9").endpoints)
    endpoints["reset"] = {"method": "DELETE", "path": "/collections/{setup.collection}"}
    with pytest.raises(
        ValueError, match=r"endpoints.reset: names \{setup.collection\}, but runs before setup"
    ):
        collection_adapter("http://127.0.0.1:9", endpoints=endpoints)
