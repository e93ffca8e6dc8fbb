"""Sharding a suite by scope: `shard=i/n` runs the scopes of shard i of n only (docs/running_at_scale.md).

Sits between loading a suite and running it (experiments/run/app.py): the loaded, validated suite is cut
to one shard's scopes, with their queries, judgements and knowledge, and every shard of a run is then a
run of its own (any Hydra launcher: in-process, joblib, submitit on SLURM). `memeval-merge`
(experiments/merge.py) puts the shards' folders back together into the unsharded run's files.

The rule (`assign_scopes`): scopes sorted by memory count, largest first (ties by scope key), each given
to the lightest shard so far (ties to the lowest index). It depends on the suite's content only, never on
the order of its files, and keeps the shards' memory counts within one scope's size of each other.

A shard says it is one wherever a run can be read: its config (`shard: i/n`), `tags.json` and MLflow tags
(`memeval.shard`, `memeval.shard_of`: the whole suite's content hash), and metrics.json's `shard` section,
which also holds what the merge needs to rebuild the whole run's files in the whole suite's order (each
of the shard's queries' and judgements' positions in the whole suite) and the whole suite's summary.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from experiments.configure.check import ConfigError
from experiments.configure.settings import SHARD_KEY, SHARDS_KEY
from experiments.suites.suite import Suite
from retrieval.types import Knowledge

SHARD_SECTION = "shard"  # metrics.json
SHARD_TAG = "memeval.shard"  # "i/n"
SHARD_OF_TAG = "memeval.shard_of"  # the whole suite's content hash
RULE = "largest-first-by-memories"  # the assignment rule's name, in every shard's section

_SPEC = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


@dataclass(frozen=True)
class ShardSpec:
    """Shard `index` of `count` (0 <= index < count)."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def shard_spec(cfg: Mapping[str, Any]) -> ShardSpec | None:
    """The run config's shard (`shard=i/n`, or `shard=i` with `+shards=n`), None for a whole run; a value
    that names no shard is a ConfigError naming the key."""
    value, count = cfg.get(SHARD_KEY), cfg.get(SHARDS_KEY)
    if value is None:
        if count is not None:
            raise ConfigError([f"{SHARDS_KEY}: {count!r} given without {SHARD_KEY}=i (0 <= i < {count})"])
        return None
    found = _SPEC.fullmatch(str(value))
    if found and count is None:
        spec = ShardSpec(int(found[1]), int(found[2]))
    elif isinstance(value, int) and not isinstance(value, bool) and count is not None:
        if not isinstance(count, int) or isinstance(count, bool):
            raise ConfigError([f"{SHARDS_KEY}: {count!r} is not a whole number of shards"])
        spec = ShardSpec(value, count)
    else:
        raise ConfigError(
            [
                f"{SHARD_KEY}: {value!r} names no shard: give shard=i/n (e.g. shard=0/4), or shard=i with "
                f"+{SHARDS_KEY}=n"
                + (
                    f" (with {SHARDS_KEY}={count!r}, shard must be a whole number)"
                    if count is not None
                    else ""
                )
            ]
        )
    if spec.count < 1 or not 0 <= spec.index < spec.count:
        raise ConfigError([f"{SHARD_KEY}: {value!r}: the index must be 0..n-1 and n at least 1 (got {spec})"])
    return spec


def assign_scopes(sizes: Mapping[str, int], count: int) -> list[list[str]]:
    """Each shard's scope keys (sorted), the scopes given largest first (ties by key) to the shard with
    the fewest memories so far (ties to the lowest index). The shards' totals then differ by at most the
    largest scope's size."""
    loads = [0] * count
    shards: list[list[str]] = [[] for _ in range(count)]
    for key in sorted(sizes, key=lambda k: (-sizes[k], k)):
        lightest = min(range(count), key=lambda i: (loads[i], i))
        shards[lightest].append(key)
        loads[lightest] += sizes[key]
    return [sorted(keys) for keys in shards]


