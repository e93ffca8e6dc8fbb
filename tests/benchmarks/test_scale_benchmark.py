"""The scale benchmark's skeleton (experiments/benchmarks/scale.py) on spark25: a cold and a warm bm25 run
as subprocesses, their report's structure (runs table with peak RSS, phase table, commands), the log-log
slope per phase over several sizes, and `--shards` refused with exit 2 where the config has no `shard`.
Structure, never the timings' values."""

from __future__ import annotations

import json

import pytest

from experiments.benchmarks import scale
from experiments.configure.compose import compose_config
from tests.support import REPO

SPARK25 = REPO / "datasets" / "spark25"


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("scale")
    out = tmp / "scale.md"
    scale.main(
        ["--suite-path", str(SPARK25), "--variants", "bm25", "--work", str(tmp / "work"), "--out", str(out)]
    )
    return out.read_text(), json.loads(out.with_suffix(".json").read_text()), tmp


def _table(text: str, heading: str) -> list[list[str]]:
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


def test_a_cold_and_a_warm_run_each_have_wall_cpu_load_and_peak_memory(measured):
    text, results, tmp = measured
    assert "Machine:" in text and f"CPU class {results['isa']}" in text and "Load average" in text
    header, _, *rows = _table(text, "## Runs")
    columns = [
        "suite",
        "memories",
        "queries",
        "variant",
        "mode",
        "wall s",
        "CPU s",
        "load (1 min)",
        "peak RSS MB",
    ]
    assert header[:9] == columns
    assert [(r[0], r[1], r[3], r[4]) for r in rows] == [
        ("spark25", "306", "bm25", "cold"),
        ("spark25", "306", "bm25", "warm"),
    ]
    assert all(float(r[5]) > 0 and float(r[6]) > 0 and float(r[8].replace(",", "")) > 0 for r in rows)
    assert len([line for line in text.splitlines() if line.startswith("- `python -m experiments.run ")]) == 2
    # committed and read elsewhere: the scratch folder as $WORK, the suite relative to the checkout
    assert str(tmp) not in text and "cache_dir=$WORK/" in text and "suite.path=datasets/spark25" in text


def test_the_phase_table_names_each_phase_from_metrics_json(measured):
    text, results, _ = measured
    header, _, *rows = _table(text, "## Wall seconds per phase")
    assert {"load suite", "ingest", "index bm25", "search", "metrics", "outside phases"} <= set(header)
    assert len(rows) == 2 and all(len(r) == len(header) for r in rows)
    assert set(results["runs"][0]["timings"]) <= set(header)


def test_several_sizes_give_a_slope_per_phase_and_a_log_log_plot(measured):
    _, results, tmp = measured
    (small,) = [r for r in results["runs"] if r["mode"] == "cold"]
    # the same run as if the suite were 10x and 100x larger and each phase 10x and 100x slower: slope 1
    larger = [
        {**small, "memories": small["memories"] * f, "wall_s": small["wall_s"] * f,
         "timings": {p: s * f for p, s in small["timings"].items()}}
        for f in (10, 100)
    ]  # fmt: skip
    fitted = scale.slopes([small, *larger])[("bm25", "cold")]
    assert {p for p, s in small["timings"].items() if s > 0} | {"wall"} == set(fitted)
    assert all(s == pytest.approx(1.0) for s in fitted.values())
    scale.plot([small, *larger], tmp / "scale.png")
    assert (tmp / "scale.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = scale.report(
        {**results, "runs": [small, *larger], "slopes": {"bm25/cold": fitted}}, "cmd", "scale.png"
    )
    header, _, row = _table(text, "## Growth")
    assert header[:2] == ["variant", "mode"] and row[:2] == ["bm25", "cold"] and "![" in text


def test_shards_need_the_shard_config_key(tmp_path, capsys):
    has_shard = "shard" in compose_config(["suite=jsonl", f"suite.path={SPARK25}", "variant=bm25"])
    assert (scale.shard_key_problem("jsonl", SPARK25, "bm25") is None) == has_shard
    if not has_shard:  # until sharding lands (issue #36, shard=i/n): a clear refusal before any run
        with pytest.raises(SystemExit) as stopped:
            scale.main(["--suite-path", str(SPARK25), "--shards", "4", "--work", str(tmp_path)])
        assert stopped.value.code == 2
        assert "`shard` config key" in capsys.readouterr().err
        assert not any(tmp_path.iterdir())  # nothing was run


def test_a_sharded_run_is_a_row_with_its_ratio_to_the_unsharded_wall(measured):
    _, results, _ = measured
    sharded = {"suite": "spark25", "variant": "bm25", "command": "python -m experiments.run -m shard=0/4,1/4",
               "unsharded_wall_s": 10.0, "wall_s": 11.0, "cpu_s": 9.0, "merge_wall_s": 0.0, "ratio": 1.1,
               "differing": []}  # fmt: skip
    text = scale.report({**results, "shards": 4, "sharded": [sharded]}, "cmd", None)
    header, _, row = _table(text, "## Sharded (4 shards")
    assert header[-2:] == ["ratio", "identical"] and row[:2] == ["spark25", "bm25"]
    assert row[-2:] == ["1.10", "yes"]
    assert "- `python -m experiments.run -m shard=0/4,1/4`" in text
    differs = {**sharded, "differing": ["run.trec"]}
    text = scale.report({**results, "shards": 4, "sharded": [differs]}, "cmd", None)
    assert _table(text, "## Sharded (4 shards")[2][-1] == "no: run.trec"


def test_the_merged_run_is_compared_byte_for_byte_with_the_unsharded_one(measured, tmp_path):
    _, _, tmp = measured
    whole = tmp / "work" / "0-bm25" / "cold" / "run"  # a real run folder: run.trec and qrels.tsv
    merged = tmp_path / "merged"
    merged.mkdir()
    for name in scale.IDENTICAL:
        (merged / name).write_bytes((whole / name).read_bytes())
    assert scale.differing(merged, whole) == []
    trec = (whole / "run.trec").read_bytes()
    (merged / "run.trec").write_bytes(trec[:-2] + bytes([trec[-2] ^ 1]) + trec[-1:])  # one byte changed
    assert scale.differing(merged, whole) == ["run.trec"]
    (merged / "qrels.tsv").unlink()
    assert scale.differing(merged, whole) == ["run.trec", "qrels.tsv"]


def test_shard_jobs_sets_how_many_shards_run_at_a_time(tmp_path):
    args = scale.sharded_args("jsonl", SPARK25, "bm25", 4, tmp_path, [], jobs=1)
    assert "hydra.launcher.n_jobs=1" in args and "shard=0/4,1/4,2/4,3/4" in args
    assert not any("n_jobs" in a for a in scale.sharded_args("jsonl", SPARK25, "bm25", 4, tmp_path, []))
