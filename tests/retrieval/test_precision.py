"""Device and precision are part of a result's identity (retrieval/compute.py): every backend computes in
its pinned precision whatever the machine's default (OpenVINO's is bf16 on AMX and AVX-512 BF16 CPUs),
the compute identity (device, precision, CPU ISA class or GPU name) is in the fingerprints and cache
keys, and a run records it in tags.json. Tiny random BERTs built here stand in for the real models; the
CUDA test runs the real MiniLM where a GPU is."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from retrieval import compute
from retrieval.backends import BackendUnavailableError
from retrieval.compute import compute_identity, cpu_isa, isa_class
from retrieval.encoder import SentenceEncoder, load_sentence_transformer
from retrieval.pipeline import Pipeline
from retrieval.reranker import CrossEncoderScorer, load_cross_encoder
from retrieval.retrievers.dense import DenseRetriever
from retrieval.stage import FieldError
from tests.support import REPO, build_tiny_bert

TEXTS = ["the cat sat on the mat", "a dog barked at the mailman " * 8, "quarterly budget review", "ok"]
CALIBRATION = tuple(f"calibration text {i}: the team met about the budget " * (1 + i % 5) for i in range(24))


@pytest.fixture(scope="module")
def tiny_bi(tmp_path_factory) -> Path:
    return build_tiny_bert(tmp_path_factory.mktemp("tiny_bi"), cross_encoder=False)


@pytest.fixture(scope="module")
def tiny_ce(tmp_path_factory) -> Path:
    return build_tiny_bert(tmp_path_factory.mktemp("tiny_ce"), cross_encoder=True)


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("exports")


def test_the_isa_class_is_read_from_the_cpu_flags():
    assert isa_class({"avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"}) == "amx"
    assert isa_class({"avx2", "avx512f", "avx512_bf16"}) == "avx512_bf16"
    assert isa_class({"avx2", "avx512f", "avx512_vnni"}) == "avx512"
    assert isa_class({"avx", "avx2", "fma"}) == "avx2"
    assert isa_class({"sse4_2"}) == "x86_64"
    assert isa_class({"asimd", "bf16"}, "aarch64") == "aarch64_bf16"
    flags = next(
        (
            line.split(":", 1)[1].split()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith(("flags", "Features"))
        ),
        [],
    )
    assert cpu_isa() == isa_class(flags, platform.machine())


def hint(runtime) -> str:
    return runtime.get_property("INFERENCE_PRECISION_HINT").get_type_name()


@pytest.mark.slow  # each export takes ~15 s even for a tiny model (torch.export tracing)
@pytest.mark.parametrize("backend", ["openvino", "openvino-int8"])
def test_openvino_computes_in_fp32_whatever_the_cpus_default(tiny_bi, tiny_ce, exports, backend):
    # The hint is read back from the model as compiled; OpenVINO's own default is bf16 on AMX and
    # AVX-512 BF16 CPUs (this machine's: ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT")).
    model = load_sentence_transformer(str(tiny_bi), "cpu", backend, str(exports), CALIBRATION)
    assert hint(model[0].model.runtime) == "f32"
    if backend == "openvino":  # openvino-int8 is for bi-encoders only
        scorer = load_cross_encoder(str(tiny_ce), 64, "cpu", backend, str(exports))
        assert hint(scorer[0].model.runtime) == "f32"


@pytest.mark.slow
def test_openvino_bf16_computes_in_bf16_where_the_cpu_can_and_is_refused_where_it_cannot(tiny_bi, exports):
    import openvino as ov

    if "BF16" not in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
        with pytest.raises(BackendUnavailableError, match="bf16"):
            load_sentence_transformer(str(tiny_bi), "cpu", "openvino-bf16", str(exports))
        return
    model = load_sentence_transformer(str(tiny_bi), "cpu", "openvino-bf16", str(exports))
    assert hint(model[0].model.runtime) == "bf16"

    def vectors(backend: str) -> np.ndarray:
        return SentenceEncoder(
            model=str(tiny_bi), backend=backend, export_dir=str(exports), cache_dir=None
        ).encode(TEXTS, "document")

    fp32, bf16, torch_ = vectors("openvino"), vectors("openvino-bf16"), vectors("torch")
    fp32_error, bf16_error = np.abs(fp32 - torch_).max(), np.abs(bf16 - torch_).max()
    # fp32 OpenVINO gives torch's vectors to rounding (measured 9e-8 on this tiny model; bf16 3.6e-5) ...
    assert fp32_error < 1e-6
    assert bf16_error > 10 * fp32_error  # ... bf16 does not: it really computes in bf16 ...
    assert (bf16 * torch_).sum(axis=1).min() > 0.99  # ... but stays close


def test_torch_loads_fp32_weights_from_a_checkpoint_saved_in_bf16(tmp_path):
    import torch
    from transformers import AutoModel

    folder = build_tiny_bert(tmp_path / "bf16", cross_encoder=False)
    AutoModel.from_pretrained(folder, dtype=torch.bfloat16).save_pretrained(folder)  # config dtype: bf16
    assert json.loads((folder / "config.json").read_text())["dtype"] == "bfloat16"
    model = load_sentence_transformer(str(folder), "cpu")
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    ce_folder = build_tiny_bert(tmp_path / "bf16_ce", cross_encoder=True)
    from transformers import AutoModelForSequenceClassification

    AutoModelForSequenceClassification.from_pretrained(ce_folder, dtype=torch.bfloat16).save_pretrained(
        ce_folder
    )
    scorer = load_cross_encoder(str(ce_folder), 64, "cpu")
    assert {p.dtype for p in scorer.model.parameters()} == {torch.float32}


def test_torch_matmuls_stay_fp32_when_the_process_asks_for_less():
    import torch

    # The real MiniLM: "medium" moved its vectors by 3.5e-7 on this CPU (AVX-512 BF16) before the pin.
    encoder = SentenceEncoder(cache_dir=None, device="cpu")
    reference = encoder.encode(TEXTS, "document")
    torch.set_float32_matmul_precision("medium")  # e.g. set by a library: bf16 passes on a bf16 CPU
    try:
        again = encoder.encode(TEXTS, "query")
        assert torch.get_float32_matmul_precision() == "medium"  # restored after the encode
    finally:
        torch.set_float32_matmul_precision("highest")
    np.testing.assert_array_equal(again, reference)


def test_the_cache_keys_change_with_the_precision_and_the_cpu_isa(tiny_bi, tiny_ce, tmp_path, monkeypatch):
    encoder = SentenceEncoder(model=str(tiny_bi), cache_dir=str(tmp_path), device="cpu")
    scorer = CrossEncoderScorer(model=str(tiny_ce), cache_dir=str(tmp_path), device="cpu")
    pipeline = Pipeline((DenseRetriever(encoder=encoder),), depth=10)

    def keys() -> list[object]:
        return [
            encoder.fingerprint(),
            encoder._folder("document", ""),
            pipeline.prefix_fingerprint("suite-hash", ["q1"]),  # the candidates' key
            scorer.fingerprint(),
            scorer._folder(),
        ]

    before = keys()
    assert f"compute=cpu:{cpu_isa()}/fp32" in before[0]
    assert pipeline.compute() == {"dense.encoder": f"cpu:{cpu_isa()}/fp32"}
    monkeypatch.setitem(compute.PRECISION, "torch", "bf16")  # another precision, the same model
    changed = keys()
    assert all(a != b for a, b in zip(changed, before, strict=True))
    monkeypatch.setitem(compute.PRECISION, "torch", "fp32")
    assert keys() == before
    other = "avx2" if cpu_isa() != "avx2" else "amx"
    monkeypatch.setattr(compute, "cpu_isa", lambda: other)  # the same run on another kind of CPU
    moved = keys()
    assert all(a != b for a, b in zip(moved, before, strict=True))
    assert all(a != b for a, b in zip(moved, changed, strict=True))


def test_a_bad_device_is_a_field_error_naming_it(tiny_bi):
    with pytest.raises(FieldError, match="device: must be one of auto, cpu, cuda"):
        SentenceEncoder(model=str(tiny_bi), device="gpu")
    with pytest.raises(FieldError, match="device: cuda runs the torch backend only"):
        CrossEncoderScorer(model=str(tiny_bi), device="cuda", backend="openvino")
    assert compute_identity("auto", "openvino").startswith("cpu:")  # other backends run on the CPU


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["encoder.device=gpu"], "stage.dense.encoder.device: must be one of auto, cpu, cuda"),
        (["encoder.device=cuda", "encoder.backend=onnx"], "cuda runs the torch backend only"),
    ],
)
def test_a_bad_device_on_the_command_line_exits_2_naming_the_field(overrides, message, tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.run",
            "suite=spark25",
            "variant=dense",
            "tracking=none",
            f"hydra.run.dir={tmp_path / 'run'}",
            *overrides,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert message in proc.stderr
    assert not (tmp_path / "run" / "metrics.json").exists()


def run_dense(tmp: Path, name: str, *overrides: str) -> Path:
    out = tmp / name
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.run",
            "suite=spark25",
            "variant=dense",
            "progress=false",
            f"cache_dir={tmp / 'cache'}",
            f"hydra.run.dir={out}",
            *overrides,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "MLFLOW_TRACKING_URI": ""},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_a_run_records_each_models_device_precision_and_the_cpu_isa_in_its_tags(tiny_bi, tmp_path):
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracking = [f"tracking.tracker.uri={uri}", "tracking.tracker.experiment=precision"]
    run_dir = run_dense(tmp_path, "tiny", f"encoder.model={tiny_bi}", "encoder.device=cpu", *tracking)
    tags = json.loads((run_dir / "tags.json").read_text())
    assert json.loads(tags["compute"]) == {"dense.encoder": f"cpu:{cpu_isa()}/fp32"}
    assert tags["device"] == "cpu" and tags["cpu_isa"] == cpu_isa()
    assert f"compute=cpu:{cpu_isa()}/fp32" in json.loads(tags["model_revisions"])["dense"]
    client = mlflow.MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("precision").experiment_id])
    assert {k: run.data.tags[k] for k in ("compute", "device", "cpu_isa")} == {
        k: tags[k] for k in ("compute", "device", "cpu_isa")
    }


def ranking(run_dir: Path) -> dict[str, list[tuple[str, float]]]:
    out: dict[str, list[tuple[str, float]]] = {}
    for line in (run_dir / "run.trec").read_text().splitlines():
        qid, _, doc, _, score, _ = line.split()
        out.setdefault(qid, []).append((doc, float(score)))
    return out


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.slow
@pytest.mark.skipif(not cuda_available(), reason="no CUDA device")
def test_dense_on_cuda_ranks_spark25_as_the_cpu_does(tmp_path):
    cpu = ranking(run_dense(tmp_path, "cpu", "encoder.device=cpu", "tracking=none"))
    gpu_dir = run_dense(tmp_path, "cuda", "encoder.device=cuda", "tracking=none")
    gpu = ranking(gpu_dir)
    assert json.loads((gpu_dir / "tags.json").read_text())["device"] == "cuda"
    assert cpu.keys() == gpu.keys()
    for qid in cpu:
        assert [d for d, _ in gpu[qid]] == [d for d, _ in cpu[qid]], qid
        np.testing.assert_allclose([s for _, s in gpu[qid]], [s for _, s in cpu[qid]], atol=1e-4, rtol=0)
