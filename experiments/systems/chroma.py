"""Chroma (the `chromadb` package) as a live memory system, through its official client and server.

    .venv/bin/chroma run --host 127.0.0.1 --port 8000 --path outputs/chroma &
    .venv/bin/memeval-run variant=system system=chroma system.adapter.port=8000

Where it sits: a `MemorySystem` (protocol.py) that `SystemRetriever` wraps as one channel; the worked
example of a Python adapter (docs/live_systems.md). Chroma's REST API wants parallel arrays, a server-made
collection id and client-side embeddings; its client, `chromadb.HttpClient`, speaks it.

- **One collection per scope**, named from a digest of memeval's canonical scope key (Chroma names allow
  only `[A-Za-z0-9._-]`), the scope itself in the collection's metadata. `reset` deletes it.
- **Embeddings are memeval's** (`encoder`, the same `SentenceEncoder` and cache as `variant=dense`), sent
  with each record and each query, so Chroma's ranking can be checked against dense: its collections are
  made in cosine space with an `ef_search` above a scope's size, so its HNSW search visits every memory.
  Scores are `1 - cosine distance` (Chroma computes in float32: within ~1e-7 of dense's cosines).
- **Ids** are the suite's (`upsert`: a retried or resumed ingest stores nothing twice). Each record carries
  its ingest position, and hits with equal distances are ordered by it, as memeval's channels order ties.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from experiments.systems.protocol import Hit, LiveSystemError, SearchRequest, poll_until_searchable
from retrieval.encoder import SentenceEncoder
from retrieval.stage import FieldError, Range, own_range_problems
from retrieval.types import Memory, scope_key

POSITION = "memeval_position"  # metadata key: a record's place in its scope's ingest order (ties)


class ChromaState:
    """What a ChromaSystem holds while it runs (never config): the client (made on first use), the
    collections by scope key, and the lock over both and the encoder."""

    def __init__(self) -> None:
        self.client: Any = None
        self.collections: dict[str, Any] = {}
        self.lock = threading.Lock()


@dataclass(frozen=True, kw_only=True)
class ChromaSystem:
    """A Chroma server through `chromadb.HttpClient`; fields are the adapter's config, `state` its run-time
    state (a `ChromaState`)."""

    name: ClassVar[str] = "chroma"  # system=...: its base is system/dataclass/chroma (configure/nodes.py)
    ranges: ClassVar[Mapping[str, Range]] = {
        "port": Range(ge=1, le=65535),
        "ef_search": Range(ge=1),
        "ef_construction": Range(ge=1),
        "ingest_batch": Range(ge=1),
        "searchable_timeout_s": Range(ge=0),
    }

    encoder: SentenceEncoder
    host: str = "127.0.0.1"
    port: int = 8000
    collection_prefix: str = "memeval"
    ef_search: int = 1000  # HNSW candidates per search: above a scope's size, the search is exhaustive
    ef_construction: int = 200
    ingest_batch: int = 1000  # records per upsert (Chroma caps a batch at its max_batch_size)
    searchable_timeout_s: float = 60.0
    state: ChromaState = field(default_factory=ChromaState, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        problems = own_range_problems(self)
        if problems:
            raise FieldError(problems)

    def fingerprint(self) -> str:
        """What Chroma answers by (the cassette key): embeddings and index settings, not the address."""
        parts = (self.collection_prefix, self.ef_search, self.ef_construction, self.encoder.fingerprint())
        return "ChromaSystem|" + "|".join(map(str, parts))

    @property
    def client(self) -> Any:
        with self.state.lock:
            if self.state.client is None:
                import chromadb  # optional (the `chroma` extra), and slow to import

                settings = chromadb.Settings(anonymized_telemetry=False)  # no events off this machine
                self.state.client = chromadb.HttpClient(host=self.host, port=self.port, settings=settings)
            return self.state.client

    def _name(self, scope: Mapping[str, str]) -> str:
        return f"{self.collection_prefix}-{hashlib.sha256(scope_key(scope).encode()).hexdigest()[:32]}"

    def _collection(self, scope: Mapping[str, str]) -> Any:
        """The scope's collection, made on first use (cosine space, exhaustive ef_search)."""
        key = scope_key(scope)
        with self.state.lock:
            found = self.state.collections.get(key)
        if found is None:
            found = self._call(
                f"collection of scope {dict(scope)}",
                lambda: self.client.get_or_create_collection(
                    self._name(scope),
                    configuration={
                        "hnsw": {
                            "space": "cosine",
                            "ef_search": self.ef_search,
                            "ef_construction": self.ef_construction,
                        }
                    },
                    metadata={"memeval_scope": json.dumps(dict(scope), sort_keys=True)},
                    embedding_function=None,  # embeddings come from memeval's encoder
                ),
            )
            with self.state.lock:
                self.state.collections[key] = found
        return found

    def _embed(self, texts: Sequence[str], role: str) -> Any:
        with self.state.lock:  # the encoder's cache and model are not made for concurrent callers
            return self.encoder.encode(list(texts), role=role)

    @staticmethod
    def _call(what: str, call: Any) -> Any:
        """A client call; Chroma's errors (HTTP, connection, its own) become LiveSystemError naming `what`."""
        try:
            return call()
        except LiveSystemError:
            raise
        except Exception as err:  # noqa: BLE001 (chromadb raises httpx errors, ValueError, ChromaError...)
            raise LiveSystemError(f"chroma {what}: {type(err).__name__}: {err}") from None

    # ---- the protocol ---------------------------------------------------------------------------
    def check_available(self) -> None:
        """At start, before any work: the server answers its heartbeat."""
        try:
            self.client.heartbeat()
        except Exception as err:  # noqa: BLE001
            raise LiveSystemError(
                f"the Chroma server at http://{self.host}:{self.port} is not reachable "
                f"({type(err).__name__}: {err}); start it (.venv/bin/chroma run --host {self.host} "
                f"--port {self.port} --path DIR) or set system.adapter.port (nothing was run)"
            ) from None

    def reset(self, scope: Mapping[str, str]) -> None:
        with self.state.lock:
            self.state.collections.pop(scope_key(scope), None)
        names = self._call("list of collections", lambda: [c.name for c in self.client.list_collections()])
        if self._name(scope) in names:
            self._call(
                f"reset of scope {dict(scope)}", lambda: self.client.delete_collection(self._name(scope))
            )

    def ingest(self, scope: Mapping[str, str], memories: Sequence[Memory]) -> None:
        collection = self._collection(scope)
        vectors = self._embed([m.text for m in memories], "document")
        for start in range(0, len(memories), self.ingest_batch):
            batch = memories[start : start + self.ingest_batch]
            self._call(
                f"ingest of scope {dict(scope)} (memories {start + 1}-{start + len(batch)})",
                lambda batch=batch, start=start: collection.upsert(
                    ids=[m.id for m in batch],
                    embeddings=vectors[start : start + len(batch)],
                    documents=[m.text for m in batch],
                    metadatas=[{POSITION: start + i} for i in range(len(batch))],
                ),
            )

    def wait_until_searchable(self, scope: Mapping[str, str], memories: Sequence[Memory]) -> float:
        """Poll the collection's count until it holds what was ingested (bounded)."""
        collection = self._collection(scope)
        return poll_until_searchable(
            lambda: self._call(f"count of scope {dict(scope)}", collection.count), len(memories),
            self.searchable_timeout_s, 0.05, f"chroma: scope {dict(scope)}",
            "system.adapter.searchable_timeout_s",
        )  # fmt: skip

    def search(self, request: SearchRequest) -> list[Hit]:
        if request.overrides:
            raise LiveSystemError(
                f"chroma search for query {request.query_id!r}: no per-request overrides "
                f"(got {sorted(request.overrides)})"
            )
        collection = self._collection(request.scope)
        vector = self._embed([request.text], "query")
        answer = self._call(
            f"search for query {request.query_id!r}",
            lambda: collection.query(
                query_embeddings=vector, n_results=request.k, include=["distances", "documents", "metadatas"]
            ),
        )
        rows = zip(
            answer["ids"][0],
            answer["distances"][0],
            answer["documents"][0],
            answer["metadatas"][0],
            strict=True,
        )
        hits = [
            (1.0 - float(distance), (meta or {}).get(POSITION, 0), mid, text)
            for mid, distance, text, meta in rows
        ]
        hits.sort(key=lambda h: (-h[0], h[1]))  # equal distances in ingest order, as memeval ranks ties
        return [Hit(id=mid, score=score, text=text) for score, _, mid, text in hits]

    def close(self) -> None:
        with self.state.lock:
            self.state.client, self.state.collections = None, {}
