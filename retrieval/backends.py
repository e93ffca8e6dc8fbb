"""Inference backends for the transformer inside a sentence-transformers model (bi-encoder or cross-encoder).

    torch       the model as loaded (fp32 torch); the reference.
    onnx        the same weights exported once to ONNX (torch.onnx dynamo exporter), run by ONNX Runtime.
    onnx-int8   that ONNX graph with dynamic int8 quantization of its weights (onnxruntime.quantization).
    openvino    the fp32 ONNX graph compiled by OpenVINO for the CPU, pinned to fp32.
    openvino-bf16
                the same graph compiled to compute in bf16 (native on AMX and AVX-512 BF16 CPUs).
    openvino-int8
                that graph statically quantized to int8 by NNCF (weights and activations, VNNI kernels),
                its activation ranges calibrated on texts the caller gives (bi-encoders only).

Each backend's precision is pinned (retrieval/compute.py PRECISION), never left to the runtime: OpenVINO's
default INFERENCE_PRECISION_HINT is bf16 on a CPU with AMX or AVX-512 BF16 (fp16 on ARM), so an unpinned
`openvino` computed in bf16 on one machine and fp32 on another under one cache key. OpenVINO is given the
hint and the compiled model's hint is read back (a CPU that cannot honour it is an error); ONNX Runtime's
one lower-precision switch (bf16 fast math on ARM) is set off; torch loads fp32 weights and runs its fp32
matrix products in full fp32 (retrieval/compute.py fp32_matmuls).

Only the transformer's forward changes backend: sentence-transformers still tokenizes, batches, pools
and normalises (bi-encoder) or reads the logits (cross-encoder), so truncation, prompts and pooling are
identical across backends. For openvino-int8 the network is exported with eager attention: its
attention matmuls then stand as plain MatMuls, which quantize more faithfully than the fused SDPA op
(cosine to fp32 on BEAM messages 0.9969 vs 0.9951). Before an exported network replaces the torch one, its
outputs on a small check sample are compared with fp32 torch's, and a degenerate export (constant or
all-zero outputs, non-finite values, outputs far from fp32's or uncorrelated with them) is refused with
`DegenerateExportError`. The exported files live in
`<export_dir>/<model name>-<key>-<kind>/` (key: KEY_RULES["exports"], over the model's content hash)
(model.onnx, model-int8.onnx, model-eager.onnx,
ov-int8-<calibration hash>-<max length>.xml/.bin), written once: the export runs under
a file lock and each file lands by an atomic rename, so parallel processes never read or write half a
model.

Why not `SentenceTransformer(..., backend="onnx")`: that path needs `optimum-onnx`, whose only release
(0.1.0) requires transformers < 4.58, while sentence-transformers 6 requires transformers >= 5; the two
do not install together. This module needs `onnxruntime`, `onnx` and `onnxscript` (and `openvino` for
that backend), which install beside the rest.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import inspect
import logging
import os
import shutil
import uuid
import warnings
from collections.abc import Sequence
from pathlib import Path

from retrieval.compute import PRECISION, cpu_isa

BACKENDS = ("torch", "onnx", "onnx-int8", "openvino", "openvino-bf16", "openvino-int8")
PACKAGES = {  # backend -> (import name, pip name) it needs
    "onnx": [("onnxruntime", "onnxruntime"), ("onnx", "onnx"), ("onnxscript", "onnxscript")],
    "onnx-int8": [("onnxruntime", "onnxruntime"), ("onnx", "onnx"), ("onnxscript", "onnxscript")],
    "openvino": [("openvino", "openvino"), ("onnx", "onnx"), ("onnxscript", "onnxscript")],
    "openvino-bf16": [("openvino", "openvino"), ("onnx", "onnx"), ("onnxscript", "onnxscript")],
    "openvino-int8": [
        ("openvino", "openvino"),
        ("nncf", "nncf"),
        ("onnx", "onnx"),
        ("onnxscript", "onnxscript"),
    ],
}
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OUTPUTS = {"feature-extraction": "last_hidden_state", "sequence-classification": "logits"}


class BackendUnavailableError(RuntimeError):
    pass


def check_backend(backend: str) -> None:
    """A clear error for an unknown backend or one whose packages are not installed."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    missing = [pip for module, pip in PACKAGES.get(backend, []) if importlib.util.find_spec(module) is None]
    if missing:
        raise BackendUnavailableError(
            f"backend {backend!r} needs the package(s) {', '.join(missing)}: "
            f"pip install {' '.join(missing)} (memeval dependencies: pip install -e . installs them), "
            "or use backend: torch"
        )


