"""Inference backends (retrieval/backends.py): each backend gives the torch model's vectors and scores
(int8 within a tolerance), is part of the fingerprint and cache key, exports once into its folder
(also under parallel processes), and a missing runtime package is a clear error. Tiny random BERTs
built here stand in for MiniLM and a trained reranker (exports take a second, not ten)."""

from __future__ import annotations

import logging
import multiprocessing
from pathlib import Path

import numpy as np
import pytest

from retrieval import backends
from retrieval.backends import BackendUnavailableError, DegenerateExportError, check_backend
from retrieval.compute import cpu_isa
from retrieval.encoder import SentenceEncoder
from retrieval.reranker import CrossEncoderScorer
from tests.retrieval.test_cross_encoder import build_tiny_cross_encoder
from tests.support import build_tiny_bert

TEXTS = ["the cat sat on the mat", "a dog barked at the mailman " * 8, "quarterly budget review", "ok"]
CALIBRATION = tuple(f"calibration text {i}: the team met about the budget " * (1 + i % 5) for i in range(24))


def build_tiny_bi_encoder(folder: Path) -> Path:
    """A randomly initialised 2-layer BERT saved with MiniLM's tokenizer (mean pooling by default)."""
    return build_tiny_bert(folder, cross_encoder=False)


@pytest.fixture(scope="module")
def tiny_bi(tmp_path_factory) -> Path:
    return build_tiny_bi_encoder(tmp_path_factory.mktemp("tiny_bi"))


@pytest.fixture(scope="module")
def tiny_ce(tmp_path_factory) -> Path:
    return build_tiny_cross_encoder(tmp_path_factory.mktemp("tiny_ce_backends"))


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("exports")


def encoder(
    model: Path, backend: str, exports: Path, cache: Path | None = None, calibration=CALIBRATION
) -> SentenceEncoder:
    return SentenceEncoder(
        model=str(model),
        backend=backend,
        export_dir=str(exports),
        cache_dir=str(cache) if cache else None,
        calibration=calibration,
    )


@pytest.mark.slow  # the first export takes ~15 s even for a tiny model (torch.export tracing)
@pytest.mark.parametrize("backend,tolerance", [("onnx", 1e-5), ("openvino", 1e-4), ("onnx-int8", 0.05)])
def test_bi_encoder_backends_give_the_torch_vectors(tiny_bi, exports, backend, tolerance):
    reference = encoder(tiny_bi, "torch", exports).encode(TEXTS, "document")
    vectors = encoder(tiny_bi, backend, exports).encode(TEXTS, "document")
    assert vectors.shape == reference.shape and vectors.dtype == np.float32
    cosine = (vectors * reference).sum(axis=1)
    assert cosine.min() > 1 - tolerance, cosine
    folder = next(exports.glob(f"{tiny_bi.name}-*-bi-encoder"))
    assert (folder / ("model-int8.onnx" if backend == "onnx-int8" else "model.onnx")).is_file()


@pytest.mark.slow  # one export
def test_an_export_keeps_the_exporters_info_chatter_out_of_the_console(tiny_bi, tmp_path, caplog):
    """onnx_ir and onnxscript log ~100 INFO lines an export; under Hydra's INFO root logger they came
    before a run's results (issue 25). Their warnings still show."""
    for name in backends.EXPORT_LOGGERS:  # as a fresh process has them, whatever ran before here
        logging.getLogger(name).setLevel(logging.NOTSET)
    caplog.set_level(logging.INFO)
    encoder(tiny_bi, "onnx", tmp_path / "fresh_exports").encode(TEXTS, "document")
    assert list((tmp_path / "fresh_exports").rglob("*.onnx"))  # it did export
    chatter = [
        f"{r.name}: {r.getMessage()[:80]}"
        for r in caplog.records
        if r.name.startswith(tuple(backends.EXPORT_LOGGERS)) and r.levelno < logging.WARNING
    ]
    assert not chatter


@pytest.mark.slow
def test_openvino_int8_is_calibrated_on_the_texts_it_is_given(tiny_bi, exports, tmp_path):
    reference = encoder(tiny_bi, "torch", exports).encode(TEXTS, "document")
    int8 = encoder(tiny_bi, "openvino-int8", exports, tmp_path)
    vectors = int8.encode(TEXTS, "document")
    assert vectors.shape == reference.shape and vectors.dtype == np.float32
    assert (vectors * reference).sum(axis=1).min() > 0.95
    folder = next(exports.glob(f"{tiny_bi.name}-*-bi-encoder"))
    models = sorted(p.suffix for p in folder.glob(f"ov-int8-{backends.calibration_hash(CALIBRATION)}-*"))
    assert models == [".bin", ".xml"]
    assert (folder / "model-eager.onnx").is_file()
    # Other calibration texts: another model, another fingerprint, another cache folder.
    other = encoder(tiny_bi, "openvino-int8", exports, tmp_path, calibration=lambda: CALIBRATION[:12])
    assert other.fingerprint() != int8.fingerprint()
    assert other._folder("document", "") != int8._folder("document", "")
    other.encode(TEXTS[:1], "document")
    assert len(list(folder.glob("ov-int8-*.xml"))) == 2


