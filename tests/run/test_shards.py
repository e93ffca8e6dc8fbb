"""Sharding a suite by scope (experiments/shards.py): which scopes go where; a shard's run says it is one."""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess

import pytest

from experiments.configure.check import ConfigError
from experiments.shards import (
    SHARD_OF_TAG,
    SHARD_TAG,
    ShardSpec,
    assign_scopes,
    cut,
    scope_sizes,
    shard_hash,
    shard_spec,
)
from tests.sweep_support import write_tiny_suite


def test_assignment_is_deterministic_and_independent_of_the_order_scopes_come_in():
    rng = random.Random(7)
    sizes = {f"conversation-{i}": rng.randint(1, 5000) for i in range(37)}
    first = assign_scopes(sizes, 4)
    shuffled = list(sizes.items())
    rng.shuffle(shuffled)
    assert assign_scopes(dict(shuffled), 4) == first
    assert sorted(k for shard in first for k in shard) == sorted(sizes)  # each scope in exactly one shard


@pytest.mark.parametrize("count", [2, 3, 4, 7])
def test_shards_are_balanced_within_one_scope_of_memories(count):
    rng = random.Random(count)
    sizes = {f"s{i:03d}": rng.randint(1, 10_000) for i in range(50)}
    loads = [sum(sizes[k] for k in shard) for shard in assign_scopes(sizes, count)]
    assert max(loads) - min(loads) <= max(sizes.values())


def test_ties_go_by_scope_key_then_to_the_lowest_shard():
    assert assign_scopes({"b": 5, "a": 5, "c": 5, "d": 1}, 2) == [["a", "c"], ["b", "d"]]
    assert assign_scopes({"only": 3}, 3) == [["only"], [], []]  # more shards than scopes: some are empty


def test_a_cut_keeps_its_scopes_records_in_the_whole_suites_order(tiny):
    parts = [cut(tiny, ShardSpec(i, 2)) for i in range(2)]
    for part in parts:
        scopes = set(part.section["scopes"])
        assert part.suite.memories and all(m.scope_key in scopes for m in part.suite.memories)
        assert all(q.scope_key in scopes for q in part.suite.queries)
        assert set(part.suite.qrels) <= {q.id for q in part.suite.queries}
        whole = [q.id for q in tiny.queries]
        assert part.section["query_positions"] == {q.id: whole.index(q.id) for q in part.suite.queries}
        assert part.suite.tags[SHARD_OF_TAG] == tiny.content_hash
    assert sorted(q.id for p in parts for q in p.suite.queries) == sorted(q.id for q in tiny.queries)
    assert sum(len(p.suite.memories) for p in parts) == len(tiny.memories)
    assert {k for p in parts for k in p.suite.qrels} == set(tiny.qrels)
    assert scope_sizes(tiny) == {p.section["scopes"][0]: 5 for p in parts}


def test_a_shards_content_hash_is_of_the_whole_suite_and_the_shard(tiny):
    hashes = {cut(tiny, ShardSpec(i, n)).suite.content_hash for n in (1, 2, 3) for i in range(n)}
    assert len(hashes) == 6 and tiny.content_hash not in hashes  # each shard its own identity
    part = cut(tiny, ShardSpec(1, 2)).suite
    assert part.content_hash == shard_hash(tiny.content_hash, ShardSpec(1, 2))
    # A whole suite that changed anywhere, even in the other shard's scope, changes every shard's hash: a
    # shard's results carry the whole suite they were cut from (the merge checks it is the same).
    other = cut(tiny, ShardSpec(0, 2)).section["scopes"]
    edited = dataclasses.replace(
        tiny,
        memories=tuple(
            dataclasses.replace(m, text=f"{m.text} edited") if m.scope_key in other else m
            for m in tiny.memories
        ),
    )
    assert cut(edited, ShardSpec(1, 2)).suite.memories == part.memories
    assert cut(edited, ShardSpec(1, 2)).suite.content_hash != part.content_hash
    # A suite made from a shard is a suite of its own again: its hash is of its records.
    assert dataclasses.replace(part, name="copy").content_hash not in hashes


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"shard": None}, None),
        ({"shard": "1/4"}, ShardSpec(1, 4)),
        ({"shard": 2, "shards": 3}, ShardSpec(2, 3)),
    ],
)
def test_shard_spec_reads_both_spellings(given, expected):
    assert shard_spec(given) == expected


@pytest.mark.parametrize(
    "given",
    [
        {"shard": "4/4"},
        {"shard": "a/b"},
        {"shard": "1/0"},
        {"shard": 1},
        {"shards": 4},
        {"shard": "0/2", "shards": 2},
    ],
)
def test_a_shard_that_names_no_shard_is_a_config_error(given):
    with pytest.raises(ConfigError, match="shard"):
        shard_spec(given)


def test_a_shard_run_says_it_is_a_shard(tmp_path):
    suite = write_tiny_suite(tmp_path)
    proc = subprocess.run(
        [
            *sweep_command(tmp_path, suite),
            "shard=1/2",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=run_env(),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    tags = json.loads((tmp_path / "run" / "tags.json").read_text())
    section = metrics["shard"]
    assert (section["index"], section["count"]) == (1, 2)
    assert section["whole_suite"]["queries"] == 4 and metrics["n_queries"] == 2  # statistics of its scopes
    assert tags[SHARD_TAG] == "1/2" and tags[SHARD_OF_TAG] == section["whole_suite"]["content_hash"]
    assert "shard: 1/2" in (tmp_path / "run" / "config.yaml").read_text()


def test_a_bad_shard_exits_2_naming_the_key(tmp_path):
    suite = write_tiny_suite(tmp_path)
    proc = subprocess.run(
        [*sweep_command(tmp_path, suite), "shard=5/2", f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=run_env(),
    )
    assert proc.returncode == 2 and "shard" in proc.stderr
    assert not (tmp_path / "run" / "metrics.json").exists()


def sweep_command(cwd, suite) -> list[str]:
    import sys

    return [
        sys.executable,
        "-m",
        "experiments.run",
        "suite=jsonl",
        f"suite.path={suite}",
        "variant=bm25",
        "progress=false",
        "tracking=none",
        f"cache_dir={cwd / 'cache'}",
    ]


def run_env() -> dict[str, str]:
    import os

    from tests.support import REPO

    return {
        **os.environ,
        "MLFLOW_TRACKING_URI": "",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