def export_folder(export_dir: str | os.PathLike, model: str, revision: str, kind: str) -> Path:
    """Where the exports of a model live: named by KEY_RULES["exports"] over the model's content hash
    (`revision`), this module's source and the exporting libraries' versions."""
    from retrieval.code_version import KEY_RULES

    slug = Path(model.rstrip("/")).name[-60:] or "model"
    return Path(export_dir) / f"{slug}-{KEY_RULES['exports'].key(model=revision, kind=kind)[:16]}-{kind}"


class DegenerateExportError(RuntimeError):
    """An exported (or quantized) network whose outputs no longer follow the fp32 network's."""


# A sample the export is checked on (bi-encoder: these texts; cross-encoder: these pairs).
CHECK_TEXTS = (
    "always use type hints in python code",
    "the deployment budget is 2000 dollars a month",
    "lunch with the design team on friday",
    "black formats code to a line length of 88",
)
CHECK_PAIRS = tuple((CHECK_TEXTS[0], t) for t in CHECK_TEXTS) + ((CHECK_TEXTS[1], CHECK_TEXTS[1]),)
MIN_CORRELATION = 0.9  # int8 exports measured 0.99+ (cosine 0.995 to fp32 on BEAM messages)
MAX_RELATIVE_ERROR = 0.5  # ||exported - fp32|| / ||fp32||: int8 exports measured ~0.1
# The outputs' variation is compared only when fp32's is above numeric noise: a std under 1% of the largest
# output (e.g. a randomly initialised cross-encoder's logits, 0.00395-0.00398) is not a signal an exact
# fp32 runtime can reproduce (OpenVINO fp32 correlated 0.52 with torch on such logits).
MIN_SPREAD = 0.01


def export_problem(reference, exported) -> str | None:
    """Why outputs `exported` of an export do not stand for the fp32 `reference` on the same inputs (None
    when they do): non-finite values, a different shape, outputs far from fp32 (relative error), or
    outputs that no longer vary with the input as fp32's do (constant, all zero: correlation)."""
    import numpy as np

    ref = np.asarray(reference, dtype=np.float64).reshape(-1)
    out = np.asarray(exported, dtype=np.float64).reshape(-1)
    if ref.shape != out.shape:
        return f"output shape {np.shape(exported)} where fp32 gives {np.shape(reference)}"
    if not np.isfinite(out).all():
        return "non-finite outputs (NaN or inf)"
    spread = float(ref.std())
    varies = len(ref) > 1 and spread > MIN_SPREAD * float(np.abs(ref).max())
    if varies and float(out.std()) == 0.0:
        return f"constant outputs ({out[0]:.4g}) where fp32's vary (std {spread:.3g})"
    scale = float(np.linalg.norm(ref))
    error = float(np.linalg.norm(out - ref)) / scale if scale > 0 else float(np.linalg.norm(out))
    if error > MAX_RELATIVE_ERROR:
        return f"outputs far from fp32: relative error {error:.3g} > {MAX_RELATIVE_ERROR}"
    if varies:
        correlation = float(np.corrcoef(ref, out)[0, 1])
        if not correlation >= MIN_CORRELATION:
            return f"outputs no longer follow fp32: correlation {correlation:.3f} < {MIN_CORRELATION}"
    return None


