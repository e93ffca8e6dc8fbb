"""A memeval variant as a memory service: the core both faces of `memeval-serve` share (HTTP, MCP).

    service = MemoryService.from_overrides(["variant=exp05"])
    service.ingest({"conversation": "1"}, [{"id": "m1", "text": "...", "created_at": "..."}])
    service.search("what did I say about X?", {"conversation": "1"}, k=10,
                   config_override={"instructionBoostWeight": 0.2})

Data flow: records arrive per scope (`ingest`, idempotent by id: a memory already stored under the scope
is refused and counted, never stored twice); a search builds the scope's corpus and the variant's
channel indexes once per scope content (kept until the scope changes), then runs one query through
the variant exactly as `Pipeline.run` does (channels -> fusion -> each rank stage -> top k), so a variant
served this way gives the in-process run's ranking: the same ids in the same order with the same
float scores (JSON carries a float's shortest repr, which reads back to the same float).

`config_override` keys are AtomicMemory-style names mapped onto stage fields by a table
(conf/serve/override_keys.yaml: `instructionBoostWeight -> stage.instruction_boost.weight`)
or generic `stage.<name>.<field>` keys; a key that names nothing this variant runs is an error, never
ignored. Each distinct override set builds its pipeline once (stages unchanged by it are reused, and so
are the channel indexes when it changes only rank stages).

With a `state_dir`, every accepted ingest and every reset is appended to `state_dir/log.jsonl` (fsynced),
and a restarted service reads it back: a service killed mid-run keeps what it stored, and its lifetime
counts (`counts()`), as a real memory service would.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from experiments.run.build import pipeline_from_config
from experiments.run.compose import CONF_DIR
from retrieval.pipeline import Pipeline, PipelineConfigError, _single_channel
from retrieval.reuse import ProcessMemo
from retrieval.types import Candidates, Corpus, Memory, Query, scope_key

OVERRIDE_KEYS_FILE = CONF_DIR / "serve" / "override_keys.yaml"


class ServiceError(ValueError):
    """A request the service refuses (bad record, unknown override key): the HTTP face answers 400."""


@dataclass(frozen=True)
class ServedHit:
    """One search result: the memory's id (the client's own), its final score and its text."""

    id: str
    score: float
    text: str


def load_override_keys(path: str | Path = OVERRIDE_KEYS_FILE) -> dict[str, str]:
    """The `config_override` key -> `stage.<name>.<field>` table (a YAML mapping)."""
    table = yaml.safe_load(Path(path).read_text()) or {}
    keys = table.get("override_keys", table)
    bad = [
        f"{k}: {v!r}"
        for k, v in keys.items()
        if not (isinstance(v, str) and v.count(".") == 2 and v.startswith("stage."))
    ]
    if bad:
        raise ServiceError(f"{path}: each override key must map to stage.<name>.<field>; got {bad}")
    return {str(k): str(v) for k, v in keys.items()}


def memory_from_record(record: Mapping[str, Any], scope: Mapping[str, str]) -> Memory:
    """A stored memory from an ingest record (the canonical suite record, docs/suite_format); the scope
    is the request's, whatever the record says."""
    if (
        not isinstance(record, Mapping)
        or not isinstance(record.get("id"), str)
        or not isinstance(record.get("text"), str)
    ):
        raise ServiceError(f"an ingest record needs a string `id` and `text`, got {str(record)[:200]}")
    from experiments.suites.jsonl import _memory  # the suite format's own reader of a memory record

    try:
        return _memory({**record, "scope": dict(scope)})
    except (TypeError, ValueError) as err:
        raise ServiceError(f"ingest record {record['id']}: {err}") from None


@dataclass
class _Scope:
    memories: list[Memory] = field(default_factory=list)
    ids: set[str] = field(default_factory=set)
    version: int = 0


