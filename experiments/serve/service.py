"""A memeval variant as a memory service: the core both faces of `memeval-serve` share (HTTP, MCP).

    service = MemoryService.from_overrides(["variant=exp05"])
    service.ingest({"conversation": "1"}, [{"id": "m1", "text": "...", "created_at": "..."}])
    service.search("what did I say about X?", {"conversation": "1"}, k=10,
                   config_override={"instructionBoostWeight": 0.2})

Data flow: records arrive per scope (`ingest`, idempotent by id: a memory already stored under the scope
is refused and counted, never stored twice); a search builds the scope's corpus and the variant's
channel indexes once per scope content (kept until the scope changes), then runs one query through
the variant with `Pipeline.answer`, the steps `Pipeline.run` takes for each query (channels -> fusion ->
each rank stage -> top k), so a variant served this way gives the in-process run's ranking: the same
ids in the same order with the same float scores (JSON carries a float's shortest repr, which reads
back to the same float).

`config_override` keys are AtomicMemory-style names mapped onto stage fields by a table
(experiments/serve/override_keys.yaml: `instructionBoostWeight -> stage.instruction_boost.weight`)
or generic `stage.<name>.<field>` keys; a key that names nothing this variant runs is an error, never
ignored. An override runs no client code: its value is a plain value (a number, a boolean, a string
without `${`, or a list of those) for a declared value field of a stage the variant runs, type-checked
and range-checked as a command-line override is (retrieval.field_types, the stage's `ranges`), and set
on the built stage with `dataclasses.replace`: it never reaches OmegaConf or Hydra's instantiate, so no
`_target_` is built and no interpolation resolved. Each distinct override set builds its pipeline once
(stages unchanged by it are the same objects, and so are the channel indexes when it changes only rank
stages).

A stage whose effect rests on a memory field (`Stage.memory_fields`: instruction_tagging reads `role`)
finds none when a client's memory shape leaves that field out, and then silently does nothing (a served
exp05 would rank as exp05 at boost weight 0). The service says so once per stage and field, on stderr
and in `warnings()` (GET /health), naming the scopes.

With a `state_dir`, every accepted ingest and every reset is appended to `state_dir/log.jsonl` (fsynced),
and a restarted service reads it back: a service killed mid-run keeps what it stored, and its lifetime
counts (`counts()`), as a real memory service would.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import sys
import threading
import types
import typing
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, Union

import yaml

from experiments.configure.build import configured_stages
from experiments.configure.compose import compose_config
from experiments.configure.settings import RunSettings
from experiments.suites.jsonl import MEMORY_SCHEMA, field_problems, memory_from_json
from retrieval.field_types import describe_type, field_type_problems, type_hints
from retrieval.pipeline import Pipeline, PipelineConfigError
from retrieval.reuse import ProcessMemo
from retrieval.stage import MAX_CUTOFF, FieldError, Range, Stage, stage_ranges
from retrieval.types import Corpus, Memory, Query, scope_key

OVERRIDE_KEYS_FILE = Path(__file__).with_name("override_keys.yaml")


class ServiceError(ValueError):
    """A request the service refuses (bad record, unknown override key): the HTTP face answers 400."""


_SCALARS = (bool, int, float, str, type(None))
PLAIN_VALUES = "a number, a boolean, a string or a list of those"


@dataclass(frozen=True)
class ValueField:
    """A stage field a `config_override` may set: its stage (config name), field, annotation and Range."""

    stage: str
    field: str
    hint: Any
    range: Range | None

    def allowed(self) -> str:
        """'float, >= 0 and <= 1': what the field takes, for a refusal's message."""
        bounds = [
            f"{sign} {getattr(self.range, name):g}"
            for name, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))
            if getattr(self.range, name, None) is not None
        ]
        return describe_type(self.hint) + (", " + " and ".join(bounds) if bounds else "")