def check_export(reference, exported, *, what: str) -> None:
    """Refuse an export whose outputs on the check sample degenerate (`export_problem`)."""
    problem = export_problem(reference, exported)
    if problem is not None:
        raise DegenerateExportError(
            f"refusing the export {what}: on its check sample (retrieval/backends.py CHECK_TEXTS) it gives "
            f"{problem}, compared with the fp32 torch network. "
            "Delete it to export again, or use backend: torch (the fp32 reference)"
        )


@contextlib.contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


class _Forward:
    """The positional forward the exporter traces: (input_ids, attention_mask[, token_type_ids]) -> output."""

    @staticmethod
    def module(net, names: list[str], output: str):
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.net = net

            def forward(self, input_ids, attention_mask, token_type_ids=None):
                given = dict(zip(INPUTS, (input_ids, attention_mask, token_type_ids), strict=True))
                return getattr(self.net(**{n: given[n] for n in names}, return_dict=True), output)

        return Wrapped().eval()


def ensure_onnx(net, tokenizer, folder: Path, task: str, int8: bool, eager: bool = False) -> Path:
    """The ONNX file for `net` in `folder` (exported, and quantized for int8, on first use); `eager`:
    a separate export with eager attention.

    Each file is written under a temporary name and moved into place with an atomic rename, under a
    lock: a reader sees a finished file or none, and a file that exists is never replaced."""
    source = "model-eager.onnx" if eager else "model.onnx"
    name = "model-int8.onnx" if int8 else source
    if (folder / name).is_file():
        return folder / name
    with _locked(folder.with_name(folder.name + ".lock")):
        if (folder / name).is_file():  # another process finished it while we waited
            return folder / name
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{uuid.uuid4().hex}.tmp"
        tmp.mkdir()
        try:
            if not (folder / source).is_file():
                if eager:
                    net.set_attn_implementation("eager")  # plain MatMuls: they quantize better
                _export(net, tokenizer, tmp / source, task)
                os.replace(tmp / source, folder / source)
            if int8:
                from onnxruntime.quantization import QuantType, quantize_dynamic

                # Per-channel int8 weights of the MatMuls: per-tensor scales lost too much (cosine to fp32
                # 0.95 mean on BEAM messages; per-channel 0.995).
                quantize_dynamic(
                    folder / "model.onnx",
                    tmp / "model-int8.onnx",
                    weight_type=QuantType.QInt8,
                    per_channel=True,
                    op_types_to_quantize=["MatMul"],
                )
                os.replace(tmp / "model-int8.onnx", folder / "model-int8.onnx")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return folder / name


def calibration_hash(texts: Sequence[str]) -> str:
    digest = hashlib.sha256()
    for text in texts:
        digest.update(hashlib.sha256(text.encode("utf-8")).digest())
    return digest.hexdigest()[:12]


def ensure_openvino_int8(onnx_path: Path, tokenizer, texts: Sequence[str], max_length: int) -> Path:
    """The OpenVINO IR of `onnx_path` statically quantized to int8, calibrated on `texts` (made once).

    NNCF's transformer preset: int8 weights (per channel) and activations, with ranges taken from the
    calibration batches. The IR's name carries the texts' hash, so a different calibration set is a
    different model; its .bin lands before its .xml, and a reader looks for the .xml."""
    import nncf
    import numpy as np
    import openvino as ov

    if not texts:
        raise ValueError("backend 'openvino-int8' needs calibration texts (encoder.calibration)")
    folder = onnx_path.parent
    xml = folder / f"ov-int8-{calibration_hash(texts)}-{max_length}.xml"
    if xml.is_file():
        return xml
    with _locked(folder.with_name(folder.name + ".lock")):
        if xml.is_file():
            return xml
        batches = []
        for start in range(0, len(texts), 8):
            feed = tokenizer(
                list(texts[start : start + 8]),
                padding=True,
                truncation=True,
                max_length=max_length,
                return_tensors="np",
            )
            batches.append({k: v.astype(np.int64) for k, v in feed.items()})
        logging.getLogger("nncf").setLevel(logging.ERROR)
        quantized = nncf.quantize(
            ov.Core().read_model(str(onnx_path)),
            nncf.Dataset(batches),
            model_type=nncf.ModelType.TRANSFORMER,
            subset_size=len(batches),
        )
        tmp = folder / f".{uuid.uuid4().hex}"
        try:
            ov.save_model(quantized, f"{tmp}.xml")
            os.replace(f"{tmp}.bin", xml.with_suffix(".bin"))
            os.replace(f"{tmp}.xml", xml)
        finally:
            for leftover in (f"{tmp}.xml", f"{tmp}.bin"):
                Path(leftover).unlink(missing_ok=True)
    return xml