def scope_sizes(suite: Suite) -> dict[str, int]:
    """Every scope of the suite (of a memory or of a query) and its number of memories."""
    sizes: dict[str, int] = {}
    for memory in suite.memories:
        key = memory.scope_key
        sizes[key] = sizes.get(key, 0) + 1
    for query in suite.queries:
        sizes.setdefault(query.scope_key, 0)
    return sizes


@dataclass(frozen=True)
class Shard:
    """One shard of a suite: the cut suite (its tags name the shard) and metrics.json's `shard` section."""

    spec: ShardSpec
    suite: Suite
    section: dict[str, Any]


def cut(suite: Suite, spec: ShardSpec) -> Shard:
    """The suite's shard `spec`: its scopes' memories, queries, judgements and knowledge, each in the
    whole suite's order."""
    sizes = scope_sizes(suite)
    keys = set(assign_scopes(sizes, spec.count)[spec.index])
    queries = [(i, q) for i, q in enumerate(suite.queries) if q.scope_key in keys]
    kept = {q.id for _, q in queries}
    judged = [(i, qid) for i, qid in enumerate(suite.qrels) if qid in kept]
    concepts = tuple(c for c in suite.knowledge.concepts if c.scope_key in keys)
    concept_ids = {c.id for c in concepts}
    knowledge = Knowledge(
        concepts=concepts,
        relations=tuple(r for r in suite.knowledge.relations if r.source in concept_ids),
        feedback=tuple(f for f in suite.knowledge.feedback if f.scope_key in keys),
    )
    memories = tuple(m for m in suite.memories if m.scope_key in keys)
    part = dataclasses.replace(
        suite,
        memories=memories,
        queries=tuple(q for _, q in queries),
        qrels={qid: suite.qrels[qid] for _, qid in judged},
        knowledge=knowledge,
        tags={**suite.tags, SHARD_TAG: str(spec), SHARD_OF_TAG: suite.content_hash},
        notes=(
            *suite.notes,
            f"shard {spec}: {len(keys)} of {len(sizes)} scopes, {len(memories):,} of "
            f"{len(suite.memories):,} memories, {len(queries):,} of {len(suite.queries):,} queries",
        ),
    )
    # Suite.content_hash is a cached property: this is the value it then answers (a new suite made from
    # `part` by dataclasses.replace computes its own again).
    part.__dict__["content_hash"] = shard_hash(suite.content_hash, spec)
    section = {
        "shard": str(spec),
        "index": spec.index,
        "count": spec.count,
        "rule": RULE,
        "scopes": sorted(keys),
        # The whole suite, as an unsharded run's metrics.json states it (its `suite` section), and where
        # this shard's queries and judgements sit in it: the merge rebuilds the whole run's order from them.
        "whole_suite": {**suite.summary(), "content_hash": suite.content_hash, "notes": list(suite.notes)},
        "query_positions": {q.id: i for i, q in queries},
        "qrels_positions": {qid: i for i, qid in judged},
    }
    return Shard(spec, part, section)


def shard_hash(whole_hash: str, spec: ShardSpec) -> str:
    """A shard's content hash: of the whole suite's, the shard and the rule, which determine the shard.
    It keys the shard's results and caches as well as a hash of its own records would, without a second
    pass over its memories (about 1 s a shard at BEAM 10M's shape, the largest part of what sharding
    added to a run: reports/benchmarks/scale.md)."""
    return hashlib.sha256(f"{whole_hash}\x00shard {spec}\x00{RULE}".encode()).hexdigest()


def shard_suite(suite: Suite, cfg: Mapping[str, Any]) -> tuple[Suite, dict[str, Any] | None]:
    """The suite a run runs and metrics.json's `shard` section: the whole suite and None, or its shard
    (`shard=i/n`) and the section saying which. `cfg`: the run config's `shard` and `shards` (at least)."""
    spec = shard_spec(cfg)
    if spec is None:
        return suite, None
    shard = cut(suite, spec)
    return shard.suite, shard.section