def test_openvino_int8_without_calibration_texts_is_a_clear_error(tiny_bi, tiny_ce, exports):
    with pytest.raises(ValueError, match="needs calibration texts"):
        encoder(tiny_bi, "openvino-int8", exports, calibration=None).encode(["x"], "document")
    with pytest.raises(ValueError, match="for bi-encoders"):
        CrossEncoderScorer(
            model=str(tiny_ce), backend="openvino-int8", cache_dir=None, export_dir=str(exports)
        ).score("q", ["x"])


def test_the_calibration_texts_are_generated_long_and_short_and_stable():
    from experiments.suites.generators.beam_synth import sample_texts

    texts = sample_texts()
    assert texts == sample_texts()  # the same texts, hence the same int8 model, in every process
    words = sorted(len(t.split()) for t in texts)
    assert words[0] < 20 and words[-1] > 250  # questions and messages joined to BEAM's length


@pytest.mark.slow
@pytest.mark.parametrize("backend,tolerance", [("onnx", 1e-4), ("openvino", 1e-3), ("onnx-int8", 0.05)])
def test_cross_encoder_backends_give_the_torch_scores(tiny_ce, exports, backend, tolerance):
    def scorer(b: str) -> CrossEncoderScorer:
        return CrossEncoderScorer(
            model=str(tiny_ce), max_length=64, cache_dir=None, backend=b, export_dir=str(exports)
        )

    reference = scorer("torch").score("where is the cat", TEXTS)
    if backend == "onnx-int8" and cpu_isa() == "avx2":
        # Seen on an avx2-only EPYC (2026-11-28): static int8 maps this tiny random model's scores far from
        # fp32 (relative error ~2.5), and the export check refuses it rather than rank with it.
        with pytest.raises(DegenerateExportError, match="far from fp32"):
            scorer(backend).score("where is the cat", TEXTS)
        return
    scores = scorer(backend).score("where is the cat", TEXTS)
    allowed = tolerance * max(1.0, np.abs(reference).max())
    assert np.abs(scores - reference).max() < allowed
    if backend != "onnx-int8":
        # The same order, except between texts whose torch scores are closer than the allowed error (a
        # random tiny model's logits can differ by less than that: their order is noise, not a ranking).
        apart = (reference[:, None] - reference[None, :]) > 2 * allowed
        assert ((scores[:, None] - scores[None, :]) > 0)[apart].all()


def test_the_backend_is_part_of_the_fingerprint_and_the_cache_folders(tiny_bi, tiny_ce, exports, tmp_path):
    encoders = [encoder(tiny_bi, b, exports, tmp_path) for b in backends.BACKENDS]
    assert len({e.fingerprint() for e in encoders}) == len(backends.BACKENDS)
    assert len({e._folder("document", "") for e in encoders}) == len(backends.BACKENDS)
    # torch keeps the key it had before backends existed, so the shared fp32 cache stays valid
    assert "backend" not in encoders[0].fingerprint() and "backend=onnx-int8" in encoders[2].fingerprint()
    # openvino-int8 is for bi-encoders only (tested below)
    ce_backends = [b for b in backends.BACKENDS if b != "openvino-int8"]
    scorers = [
        CrossEncoderScorer(model=str(tiny_ce), backend=b, cache_dir=str(tmp_path)) for b in ce_backends
    ]
    assert len({s.fingerprint() for s in scorers}) == len(ce_backends)
    assert len({s._folder() for s in scorers}) == len(ce_backends)


def test_an_unknown_backend_or_a_missing_package_is_a_clear_error(tiny_bi, monkeypatch):
    every = "torch, onnx, onnx-int8, openvino, openvino-bf16, openvino-int8"
    with pytest.raises(ValueError, match=f"backend must be one of {every}"):
        check_backend("tensorrt")
    monkeypatch.setitem(backends.PACKAGES, "onnx", [("memeval_no_such_runtime", "no-such-runtime")])
    with pytest.raises(BackendUnavailableError, match="pip install no-such-runtime"):
        encoder(tiny_bi, "onnx", Path("unused"), None).encode(["x"], "document")


def _export_in_child(args) -> str:
    model, folder = args
    from retrieval.encoder import load_sentence_transformer

    model_obj = load_sentence_transformer(model, "cpu", "onnx-int8", folder)
    return model_obj[0].model.onnx_path


@pytest.mark.slow
def test_parallel_processes_export_once_into_a_complete_folder(tiny_bi, tmp_path):
    # two processes race for one export (a third only adds its ~10 s of imports)
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        paths = pool.map(_export_in_child, [(str(tiny_bi), str(tmp_path))] * 2)
    assert len(set(paths)) == 1
    folder = Path(paths[0]).parent
    assert sorted(p.name for p in folder.iterdir()) == ["model-int8.onnx", "model.onnx"]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith((".tmp", ".old"))]  # no half exports left