# The exporter's own loggers and the level they print from: onnx_ir's initializer passes and onnxscript's
# optimizer log ~100 INFO lines an export, which Hydra's INFO root logger would print before a run's results.
EXPORT_LOGGERS = {"torch.onnx": logging.ERROR, "onnx_ir": logging.WARNING, "onnxscript": logging.WARNING}


def quiet_exporters() -> None:
    """Keep the exporters' progress chatter out of the console; their warnings still show."""
    for name, level in EXPORT_LOGGERS.items():
        logging.getLogger(name).setLevel(level)


def _export(net, tokenizer, path: Path, task: str) -> None:
    import torch

    sample = tokenizer(["a short text", "a longer text to export"], padding=True, return_tensors="pt")
    accepted = set(inspect.signature(net.forward).parameters)
    names = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in sample and k in accepted]
    if names[:2] != ["input_ids", "attention_mask"]:
        raise BackendUnavailableError(f"cannot export a network whose inputs are {names}")
    wrapped = _Forward.module(net, names, OUTPUTS[task])
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq", max=4096)
    quiet_exporters()
    with (
        open(os.devnull, "w") as devnull,
        contextlib.redirect_stdout(devnull),
        warnings.catch_warnings(),
    ):
        # torch's exporter's own deprecation and shape notes: nothing a memeval user can act on
        warnings.filterwarnings("ignore", r".*The axis name: .* will not be used", UserWarning)
        warnings.filterwarnings("ignore", r".*isinstance\(treespec, LeafSpec\)", FutureWarning)
        program = torch.onnx.export(
            wrapped,
            tuple(sample[k] for k in names),
            input_names=names,
            output_names=[OUTPUTS[task]],
            dynamic_shapes=tuple({0: batch, 1: seq} for _ in names),
            dynamo=True,
        )
    program.save(str(path))


# OpenVINO's name for each pinned precision; int8 models keep their unquantized ops in f32.
OPENVINO_PRECISION = {"fp32": "f32", "bf16": "bf16", "int8": "f32"}


def _runtime(path: Path, backend: str, threads: int | None):
    """(input names, a callable {name: int64 array} -> output array, the runtime object: OpenVINO's
    compiled model or ONNX Runtime's session), computing in the backend's pinned precision."""
    if backend.startswith("openvino"):
        import openvino as ov

        wanted = OPENVINO_PRECISION[PRECISION[backend]]
        config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": wanted}
        if threads:
            config["INFERENCE_NUM_THREADS"] = int(threads)
        compiled = ov.Core().compile_model(str(path), "CPU", config)
        got = compiled.get_property("INFERENCE_PRECISION_HINT")
        if got.get_type_name() != wanted:  # the key says `wanted`: a CPU computing otherwise must not answer
            raise BackendUnavailableError(
                f"backend {backend!r} needs OpenVINO to compute in {wanted}, but on this CPU "
                f"({cpu_isa()}) it compiles to {got.get_type_name()}: use backend: openvino (fp32)"
            )
        names = [i.get_any_name() for i in compiled.inputs]
        request = compiled.create_infer_request()

        def run_ov(feed):
            return request.infer({n: feed[n] for n in names})[compiled.outputs[0]].copy()

        return names, run_ov, compiled
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = int(threads)
    # No busy-waiting between ops: on a CPU shared with other jobs, spinning threads burn CPU for nothing.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    # fp32 GEMMs stay fp32 (this switch, off by default, lets ARM CPUs compute them in bf16).
    options.add_session_config_entry("mlas.enable_gemm_fastmath_arm64_bfloat16", "0")
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]

    def run_ort(feed):
        return session.run(None, {n: feed[n] for n in names})[0]

    return names, run_ort, session


