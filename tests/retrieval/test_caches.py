"""Code-aware, verified caches: keyed by the code that computed them, checksummed, never fatal, never
replaying an earlier run's latency; the gate always measures fresh.

Real components throughout: the BM25 pipeline, the MiniLM encoder, a tiny real cross-encoder, the runner
composed from the project's Hydra configs, and (slow tier) the gate run in subprocesses on a copy of the
project whose tokenizer is then changed.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from experiments.evaluate.table import evaluate
from experiments.run.resume import code_version, finished_on_disk, record_finished, run_version
from retrieval import cache_io
from retrieval.cache_io import CacheWarning
from retrieval.code_version import library_versions, source_hash
from retrieval.encoder import SentenceEncoder
from retrieval.pipeline import Pipeline
from retrieval.reranker import CrossEncoderScorer
from retrieval.retrievers.bm25 import BM25Retriever
from retrieval.reuse import CandidateCache, ProcessMemo
from retrieval.stage import RankStage
from retrieval.types import Candidates
from tests.retrieval.test_cross_encoder import build_tiny_cross_encoder
from tests.support import REPO, tiny_suite, write_run_files


@dataclass(frozen=True, kw_only=True)
class Boost(RankStage):
    name = "boost"
    weight: float = 1.0

    def __call__(self, query, candidates: Candidates) -> Candidates:
        bonus = self.weight * (np.arange(len(candidates)) % 2 == 0)
        return candidates.with_score(self.name, candidates.score + bonus)


@dataclass(frozen=True, kw_only=True)
class Halve(Boost):
    name = "halve"


def bm25_boost(weight: float = 1.0) -> Pipeline:
    return Pipeline((BM25Retriever(top_n=5), Boost(weight=weight)), depth=100)


def run(pipeline: Pipeline, suite, **kwargs):
    hashed = suite.content_hash
    return pipeline.run(suite.memories, suite.queries, suite_hash=hashed, progress=False, **kwargs)


def same_rankings(a, b) -> None:
    assert len(a.ranked) == len(b.ranked)
    for x, y in zip(a.ranked, b.ranked, strict=True):
        assert x.memory_ids == y.memory_ids
        np.testing.assert_array_equal(x.scores, y.scores)


def only_entry(folder: Path, pattern: str) -> Path:
    (path,) = [
        p for p in folder.rglob(pattern) if not p.name.startswith(".") and not p.name.startswith("scope-")
    ]
    return path


# --- keys: the code that computed an entry --------------------------------------------------------------


def test_source_hash_follows_the_code_of_a_package(tmp_path, monkeypatch):
    package = tmp_path / "pkg_under_hash"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tokenize.py").write_text("KEEP = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = source_hash.__wrapped__("pkg_under_hash")
    assert before == source_hash.__wrapped__("pkg_under_hash")  # deterministic
    (package / "tokenize.py").write_text("KEEP = 3\n")
    assert source_hash.__wrapped__("pkg_under_hash") != before
    assert source_hash.__wrapped__("pkg_under_hash.tokenize") != source_hash.__wrapped__("pkg_under_hash")
    assert "torch=" in library_versions("torch") and "absent" in library_versions("no-such-dist-here")


def test_the_finished_run_index_answers_only_for_the_same_code(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_run_files(run_dir, {"config_hash": "cfg", "suite": {"content_hash": "sh"}, "overall": {"P@5": 0.5}})
    record_finished(tmp_path / "cache", "cfg", "sh", run_dir, None, code="old-code")
    assert finished_on_disk(tmp_path / "cache", "cfg", "sh", code="old-code").overall == {"P@5": 0.5}
    assert finished_on_disk(tmp_path / "cache", "cfg", "sh", code="new-code") is None
    assert finished_on_disk(tmp_path / "cache", "cfg", "sh") is None  # this process's code is neither
    assert source_hash("retrieval", "experiments") not in code_version()  # libraries are in it too


# --- verified entries: torn or altered files are recomputed, with a warning -------------------------------


@pytest.mark.parametrize("damage", ["torn", "checksum"])
def test_a_damaged_candidate_entry_is_recomputed_with_a_warning(tmp_path, damage):
    suite = tiny_suite()
    fresh = run(bm25_boost(), suite)  # no cache at all
    cache = CandidateCache(tmp_path / "candidates")
    run(bm25_boost(), suite, cache=cache)
    path = only_entry(tmp_path / "candidates", "*.npz")  # the suite's entry; then each scope's
    for entry in [path, *(tmp_path / "candidates").glob("scope-*.npz")]:
        data = bytearray(entry.read_bytes())
        if damage == "torn":
            entry.write_bytes(bytes(data[: len(data) // 2]))
        else:  # one byte changed: only the checksum can tell
            data[-20] ^= 0x01
            entry.write_bytes(bytes(data))
    with pytest.warns(CacheWarning, match=f"{path.name}.*checksum mismatch"):
        again = run(bm25_boost(), suite, cache=cache)
    assert not again.prefix_cache_hit  # recomputed, not trusted
    same_rankings(again, fresh)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)  # reported once: the rewritten entry verifies
        third = run(bm25_boost(), suite, cache=cache)
    assert third.prefix_cache_hit
    same_rankings(third, fresh)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    """A tiny randomly initialised BERT: a cross-encoder, and (mean pooling) a bi-encoder standing in for
    MiniLM, so the cache tests run the real sentence-transformers code paths quickly."""
    import sentence_transformers  # noqa: F401  (its import is most of the cost: paid once, here)

    return str(build_tiny_cross_encoder(tmp_path_factory.mktemp("tiny_model")))


def test_a_torn_embedding_shard_is_dropped_and_its_texts_encoded_again(tmp_path, tiny_model):
    model = tiny_model
    texts = ["always use type hints", "the budget is 2000 dollars", "deploy on a free host"]
    fresh = SentenceEncoder(model=model, cache_dir=None, show_progress=False).encode(texts, role="document")
    cache = str(tmp_path / "embeddings")
    SentenceEncoder(model=model, cache_dir=cache, show_progress=False).encode(texts, role="document")
    shard = only_entry(tmp_path / "embeddings", "*.npz")
    shard.write_bytes(shard.read_bytes()[:200])  # a write cut short (disk full, copy interrupted)
    reader = SentenceEncoder(model=model, cache_dir=cache, show_progress=False)
    with pytest.warns(CacheWarning, match=shard.name):
        vectors = reader.encode(texts, role="document")
    assert reader.stats == {"hits": 0, "misses": 3}
    np.testing.assert_allclose(vectors, fresh, atol=1e-6)
    assert not shard.exists()
    again = SentenceEncoder(model=model, cache_dir=cache, show_progress=False)
    np.testing.assert_array_equal(again.encode(texts, role="document"), vectors)
    assert again.stats == {"hits": 3, "misses": 0}


def test_an_altered_rerank_shard_fails_its_checksum_and_is_scored_again(tmp_path, tiny_model):
    model = tiny_model
    texts = ["note about black line length", "lunch on friday"]
    first = CrossEncoderScorer(model=model, max_length=32, cache_dir=str(tmp_path / "scores"))
    scores = first.score("python formatter", texts)
    shard = only_entry(tmp_path / "scores", "*.npz")
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x40
    shard.write_bytes(bytes(data))
    reader = CrossEncoderScorer(model=model, max_length=32, cache_dir=str(tmp_path / "scores"))
    with pytest.warns(CacheWarning, match=f"{shard.name}.*checksum"):
        again = reader.score("python formatter", texts)
    assert reader.stats == {"hits": 0, "misses": 2}
    np.testing.assert_allclose(again, scores, rtol=1e-6)


def test_unwritable_embedding_and_score_caches_warn_once_and_still_answer(tmp_path, tiny_model):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder should be")
    encoder = SentenceEncoder(model=tiny_model, cache_dir=str(blocker), show_progress=False)
    scorer = CrossEncoderScorer(model=tiny_model, max_length=32, cache_dir=str(blocker))
    with pytest.warns(CacheWarning, match="cannot be written") as caught:
        for text in ("one", "two", "three"):  # three writes, one warning per folder
            assert encoder.encode([text], role="document").shape[0] == 1
            assert scorer.score("query", [text]).shape == (1,)
    assert len([w for w in caught if issubclass(w.category, CacheWarning)]) == 2
    assert encoder.stats["misses"] == 3 and scorer.stats["misses"] == 3


def test_the_cache_file_helper_verifies_what_it_reads(tmp_path):
    path = tmp_path / "entry.bin"
    assert cache_io.write_verified(path, b"payload") and cache_io.read_verified(path) == b"payload"
    assert cache_io.read_verified(tmp_path / "missing.bin") is None
    path.write_bytes(b"payload")  # an old, unframed file: not trusted
    with pytest.warns(CacheWarning, match="entry.bin"):
        assert cache_io.read_verified(path) is None
    assert not path.exists()


# --- an unwritable cache degrades to no cache ----------------------------------------------------------


def compose(*overrides: str):
    from experiments.configure.compose import compose_config

    base = ["suite=spark25", "variant=bm25", "tracking=none", "progress=false"]
    return compose_config([*base, *overrides])


def test_an_unwritable_cache_dir_warns_and_the_run_still_writes_its_results(tmp_path):
    from experiments.run.app import run_experiment

    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file where the cache folder should be")
    cfg = compose(f"cache_dir={blocker}", "resume=true")
    with pytest.warns(CacheWarning, match="cannot be written") as caught:
        metrics = run_experiment(cfg, tmp_path / "run")
    written = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert written["overall"]["P@5"] == metrics["overall"]["P@5"] > 0
    assert written["overall"]["latency_measured"] is True
    # once a folder: candidates, embeddings, token counts
    assert len({str(w.message) for w in caught if issubclass(w.category, CacheWarning)}) <= 3
    assert blocker.read_text().startswith("a file")


# --- latency: measured in this run, or absent and marked --------------------------------------------------


def test_a_prefix_cache_hit_reports_no_replayed_latency(tmp_path):
    suite = tiny_suite()
    cache = CandidateCache(tmp_path)
    first = run(bm25_boost(), suite, cache=cache)
    second = run(bm25_boost(), suite, cache=cache)
    assert not first.prefix_cache_hit and first.cache["latency_measured"]
    assert all(not math.isnan(ms) for r in first.ranked for ms in r.timings_ms.values())
    assert second.prefix_cache_hit and second.cache["prefix_candidates"] == {"hit": True, "source": "disk"}
    for r in second.ranked:
        assert math.isnan(r.timings_ms["bm25"]) and math.isnan(r.latency_ms)  # not replayed
        assert r.timings_ms["boost"] >= 0  # the stage that ran is measured
    assert second.cache["unmeasured_stages"] == ["bm25"] and not second.cache["latency_measured"]
    metrics = evaluate(suite, second, ["P@5"]).metrics
    assert metrics["overall"]["latency_ms_p50"] is None and metrics["overall"]["latency_ms_p95"] is None
    assert metrics["overall"]["latency_measured"] is False
    assert metrics["cache"]["prefix_candidates"]["hit"] is True
    assert evaluate(suite, first, ["P@5"]).metrics["overall"]["latency_ms_p50"] > 0


def test_reused_rank_levels_of_the_process_memo_are_not_timed_again():
    suite, memo = tiny_suite(), ProcessMemo()
    stages = (BM25Retriever(top_n=5), Halve(weight=0.5))
    first = run(Pipeline((*stages, Boost(weight=1.0)), depth=100), suite, memo=memo)
    swept = run(
        Pipeline((*stages, Boost(weight=2.0)), depth=100), suite, memo=memo
    )  # only the last stage changes
    assert first.cache["rank_levels_reused"] == 0 and first.cache["latency_measured"]
    assert swept.cache["rank_levels_reused"] == 1
    assert swept.cache["prefix_candidates"]["source"] == "process memo"
    assert swept.cache["unmeasured_stages"] == ["bm25", "halve"]
    for r in swept.ranked:  # kept stages: unknown, not the first run's figures; the swept one: measured
        assert math.isnan(r.timings_ms["halve"]) and not math.isnan(r.timings_ms["boost"])
        assert math.isnan(r.latency_ms)
    assert evaluate(suite, swept, ["P@5"]).metrics["overall"]["latency_ms_p50"] is None


def test_a_second_run_with_the_same_cache_states_what_came_from_it(tmp_path):
    from experiments.run.app import run_experiment

    cfg = compose(f"cache_dir={tmp_path / 'cache'}", "resume=false")
    run_experiment(cfg, tmp_path / "first")
    run_experiment(cfg, tmp_path / "second")  # resume=false: runs again, prefix from the disk cache
    first = json.loads((tmp_path / "first" / "metrics.json").read_text())
    second = json.loads((tmp_path / "second" / "metrics.json").read_text())
    assert first["cache"]["prefix_candidates"]["hit"] is False and first["overall"]["latency_ms_p50"] > 0
    assert second["cache"]["prefix_candidates"] == {"hit": True, "source": "disk"}
    assert second["overall"]["latency_ms_p50"] is None and second["overall"]["latency_measured"] is False
    assert second["overall"]["P@5"] == first["overall"]["P@5"]
    from experiments.configure.build import build_pipeline

    assert first["code_version"] == run_version(build_pipeline(cfg)) != code_version()


# --- the stale-cache scenario end to end (slow: five subprocesses) ----------------------------------------


def copy_project(dest: Path) -> Path:
    for part in ("retrieval", "experiments", "datasets/spark25", "reports/baselines"):
        shutil.copytree(REPO / part, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def in_copy(root: Path, *args: str) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1", "MLFLOW_TRACKING_URI": ""}
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=root, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
def test_a_changed_tokenizer_fails_the_gate_with_the_same_cache(tmp_path):
    root = copy_project(tmp_path / "project")
    run_args = ("experiments.run", "variant=bm25", "tracking=none", "progress=false", "resume=true")
    gate = in_copy(root, "experiments.gate", "spark25", "bm25")
    assert gate.returncode == 0, gate.stdout[-2000:] + gate.stderr[-2000:]
    assert "**PASS**" in gate.stdout and "0.1917" in gate.stdout
    assert not (root / ".memeval_cache" / "candidates").exists()  # the gate reads and writes no prefix cache
    warm = in_copy(root, *run_args, "hydra.run.dir=outputs/warm")  # fills the prefix cache and the index
    assert warm.returncode == 0, warm.stderr[-2000:]
    assert list((root / ".memeval_cache" / "candidates").glob("*.npz"))

    tokenize = root / "retrieval" / "tokenize.py"
    source = tokenize.read_text()
    changed = source.replace(
        "return [t for t in _TOKEN.findall(text.lower()) if t not in stopwords]",
        "return [t for t in _TOKEN.findall(text.lower()) if t not in stopwords][:3]",
    )
    assert changed != source
    tokenize.write_text(changed)

    gate = in_copy(root, "experiments.gate", "spark25", "bm25")
    assert gate.returncode == 1, gate.stdout[-2000:] + gate.stderr[-2000:]
    assert "**FAIL**" in gate.stdout and "0.0833" in gate.stdout
    # The runner with the same cache and resume on: no finished run and no candidates of the old code.
    rerun = in_copy(root, *run_args, "hydra.run.dir=outputs/rerun")
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert "skipped" not in rerun.stdout and "prefix cache miss" in rerun.stdout
    metrics = json.loads((root / "outputs" / "rerun" / "metrics.json").read_text())
    assert metrics["overall"]["P@5"] == pytest.approx(0.0833, abs=1e-4)
    assert metrics["cache"]["prefix_candidates"]["hit"] is False