def _settable(hint: Any, item: bool = False) -> bool:
    """Whether a field of this annotation holds plain values only: scalars, literals, optionals and (at
    the top) lists of those. Components (an encoder), mappings and unannotated fields are not settable."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint in _SCALARS:
        return True
    if origin is Literal:
        return all(isinstance(a, _SCALARS) for a in args)
    if origin in (Union, types.UnionType):
        return all(_settable(a, item) for a in args)
    if not item and origin in (list, tuple, Sequence):
        return bool(args) and all(a is Ellipsis or _settable(a, True) for a in args)
    return False


def value_fields(stages: Mapping[str, Stage]) -> dict[str, ValueField]:
    """`stage.<name>.<field>` -> ValueField for every settable field of every stage (computed once)."""
    out = {}
    for name, stage in stages.items():
        hints, ranges = type_hints(type(stage)), stage_ranges(type(stage))
        for f in dataclasses.fields(stage):
            if f.init and _settable(hints.get(f.name, Any)):
                out[f"stage.{name}.{f.name}"] = ValueField(name, f.name, hints[f.name], ranges.get(f.name))
    return out


def plain_value_problem(value: Any) -> str | None:
    """Why a client's override value is not a plain value (None when it is): never an object, a nested
    list, or a string holding `${` (an OmegaConf interpolation, e.g. `${oc.env:...}`)."""
    items = value if isinstance(value, list) else [value]
    for item in items:
        if isinstance(item, str) and "${" in item:
            return "an interpolation (`${...}`) is not a value: memeval-serve resolves nothing a client sends"
        if not isinstance(item, _SCALARS):
            return f"must be {PLAIN_VALUES}, never an object or a nested list"
    return None


@dataclass(frozen=True)
class ServedHit:
    """One search result: the memory's id (the client's own), its final score and its text."""

    id: str
    score: float
    text: str


def load_override_keys(path: str | Path = OVERRIDE_KEYS_FILE) -> dict[str, str]:
    """The `config_override` key -> `stage.<name>.<field>` table (a YAML mapping); a file that is not UTF-8,
    not YAML or not a mapping is a ServiceError naming it (an OSError: the caller's, as for any file)."""
    try:
        table = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError as err:
        raise ServiceError(
            f"{path}: not UTF-8 text (byte {err.start}): an override-keys file is YAML"
        ) from None
    except yaml.YAMLError as err:
        raise ServiceError(f"{path}: not YAML ({' '.join(str(err).split())[:200]})") from None
    keys = table.get("override_keys", table) if isinstance(table, dict) else table
    if not isinstance(keys, dict):
        raise ServiceError(f"{path}: expected a mapping of override key -> stage.<name>.<field>")
    bad = [
        f"{k}: {v!r}"
        for k, v in keys.items()
        if not (isinstance(v, str) and v.count(".") == 2 and v.startswith("stage."))
    ]
    if bad:
        raise ServiceError(f"{path}: each override key must map to stage.<name>.<field>; got {bad}")
    return {str(k): str(v) for k, v in keys.items()}


def memory_from_record(record: Mapping[str, Any], scope: Mapping[str, str]) -> Memory:
    """A stored memory from an ingest record, checked field by field as a suite's memories.jsonl line is
    (experiments.suites.jsonl.MEMORY_SCHEMA); the scope is the request's, whatever the record says."""
    if not isinstance(record, Mapping):
        raise ServiceError(f"an ingest record must be an object, got {type(record).__name__}")
    # The scope is the request's: a record's own is neither checked nor refused.
    problems = [
        f"{name}: {problem}"
        for name, problem in field_problems(
            {k: v for k, v in record.items() if k != "scope"},
            {k: v for k, v in MEMORY_SCHEMA.items() if k != "scope"},
        )
    ]
    if problems:
        mid = record["id"][:100] if isinstance(record.get("id"), str) else "?"
        raise ServiceError(f"ingest record {mid!r}: {'; '.join(problems)[:1000]}")
    return memory_from_json({**record, "scope": dict(scope)})


@dataclass
class _Scope:
    memories: list[Memory] = field(default_factory=list)
    ids: set[str] = field(default_factory=set)
    version: int = 0


class MemoryService:
    """Memories per scope, and the variant's ranking of them for a query (module docstring)."""

    def __init__(
        self,
        settings: RunSettings,
        stages: Mapping[str, Stage],
        *,
        override_keys: Mapping[str, str] | None = None,
        state_dir: str | Path | None = None,
    ):
        """`settings`: the variant's (experiments/configure/settings.py); `stages`: every stage its config
        names, disabled ones included (an override may turn one on), built once (configure/build.py
        `configured_stages`); an override replaces fields of these, and the fields it may set are tabled
        once (`value_fields`)."""
        self.settings = settings
        self.order = list(settings.stage_order)
        self.depth = settings.depth
        self.override_keys = dict(load_override_keys() if override_keys is None else override_keys)
        self.stages = MappingProxyType(dict(stages))
        self.fields = MappingProxyType(value_fields(self.stages))
        # Corpora and channel indexes shared between the pipelines of different overrides.
        self._memo = ProcessMemo(max_entries=256)
        self._pipelines: OrderedDict[str, Pipeline] = OrderedDict()
        self._lock = threading.RLock()  # the stored memories and counts
        self._build_lock = threading.Lock()  # corpora and channel indexes: one build at a time
        self.pipeline = self._pipeline({})  # the variant as configured
        self._scopes: dict[str, _Scope] = {}
        self._changes = itertools.count(1)  # each change of a scope's content gets a new number
        self._building: set[tuple] = set()  # scope contents whose indexes are being built (`count`)
        self._counts = {"ingested": 0, "duplicates_refused": 0, "resets": 0, "searches": 0}
        self._field_gaps: dict[tuple[str, str], list[str]] = {}  # (stage, field) -> scopes with none
        self._log: Path | None = None
        if state_dir is not None:
            Path(state_dir).mkdir(parents=True, exist_ok=True)
            self._log = Path(state_dir) / "log.jsonl"
            self._restore()

    @classmethod
    def from_overrides(cls, overrides: Sequence[str] = (), **kwargs: Any) -> MemoryService:
        """The service of the variant `memeval-run <overrides>` would run (e.g. `variant=exp05`)."""
        return cls(*configured_stages(compose_config(list(overrides))), **kwargs)

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
            self._check_fields(scope, state.memories)
            return {"stored": stored, "duplicates_refused": refused}

    def _check_fields(self, scope: Mapping[str, str], memories: Sequence[Memory]) -> None:
        """Note each enabled stage's memory field that none of the scope's memories carries (module
        docstring); the first time for a stage and field, a line on stderr."""
        for stage in self.pipeline.stages:
            if not getattr(stage, "enabled", True):
                continue
            for name in stage.memory_fields():
                if any(getattr(m, name, None) is not None for m in memories):
                    continue
                scopes = self._field_gaps.setdefault((stage.name, name), [])
                if scope_key(scope) in scopes:
                    continue
                scopes.append(scope_key(scope))
                if len(scopes) == 1:
                    print(f"memeval-serve: warning: {self._gap_message(stage.name, name)}", file=sys.stderr)

    def _gap_message(self, stage: str, name: str) -> str:
        scopes = self._field_gaps[(stage, name)]
        return (
            f"stage {stage} reads each memory's `{name}`, but no memory of {len(scopes)} scope(s) "
            f"(first {scopes[0]}) has one: it changes nothing there (send `{name}` with each memory)"
        )

    def warnings(self) -> list[str]:
        """What the service noted of the memories it was sent (module docstring), one line each."""
        with self._lock:
            return [self._gap_message(stage, name) for stage, name in self._field_gaps]

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
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_CUTOFF:
            raise ServiceError(f"k must be an integer from 1 to {MAX_CUTOFF:,}, got {str(k)[:40]}")
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
        top = pipeline.answer(query, corpus, indexes).top(k)
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

    def _checked_override(self, config_override: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        """The override as {stage name: {field: value}}, each key checked against the field table and each
        value for being plain; a refusal names the client's key and never quotes a resolved value."""
        if not isinstance(config_override, Mapping):
            kind = type(config_override).__name__
            raise ServiceError(f"config_override must be an object of key: value, got {kind}")
        changes: dict[str, dict[str, Any]] = {}
        for name, value in config_override.items():
            path = self.override_keys.get(name, name)
            key = name if path == name else f"{name} (-> {path})"
            target = self.fields.get(path)
            if target is None:
                raise ServiceError(self._unknown_key(str(name), str(path)))
            problem = plain_value_problem(value)
            if problem is not None:
                raise ServiceError(f"config_override {key}: {problem}")
            fields = changes.setdefault(target.stage, {})
            if target.field in fields:
                raise ServiceError(f"config_override {key}: sets stage.{target.stage}.{target.field} twice")
            fields[target.field] = value
        return changes

    def _unknown_key(self, name: str, path: str) -> str:
        parts = path.split(".")
        if len(parts) == 3 and parts[0] == "stage" and parts[1] not in self.stages:
            return f"config_override {name!r} -> {path}: this variant runs no stage {parts[1]!r}"
        if len(parts) == 3 and parts[0] == "stage":
            stage = self.stages[parts[1]]
            known = {f.name for f in dataclasses.fields(stage)}
            settable = [v.field for v in self.fields.values() if v.stage == parts[1]]
            return (
                f"config_override {name!r}: {path} "
                f"{'is not a value field of' if parts[2] in known else 'names no field of'} "
                f"{type(stage).__name__} (memeval-serve sets {PLAIN_VALUES}; its value fields: "
                f"{', '.join(settable) or 'none'})"
            )
        return (
            f"config_override key {name[:200]!r} is not a known key "
            f"({', '.join(sorted(self.override_keys))}) nor stage.<name>.<field> naming a value field of a "
            "stage this variant runs"
        )

    def _pipeline(self, config_override: Mapping[str, Any]) -> Pipeline:
        """The variant with the override applied (built once per distinct override set): each changed
        stage is the served one with its fields replaced, checked as a command-line override is (each
        value against the field's annotation, then the stage's own `ranges` and rules on construction)."""
        changes = self._checked_override(config_override)
        key = json.dumps(changes, sort_keys=True)  # plain values only: always JSON
        with self._lock:
            if key in self._pipelines:
                self._pipelines.move_to_end(key)
                return self._pipelines[key]
        stages = dict(self.stages)
        for name, fields in changes.items():
            problems: list[tuple[str, str]] = []
            for field_name, value in fields.items():
                try:
                    problems += field_type_problems(type(stages[name]), {field_name: value})
                except OverflowError:  # an integer past any float, for a float field
                    digits = len(str(value))
                    problems.append(
                        (field_name, f"expected a finite float, got an integer of {digits} digits")
                    )
            try:
                if not problems:
                    stages[name] = dataclasses.replace(stages[name], **fields)
            except FieldError as err:  # the stage's ranges and rules
                problems = err.problems
            except OverflowError:
                problems = [(f, "a number too large to check against its range") for f in fields]
            if problems:
                raise ServiceError("; ".join(self._refusal(config_override, name, *p) for p in problems))
        try:
            pipeline = Pipeline(tuple(stages[name] for name in self.order), depth=self.depth)
        except PipelineConfigError as err:
            if not changes:  # the variant as served: a bad variant fails at start, as memeval-run's would
                raise
            raise ServiceError(f"config_override {', '.join(map(str, config_override))}: {err}") from None
        with self._lock:
            self._pipelines[key] = pipeline
            while len(self._pipelines) > 32:
                self._pipelines.popitem(last=False)
        return pipeline

    def _refusal(self, config_override: Mapping[str, Any], stage: str, field: str, problem: str) -> str:
        """One problem of an override, named by the key the client used and with what the field allows."""
        path = f"stage.{stage}.{field.split('[')[0].split('.')[0]}"
        used = next((str(n) for n in config_override if self.override_keys.get(n, n) == path), path)
        label = used if used == path else f"{used} (-> {path})"
        allowed = f" (allowed: {self.fields[path].allowed()})" if path in self.fields else ""
        return f"config_override {label}: {problem[:300]}{allowed}"

    def embedding_caches(self) -> list[str]:
        """The embedding cache folders (absolute) of the served stages' encoders: where a memeval-run
        started with the same cache_dir (or MEMEVAL_CACHE_DIR) reads and writes the same vectors."""
        folders = {getattr(getattr(s, "encoder", None), "cache_dir", None) for s in self.stages.values()}
        return sorted(str(Path(f).resolve()) for f in folders if f)

    def describe(self) -> dict[str, Any]:
        """What is served: the variant, its stages and a hash of its resolved stage config."""
        stages = json.dumps(self.settings.config["stage"], sort_keys=True, default=repr)
        return {
            "variant": self.settings.variant,
            "stages": [s.name for s in self.pipeline.stages],
            "stage_config_sha256": hashlib.sha256(stages.encode()).hexdigest()[:16],
            "override_keys": dict(self.override_keys),
        }