def _check_against_torch(net, tokenizer, names: list[str], run, task: str, *, what: str) -> None:
    """Run the check sample through the fp32 torch network and the runtime; refuse a degenerate export.
    Hidden states are compared at real tokens only (padding positions are never pooled)."""
    import numpy as np
    import torch

    if task == "sequence-classification":
        feed = tokenizer(
            [q for q, _ in CHECK_PAIRS], [d for _, d in CHECK_PAIRS], padding=True, return_tensors="pt"
        )
    else:
        feed = tokenizer(list(CHECK_TEXTS), padding=True, return_tensors="pt")
    given = {k: v for k, v in feed.items() if k in INPUTS}
    if "token_type_ids" in names and "token_type_ids" not in given:
        given["token_type_ids"] = torch.zeros_like(given["input_ids"])
    accepted = set(inspect.signature(net.forward).parameters)
    with torch.inference_mode():
        reference = getattr(
            net(**{k: v for k, v in given.items() if k in accepted}, return_dict=True), OUTPUTS[task]
        )
    exported = run({n: given[n].numpy().astype(np.int64) for n in names})
    reference = reference.float().numpy()
    if task == "feature-extraction":
        real = given["attention_mask"].numpy().astype(bool)
        reference, exported = reference[real], np.asarray(exported)[real]
    check_export(reference, exported, what=what)


def accelerate(
    transformer_module,
    *,
    backend: str,
    folder: Path,
    task: str,
    threads: int | None = None,
    calibration: Sequence[str] = (),
):
    """Swap the torch network inside a sentence-transformers `Transformer` module for `backend`."""
    import torch

    check_backend(backend)
    if backend == "torch":
        return
    if backend == "openvino-int8" and task != "feature-extraction":
        # A cross-encoder's scores are differences of one logit: int8 activations moved its ranking
        # (onnx-int8 lost 0.069 nDCG@10, reports/benchmarks/backends.md). openvino is exact and fast.
        raise ValueError("backend 'openvino-int8' is for bi-encoders; use openvino for a cross-encoder")
    net = transformer_module.model
    path = ensure_onnx(
        net.eval(),
        transformer_module.tokenizer,
        folder,
        task,
        int8=backend == "onnx-int8",
        eager=backend == "openvino-int8",
    )
    if backend == "openvino-int8":
        max_length = transformer_module.max_seq_length or 512
        path = ensure_openvino_int8(path, transformer_module.tokenizer, calibration, max_length)
    names, run, runtime = _runtime(path, backend, threads)
    output, config = OUTPUTS[task], net.config
    _check_against_torch(net, transformer_module.tokenizer, names, run, task, what=f"{path} ({backend})")
    del net  # the torch weights are no longer needed

    class RuntimeNetwork(torch.nn.Module):
        """Stands where the torch network stood: same config, same call, the runtime computes."""

        def __init__(self) -> None:
            super().__init__()
            self.config = config
            # Zero-size anchor: code that asks the network for its device or dtype finds cpu / float32.
            self.anchor = torch.nn.Parameter(torch.zeros(0), requires_grad=False)
            self.backend = backend
            self.onnx_path = str(path)
            self.runtime = runtime  # OpenVINO's compiled model or ONNX Runtime's session (its settings)

        def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, **_ignored):
            given = dict(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            if given["token_type_ids"] is None and "token_type_ids" in names:
                given["token_type_ids"] = torch.zeros_like(input_ids)
            feed = {n: given[n].detach().cpu().numpy().astype("int64", copy=False) for n in names}
            return {output: torch.from_numpy(run(feed))}

    transformer_module.model = RuntimeNetwork()
    transformer_module.model_forward_params = None  # pass everything; forward ignores the rest
