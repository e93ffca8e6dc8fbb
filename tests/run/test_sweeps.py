"""Sweeps without an MLflow store: config hash, the on-disk finished-run index, the process memo, skip
and resume of a multirun on a tiny suite (variant=bm25: no model needed)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from experiments.configure.compose import CONF_DIR, compose_config
from experiments.configure.settings import RunSettings
from experiments.csv_cells import safe_frame
from experiments.run.resume import config_hash, finished_on_disk, record_finished
from experiments.run_folder import resume_enabled
from experiments.run_folder.check import derived_values
from experiments.run_folder.per_query import read_per_query
from retrieval.cache_io import CacheWarning
from retrieval.pipeline import Pipeline
from retrieval.retrievers.bm25 import BM25Retriever
from retrieval.reuse import ProcessMemo
from retrieval.stage import RankStage
from retrieval.types import Candidates, Query
from tests.support import REPO, tiny_suite, write_run_files
from tests.sweep_support import job_dirs, sweep, write_tiny_suite


def compose_with(*overrides: str):
    return compose_config(overrides)


def hash_of(*overrides: str) -> str:
    """The config hash of the run `overrides` compose (of its settings' resolved config, as a run hashes)."""
    return config_hash(RunSettings.from_config(compose_with(*overrides)).config)


def test_config_hash_is_stable_and_ignores_only_volatile_keys():
    base = hash_of("variant=bm25")
    assert base == hash_of("variant=bm25")
    assert len(base) == 16
    for volatile in ("progress=false", "cache_dir=/elsewhere", "tracking=none", "resume=false"):
        assert hash_of("variant=bm25", volatile) == base, volatile
    for meaningful in ("stage.bm25.k1=1.2", "depth=50", "variant=dense", "seed=1", "suite.path=/x"):
        assert hash_of("variant=bm25", meaningful) != base, meaningful


def test_config_hash_ignores_key_order_and_nested_progress_flags():
    a = {"stage": {"dense": {"top_n": 100, "encoder": {"model": "m", "show_progress": True}}}, "depth": 5}
    b = {"depth": 5, "stage": {"dense": {"encoder": {"show_progress": False, "model": "m"}, "top_n": 100}}}
    assert config_hash(a) == config_hash(b)
    assert config_hash(a) != config_hash({**a, "depth": 6})


def test_config_hash_is_the_same_in_another_process():
    code = (
        "from experiments.configure.compose import compose_config\n"
        "from experiments.configure.settings import RunSettings\n"
        "from experiments.run.resume import config_hash\n"
        "print(config_hash(RunSettings.from_config(compose_config(['variant=bm25'])).config))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == hash_of("variant=bm25")


def test_resume_auto_means_multiruns_only():
    assert resume_enabled("auto", multirun=True) and not resume_enabled("auto", multirun=False)
    assert resume_enabled(True, multirun=False) and not resume_enabled(False, multirun=True)
    with pytest.raises(ValueError, match="resume"):
        resume_enabled("sometimes", multirun=True)


def test_disk_index_needs_a_complete_metrics_json_with_the_same_hashes(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    record_finished(tmp_path / "cache", "abc", "suitehash", run_dir, None)
    assert finished_on_disk(tmp_path / "cache", "abc", "suitehash") is None  # killed before metrics.json
    metrics = {"config_hash": "abc", "suite": {"content_hash": "suitehash"}, "overall": {"nDCG@10": 0.5}}
    write_run_files(run_dir, metrics)
    record_finished(tmp_path / "cache", "abc", "suitehash", run_dir, None)  # as the runner does, after it
    found = finished_on_disk(tmp_path / "cache", "abc", "suitehash")
    assert found is not None and found.overall["nDCG@10"] == 0.5 and found.source == "disk"
    assert finished_on_disk(tmp_path / "cache", "abc", "othersuite") is None
    (run_dir / "metrics.json").write_text(json.dumps({**metrics, "config_hash": "zzz"}))
    assert finished_on_disk(tmp_path / "cache", "abc", "suitehash") is None
    assert finished_on_disk(None, "abc", "suitehash") is None


def test_process_memo_evicts_the_least_recently_used_entry():
    memo = ProcessMemo(max_entries=2)
    memo.put("k", 1, "a")
    memo.put("k", 2, "b")
    assert memo.get("k", 1) == "a"  # 1 is now the most recent
    memo.put("k", 3, "c")
    assert memo.get("k", 2) is None and memo.get("k", 1) == "a" and memo.get("k", 3) == "c"
    assert memo.get_or_make("other", 1, lambda: "made") == "made"


def test_a_memoised_pipeline_gives_the_same_rankings_and_reuses_corpus_and_candidates():
    suite = tiny_suite()
    pipeline = Pipeline((BM25Retriever(top_n=5),), depth=100)
    memo = ProcessMemo()
    plain = pipeline.run(suite.memories, suite.queries, suite_hash=suite.content_hash, progress=False)
    first = pipeline.run(suite.memories, suite.queries, suite_hash="h", progress=False, memo=memo)
    second = pipeline.run(suite.memories, suite.queries, suite_hash="h", progress=False, memo=memo)
    assert not first.prefix_cache_hit and second.prefix_cache_hit
    assert second.corpus is first.corpus
    for a, b, c in zip(plain.ranked, first.ranked, second.ranked, strict=True):
        assert a.memory_ids == b.memory_ids == c.memory_ids
        np.testing.assert_array_equal(a.scores, c.scores)
    # A stage editing its arrays in place must not leak into the next run of the process.
    second.ranked[0].columns["bm25"][:] = -1
    third = pipeline.run(suite.memories, suite.queries, suite_hash="h", progress=False, memo=memo)
    np.testing.assert_array_equal(third.ranked[0].columns["bm25"], first.ranked[0].columns["bm25"])


@pytest.mark.parametrize("variant", ["exp05", "spark_phase3", "tiering", "graph_expand", "passages"])
def test_stage_memo_keys_from_the_run_resolved_config_are_each_stages_own(variant):
    """A run resolves its config once and the sweep memo's stage keys come from that container: the same
    keys as resolving each stage node on its own (interpolations into other parts of the config too)."""
    from omegaconf import OmegaConf

    from experiments.configure.build import _stage_key

    boost = ["stage.instruction_boost.weight=${seed}"] if variant == "exp05" else []  # one into elsewhere
    cfg = compose_with(f"variant={variant}", "seed=3", *boost)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    for name in cfg.variant.stages:
        assert _stage_key(resolved["stage"][name]) == _stage_key(cfg.stage[name]) is not None, name
    if boost:
        assert '"weight": 3' in _stage_key(resolved["stage"]["instruction_boost"])


@dataclass(frozen=True, kw_only=True)
class CountedHalving(RankStage):
    """Stands for an expensive stage the sweep does not touch (current_state in exp05)."""

    name = "halving"
    calls: ClassVar[list[str]] = []

    def __call__(self, query: Query, candidates: Candidates) -> Candidates:
        self.calls.append(query.id)
        return candidates.with_score("halving", candidates.score / 2)


@dataclass(frozen=True, kw_only=True)
class CountedShift(RankStage):
    """Stands for the swept stage (instruction_boost): a weight that moves even positions up."""

    name = "shift"
    weight: float = 0.0
    calls: ClassVar[list[str]] = []

    def __call__(self, query: Query, candidates: Candidates) -> Candidates:
        self.calls.append(query.id)
        bonus = self.weight * (np.arange(len(candidates)) % 2 == 0)
        return candidates.with_score("shift", candidates.score + bonus)


def test_a_sweep_over_a_later_rank_stage_reruns_only_that_stage():
    suite = tiny_suite()
    memo = ProcessMemo()
    CountedHalving.calls.clear()
    CountedShift.calls.clear()
    for weight in (0.0, 0.5, 1.0):
        stages = (BM25Retriever(top_n=5), CountedHalving(), CountedShift(weight=weight))
        plain = Pipeline(stages, depth=100).run(suite.memories, suite.queries, suite_hash="h", progress=False)
        memoised = Pipeline(stages, depth=100).run(
            suite.memories, suite.queries, suite_hash="h", progress=False, memo=memo
        )
        for a, b in zip(plain.ranked, memoised.ranked, strict=True):
            assert a.memory_ids == b.memory_ids
            np.testing.assert_array_equal(a.scores, b.scores)
            assert set(a.timings_ms) == set(b.timings_ms) == {"bm25", "halving", "shift"}
    n = len(suite.queries)
    # Without the memo each run calls both stages; with it, the halving stage ran once in all.
    assert len(CountedHalving.calls) == 3 * n + n
    assert len(CountedShift.calls) == 3 * n + 3 * n


@pytest.fixture(scope="module")
def disk_sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("disk_sweep")
    suite = write_tiny_suite(tmp)
    first = sweep(tmp, suite, tmp / "first", "stage.bm25.k1=1.2,1.5,1.8")
    return tmp, suite, first


def test_a_multirun_writes_a_finished_run_per_job(disk_sweep):
    tmp, _, first = disk_sweep
    jobs = job_dirs(tmp / "first")
    assert len(jobs) == 3
    hashes = {json.loads((j / "metrics.json").read_text())["config_hash"] for j in jobs}
    assert len(hashes) == 3
    assert "skipped" not in first.stdout


def test_rerunning_a_sweep_skips_finished_jobs_and_runs_only_new_points(disk_sweep):
    tmp, suite, _ = disk_sweep
    again = sweep(tmp, suite, tmp / "again", "stage.bm25.k1=1.2,1.5,1.8,2.0")
    jobs = job_dirs(tmp / "again")
    skipped = [j for j in jobs if (j / "skipped.json").is_file()]
    ran = [j for j in jobs if (j / "metrics.json").is_file()]
    assert [j.name for j in skipped] == ["0", "1", "2"] and [j.name for j in ran] == ["3"]
    assert again.stdout.count("skipped: config") == 3
    pointed = {json.loads((j / "skipped.json").read_text())["run_dir"] for j in skipped}
    assert pointed == {str(j.resolve()) for j in job_dirs(tmp / "first")}


def test_an_interrupted_job_without_metrics_json_is_run_again(disk_sweep):
    tmp, suite, _ = disk_sweep
    (job_dirs(tmp / "first")[1] / "metrics.json").unlink()  # as if killed before its last write
    sweep(tmp, suite, tmp / "resumed", "stage.bm25.k1=1.2,1.5,1.8")
    jobs = job_dirs(tmp / "resumed")
    assert [(j / "skipped.json").is_file() for j in jobs] == [True, False, True]
    assert (jobs[1] / "metrics.json").is_file()


def _recorded_copy(disk_sweep, target: Path) -> tuple[Path, str, str]:
    """A copy of a finished job of the sweep, recorded as its config's finished run in a fresh cache."""
    tmp, _, _ = disk_sweep
    run_dir = shutil.copytree(job_dirs(tmp / "first")[0], target)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    return run_dir, metrics["config_hash"], metrics["suite"]["content_hash"]


def test_a_finished_run_whose_run_trec_lacks_queries_answers_for_no_job(disk_sweep, tmp_path):
    # What memeval-merge recorded for a shard without its run.trec: the rows of per_query.csv say the
    # queries returned memories, the run.trec has no line of them, the values were scored from that.
    run_dir, cfg, suite = _recorded_copy(disk_sweep, tmp_path / "run")
    lines = (run_dir / "run.trec").read_text().splitlines(keepends=True)
    gone = lines[0].split()[0]
    (run_dir / "run.trec").write_text("".join(line for line in lines if line.split()[0] != gone))
    frame = read_per_query(run_dir / "per_query.csv")
    for name, values in derived_values(run_dir).items():
        frame[name] = values
    safe_frame(frame).to_csv(run_dir / "per_query.csv")
    code = json.loads((run_dir / "metrics.json").read_text())["code_version"]
    record_finished(tmp_path / "cache", cfg, suite, run_dir, None, code=code)  # its checksums match
    with pytest.warns(CacheWarning, match=f"run folder check.*run.trec.*{gone}"):
        assert finished_on_disk(tmp_path / "cache", cfg, suite, code=code) is None


def test_a_partial_merge_answers_for_no_job(disk_sweep, tmp_path):
    run_dir, cfg, suite = _recorded_copy(disk_sweep, tmp_path / "run")
    code = json.loads((run_dir / "metrics.json").read_text())["code_version"]
    record_finished(tmp_path / "cache", cfg, suite, run_dir, None, code=code)
    assert finished_on_disk(tmp_path / "cache", cfg, suite, code=code) is not None  # whole: it answers
    metrics = json.loads((run_dir / "metrics.json").read_text())
    metrics["partial"] = {"shards": "1 of 2", "missing": ["1/2"], "failures": []}
    (run_dir / "metrics.json").write_text(json.dumps(metrics))
    record_finished(tmp_path / "cache", cfg, suite, run_dir, None, code=code)  # as an old merge did
    with pytest.warns(CacheWarning, match="partial merge"):
        assert finished_on_disk(tmp_path / "cache", cfg, suite, code=code) is None


def test_resume_false_runs_every_job_again(disk_sweep):
    tmp, suite, _ = disk_sweep
    sweep(tmp, suite, tmp / "forced", "stage.bm25.k1=1.2,1.5", "resume=false")
    assert all(
        (j / "metrics.json").is_file() and not (j / "skipped.json").exists() for j in job_dirs(tmp / "forced")
    )


# --------------------------------------------------------------------------- memeval's sweep launcher


SWEEP_JOBS = [  # jobs as Hydra's sweeper hands them to a launcher: value and group overrides mixed
    ["suite=spark25", "variant=exp05", "stage.instruction_boost.weight=0.1", "tracking=none"],
    ["suite=spark25", "variant=exp05", "stage.instruction_boost.weight=0.35", "tracking=none"],
    ["depth=50", "suite=spark25", "variant=hybrid", "stage.fusion.k=20", "tracking=none"],
    ["depth=50", "suite=spark25", "variant=hybrid", "stage.fusion.k=80", "tracking=none"],
    ["suite=beam", "suite.path=../shared/beam/100K", "variant=bm25", "seed=3"],
]


def test_the_memeval_launcher_composes_each_job_as_hydra_does():
    """Every job's config, Hydra node included, equals Hydra's own load_sweep_config, while jobs that
    differ only in values share one composition."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.utils import create_config_search_path
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    from hydra_plugins.memeval_launcher.memeval_launcher import SweepLoader

    loader = ConfigLoaderImpl(config_search_path=create_config_search_path(str(CONF_DIR)))
    master = loader.load_configuration(
        "config", overrides=["hydra.sweep.dir=multirun/memeval-sweep"], run_mode=RunMode.MULTIRUN
    )
    sweep = SweepLoader(loader, master)
    for job in SWEEP_JOBS:
        sweep.load_sweep_config(master, job)
        ours = OmegaConf.to_container(sweep.for_launch(job), resolve=False)
        hydras = OmegaConf.to_container(loader.load_sweep_config(master, job), resolve=False)
        assert ours == hydras, job
        assert ours["hydra"]["overrides"]["task"] == job
    assert len(sweep.composer._bases) == 3  # exp05 x2, hybrid x2 (depth=50 is a value), beam
    assert sweep._validated == {}  # each validated config went to its launch


def test_a_sweep_over_values_starts_from_the_master_config_and_still_equals_hydras():
    """A job whose shaping overrides are the command line's own starts from the master config (composed
    once by Hydra already): its config, Hydra node included, is still Hydra's load_sweep_config. A job
    that adds a key (`+`) or lacks one of the command line's values is composed as before."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.utils import create_config_search_path
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    from hydra_plugins.memeval_launcher.memeval_launcher import SweepLoader

    cli = [
        "suite=spark25",
        "variant=exp05",
        "stage.instruction_boost.weight=0.1,0.35",
        "depth=50",
        "resume=false",
    ]
    loader = ConfigLoaderImpl(config_search_path=create_config_search_path(str(CONF_DIR)))
    master = loader.load_configuration("config", overrides=cli, run_mode=RunMode.MULTIRUN)
    sweep = SweepLoader(loader, master)
    jobs = [
        ["suite=spark25", "variant=exp05", f"stage.instruction_boost.weight={w}", "depth=50", "resume=false"]
        for w in (0.1, 0.35)
    ]
    for job in jobs:
        ours = OmegaConf.to_container(sweep.for_launch(job), resolve=False)
        assert ours == OmegaConf.to_container(loader.load_sweep_config(master, job), resolve=False), job
    assert sweep.composer._bases == {}  # both from the master: no composition
    others = [
        [*jobs[0], "+stage.instruction_boost.note=x"],  # an addition: never applied twice
        ["suite=spark25", "variant=exp05", "stage.instruction_boost.weight=0.2", "resume=false"],  # no depth
    ]
    for job in others:
        ours = OmegaConf.to_container(sweep.for_launch(job), resolve=False)
        assert ours == OmegaConf.to_container(loader.load_sweep_config(master, job), resolve=False), job
    assert len(sweep.composer._bases) == 1  # composed (once: both have the same shaping overrides)
    assert sweep.for_launch(jobs[0]) is not sweep.for_launch(jobs[0])  # each job its own copy


def test_the_launchers_config_copies_are_hydras():
    """The task's config is what Hydra's deepcopy-then-delete makes (values, flags, node types), and the
    HydraConfig view resolves `${hydra:...}` and interpolations as Hydra's copy of the node does."""
    import copy

    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.utils import create_config_search_path
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import OmegaConf, open_dict, read_write

    from hydra_plugins.memeval_launcher.memeval_launcher import _copy_without_hydra, _hydra_view

    loader = ConfigLoaderImpl(config_search_path=create_config_search_path(str(CONF_DIR)))
    master = loader.load_configuration("config", overrides=[], run_mode=RunMode.MULTIRUN)
    config = loader.load_sweep_config(master, ["variant=exp05", "stage.instruction_boost.weight=0.3"])
    with open_dict(config):  # as the launcher numbers a job
        config.hydra.job.id = config.hydra.job.num = 4
        config.hydra.runtime.output_dir = "multirun/memeval-sweep/4"
    hydras = copy.deepcopy(config)
    with read_write(hydras), open_dict(hydras):
        del hydras["hydra"]
    ours = _copy_without_hydra(config)
    assert "hydra" in config and "hydra" not in ours  # the job's own config keeps its node
    assert OmegaConf.to_container(ours) == OmegaConf.to_container(hydras)
    assert list(ours) == list(hydras)
    for path in ("", "stage", "stage.instruction_boost", "variant"):
        a, b = (OmegaConf.select(c, path) if path else c for c in (ours, hydras))
        flags = [(OmegaConf.is_struct(c), OmegaConf.is_readonly(c)) for c in (a, b)]
        assert flags[0] == flags[1]
        assert a._metadata == b._metadata and type(a) is type(b)
    ours.stage.instruction_boost.weight = 0.9  # a copy: the job's config is untouched
    assert config.stage.instruction_boost.weight == 0.3

    from hydra.core.utils import setup_globals

    setup_globals()  # the `hydra:` and `now:` resolvers, as in a running app
    # `${now:...}` in the run and sweep dirs resolves once per config root, at whichever second each copy
    # is first read: pinned here, or the two sides differ whenever a second turns between them.
    OmegaConf.register_new_resolver("now", lambda pattern: "2026-01-02_03-04", use_cache=True, replace=True)
    before = HydraConfig.instance().cfg
    try:
        HydraConfig.instance().set_config(copy.deepcopy(config))
        theirs = OmegaConf.to_container(HydraConfig.get(), resolve=True)
        view = HydraConfig.instance().cfg = _hydra_view(config)
        assert OmegaConf.to_container(HydraConfig.get(), resolve=True) == theirs
        assert OmegaConf.is_readonly(view.hydra) and view.hydra._get_parent() is config
        assert OmegaConf.select(config, "hydra.job.name") == HydraConfig.get().job.name
    finally:
        HydraConfig.instance().cfg = before
        setup_globals()  # the real `now:` again


def test_a_job_with_an_unknown_key_fails_before_any_job_runs(tmp_path):
    out = subprocess.run(
        [
            sys.executable, "-m", "experiments.run", "-m", "tracking=none", "progress=false",
            "stage.fusion.k=10,20", "stage.fusion.no_such_key=1", f"hydra.sweep.dir={tmp_path}/sweep",
        ],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode != 0
    assert "no_such_key" in out.stderr
    assert not list((tmp_path / "sweep").glob("*/metrics.json"))  # no job ran


def test_the_memeval_launcher_writes_each_job_what_hydras_basic_launcher_writes(tmp_path):
    """Same jobs through both launchers: the same .hydra files (read back), job logs and results."""
    import yaml

    suite = write_tiny_suite(tmp_path)
    points = ("stage.bm25.k1=1.2,1.8", "+hydra.job.env_set.MEMEVAL_TEST_ENV=x", "resume=false")
    runs = {}
    for launcher in ("basic", "memeval"):
        out = sweep(tmp_path, suite, tmp_path / launcher, *points, f"hydra/launcher={launcher}")
        assert out.returncode == 0, out.stderr
        runs[launcher] = job_dirs(tmp_path / launcher)
    assert [j.name for j in runs["basic"]] == [j.name for j in runs["memeval"]] == ["0", "1"]
    for basic, ours in zip(runs["basic"], runs["memeval"], strict=True):
        for name in ("config.yaml", "hydra.yaml", "overrides.yaml"):
            theirs, mine = (yaml.safe_load((d / ".hydra" / name).read_text()) for d in (basic, ours))
            if name == "hydra.yaml":  # where each launcher wrote, and which launcher: the only differences
                for doc, where in ((theirs, basic), (mine, ours)):
                    assert doc["hydra"]["runtime"]["output_dir"] == str(where.resolve())
                    assert doc["hydra"]["sweep"]["dir"] == str(where.parent)
                    doc["hydra"]["runtime"]["output_dir"] = doc["hydra"]["sweep"]["dir"] = None
                    doc["hydra"]["launcher"] = doc["hydra"]["runtime"]["choices"]["hydra/launcher"] = None
                    kept = ("hydra/launcher", "hydra.sweep")
                    doc["hydra"]["overrides"]["hydra"] = [
                        o for o in doc["hydra"]["overrides"]["hydra"] if not o.startswith(kept)
                    ]
            assert mine == theirs, name
        assert (ours / "run.log").is_file() and (basic / "run.log").is_file()
        # the same scores (the second sweep's latencies come from the first one's cache: not compared)
        metrics = [json.loads((d / "metrics.json").read_text()) for d in (basic, ours)]
        scores = [{k: v for k, v in m["overall"].items() if "@" in k or k in ("RR", "AP")} for m in metrics]
        assert scores[0] == scores[1] and len(scores[0]) >= 5
        assert metrics[0]["config_hash"] == metrics[1]["config_hash"]