class MemoryService:
    """Memories per scope, and the variant's ranking of them for a query (module docstring)."""

    def __init__(
        self,
        cfg: DictConfig,
        *,
        override_keys: Mapping[str, str] | None = None,
        state_dir: str | Path | None = None,
    ):
        self.cfg = cfg
        self.order = [str(s) for s in cfg.variant.stages]
        self.depth = int(cfg.depth)
        self.override_keys = dict(load_override_keys() if override_keys is None else override_keys)
        # Stages, corpora and channel indexes shared between the pipelines of different overrides.
        self._memo = ProcessMemo(max_entries=256)
        self._pipelines: OrderedDict[str, Pipeline] = OrderedDict()
        self._lock = threading.RLock()  # the stored memories and counts
        self._build_lock = threading.Lock()  # corpora and channel indexes: one build at a time
        self.pipeline = self._pipeline({})  # the variant as configured: a bad variant fails at start
        self._scopes: dict[str, _Scope] = {}
        self._changes = itertools.count(1)  # each change of a scope's content gets a new number
        self._building: set[tuple] = set()  # scope contents whose indexes are being built (`count`)
        self._counts = {"ingested": 0, "duplicates_refused": 0, "resets": 0, "searches": 0}
        self._log: Path | None = None
        if state_dir is not None:
            Path(state_dir).mkdir(parents=True, exist_ok=True)
            self._log = Path(state_dir) / "log.jsonl"
            self._restore()

    @classmethod
    def from_overrides(cls, overrides: Sequence[str] = (), **kwargs: Any) -> MemoryService:
        """The service of the variant `memeval-run <overrides>` would run (e.g. `variant=exp05`)."""
        from experiments.run.compose import compose_config

        return cls(compose_config(list(overrides)), **kwargs)

    # --- memories ---------------------------------------------------------------------------------

    def reset(self, scope: Mapping[str, str]) -> int:
        """Forget the scope's memories; how many there were."""
        with self._lock:
            gone = self._scopes.pop(scope_key(scope), _Scope())
            self._counts["resets"] += 1
            self._append({"op": "reset", "scope": dict(scope)})
            return len(gone.memories)

    def ingest(self, scope: Mapping[str, str], records: Sequence[Mapping[str, Any]]) -> dict[str, int]:
        """Store the records under the scope, in order; an id the scope already holds is refused."""
        memories = [memory_from_record(r, scope) for r in records]  # all checked before any is stored
        with self._lock:
            state = self._scopes.setdefault(scope_key(scope), _Scope())
            refused = 0
            accepted = []
            for record, memory in zip(records, memories, strict=True):
                if memory.id in state.ids:
                    refused += 1
                    continue
                state.ids.add(memory.id)
                state.memories.append(memory)
                accepted.append({"op": "ingest", "scope": dict(scope), "record": dict(record)})
            stored = len(accepted)
            self._append(*accepted)
            if stored:
                state.version = next(self._changes)
            self._counts["ingested"] += stored
            self._counts["duplicates_refused"] += refused
            return {"stored": stored, "duplicates_refused": refused}

    def count(self, scope: Mapping[str, str]) -> int:
        """Memories searchable under the scope (what `wait_until_searchable` polls): 0 until the variant's
        indexes of the scope's current content are built. The first call starts that build in the
        background, so a poll never waits on it (a cold embedding of a scope can take minutes)."""
        with self._lock:
            state = self._scopes.get(scope_key(scope))
            if state is None or not state.memories:
                return 0
            memories, version = tuple(state.memories), (scope_key(scope), state.version)
            if self._built(self.pipeline, version):
                return len(memories)
            if version in self._building:
                return 0
            self._building.add(version)

        def build() -> None:
            try:
                self._indexes(self.pipeline, version, memories)
            finally:
                with self._lock:
                    self._building.discard(version)

        threading.Thread(target=build, name="memeval-serve-index", daemon=True).start()
        return 0

    def _built(self, pipeline: Pipeline, version: tuple) -> bool:
        ingest = tuple(s.fingerprint() for s in pipeline.ingest)
        if self._memo.get("corpus", (version, ingest)) is None:
            return False
        return all(
            self._memo.get("index", (version, ingest, r.fingerprint())) is not None
            for r in pipeline.retrievers
        )

    def counts(self) -> dict[str, int]:
        """Lifetime counts: memories stored, duplicates refused, resets, searches (a restart keeps the
        first three when the service has a state_dir)."""
        with self._lock:
            return dict(self._counts)

    def _append(self, *entries: dict[str, Any]) -> None:
        """Log changes (one write and fsync per request) before the request is answered."""
        if self._log is None or not entries:
            return
        with open(self._log, "a", encoding="utf-8") as fh:
            fh.write("".join(json.dumps(entry, sort_keys=True) + "\n" for entry in entries))
            fh.flush()
            os.fsync(fh.fileno())

    def _restore(self) -> None:
        if self._log is None or not self._log.exists():
            return
        lines = self._log.read_text(encoding="utf-8").split("\n")
        log, self._log = self._log, None  # replaying the log does not append to it
        try:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    entry = json.loads(line)
                except ValueError:
                    if number >= len(lines) - 1:  # a torn last line: the kill came mid-write
                        break
                    raise ServiceError(f"{log}:{number}: not JSON") from None
                if entry["op"] == "reset":
                    self.reset(entry["scope"])
                else:
                    self.ingest(entry["scope"], [entry["record"]])
        finally:
            self._log = log

    # --- search -----------------------------------------------------------------------------------

    def search(
        self,
        text: str,
        scope: Mapping[str, str],
        k: int,
        *,
        as_of: str | None = None,
        config_override: Mapping[str, Any] | None = None,
        query_id: str = "query",
    ) -> list[ServedHit]:
        """The variant's top k for one query over the scope's memories, best first."""
        if not isinstance(k, int) or k < 1:
            raise ServiceError(f"k must be a positive integer, got {k!r}")
        pipeline = self._pipeline(config_override or {})
        with self._lock:
            self._counts["searches"] += 1
            state = self._scopes.get(scope_key(scope))
            memories = tuple(state.memories) if state else ()
            version = (scope_key(scope), state.version if state else -1)
        if not memories:
            return []
        corpus, indexes = self._indexes(pipeline, version, memories)
        query = Query(id=query_id, text=text, scope=MappingProxyType(dict(scope)), now=as_of)
        channels = {r.channel: indexes[r.channel].search(query) for r in pipeline.retrievers}
        if pipeline.fusion is not None:
            candidates = pipeline.fusion(corpus, channels)
        else:
            candidates = _single_channel(corpus, *next(iter(channels.items())))
        for stage in pipeline.rank:
            candidates = stage(query, Candidates(corpus, candidates.index, dict(candidates.columns)))
        top = candidates.top(min(k, self.depth))
        return [
            ServedHit(str(corpus.ids[i]), float(s), corpus.memories[i].text)
            for i, s in zip(top.index, top.columns["score"], strict=True)
        ]

    def _indexes(
        self, pipeline: Pipeline, version: tuple, memories: tuple[Memory, ...]
    ) -> tuple[Corpus, dict]:
        """The scope's ingested corpus and channel indexes, built once per scope content and stage config."""
        ingest = tuple(s.fingerprint() for s in pipeline.ingest)
        with self._build_lock:  # one build at a time: concurrent first searches of a scope share it
            corpus = self._memo.get_or_make(
                "corpus", (version, ingest), lambda: Corpus(tuple(pipeline.ingest_memories(memories)))
            )
            indexes = {
                r.channel: self._memo.get_or_make(
                    "index", (version, ingest, r.fingerprint()), lambda r=r: r.build(corpus)
                )
                for r in pipeline.retrievers
            }
        return corpus, indexes

    def _pipeline(self, config_override: Mapping[str, Any]) -> Pipeline:
        """The variant with the override applied (built once per distinct override set)."""
        if not isinstance(config_override, Mapping):
            raise ServiceError(f"config_override must be an object, got {config_override!r}")
        key = json.dumps(config_override, sort_keys=True, default=repr)
        with self._lock:
            if key in self._pipelines:
                self._pipelines.move_to_end(key)
                return self._pipelines[key]
        stages = OmegaConf.create(OmegaConf.to_container(self.cfg.stage, resolve=True))
        for name, value in config_override.items():
            path = self.override_keys.get(name, name)
            parts = path.split(".")
            if len(parts) != 3 or parts[0] != "stage":
                raise ServiceError(
                    f"config_override key {name!r} is not a known key "
                    f"({', '.join(sorted(self.override_keys))}) nor stage.<name>.<field>"
                )
            if parts[1] not in self.order or parts[1] not in stages:
                raise ServiceError(
                    f"config_override {name!r} -> {path}: this variant runs no stage {parts[1]!r}"
                )
            OmegaConf.update(stages, ".".join(parts[1:]), value, merge=False)
        try:
            pipeline = pipeline_from_config(self.order, stages, depth=self.depth, memo=self._memo)
        except PipelineConfigError as err:
            raise ServiceError(f"config_override {dict(config_override)}: {err}") from None
        with self._lock:
            self._pipelines[key] = pipeline
            while len(self._pipelines) > 32:
                self._pipelines.popitem(last=False)
        return pipeline

    def describe(self) -> dict[str, Any]:
        """What is served: the variant, its stages and a hash of its resolved stage config."""
        stages = json.dumps(
            OmegaConf.to_container(self.cfg.stage, resolve=True), sort_keys=True, default=repr
        )
        return {
            "variant": str(self.cfg.variant.name),
            "stages": [s.name for s in self.pipeline.stages],
            "stage_config_sha256": hashlib.sha256(stages.encode()).hexdigest()[:16],
            "override_keys": dict(self.override_keys),
        }
