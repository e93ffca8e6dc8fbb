"""Where and in what precision a model computes: part of a result's identity, never the runtime's choice.

Machines differ: on a CPU with AMX, OpenVINO's default inference precision is bf16 (fp16 on ARM), so the
same backend computed in bf16 on one machine and fp32 on another, under the same cache key, and a
trained cross-encoder's P@5 on the 25-scenario suite moved from 0.192 (torch) to 0.158 there. So each
backend's precision is pinned (`PRECISION`: fp32 unless the backend says otherwise, e.g. openvino-bf16),
and the compute identity (`compute_identity`: effective device, precision, and the CPU's ISA class or
the GPU's name) is part of the encoder's and cross-encoder's fingerprints, their cache keys
(KEY_RULES in retrieval/code_version.py) and a run's tags.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
from collections.abc import Iterable, Iterator
from pathlib import Path

# backend -> the precision it computes in (retrieval/backends.py pins it in each runtime). int8: int8
# weights (and, for openvino-int8, activations) in the quantized ops, fp32 in the rest.
PRECISION = {
    "torch": "fp32",
    "onnx": "fp32",
    "onnx-int8": "int8",
    "openvino": "fp32",
    "openvino-bf16": "bf16",
    "openvino-int8": "int8",
}
DEVICES = ("auto", "cpu", "cuda")
# Batch size on a GPU: it is idle at a CPU's best batch (16); 256 BEAM messages of 256 tokens fit in
# well under 1 GB of activations for a MiniLM-sized model.
CUDA_BATCH_SIZE = 256


def isa_class(flags: Iterable[str], machine: str = "x86_64") -> str:
    """The CPU's instruction-set class as far as model kernels differ: amx | avx512_bf16 | avx512 |
    avx2 | x86_64 on x86 (the first the flags allow), else the machine name (+ `_bf16` where the CPU has
    bf16 instructions, e.g. ARM's `bf16` feature)."""
    flags = set(flags)
    if machine.lower() not in ("x86_64", "amd64", "i386", "i686"):
        return machine.lower() + ("_bf16" if "bf16" in flags else "")
    for name, needs in (
        ("amx", {"amx_tile"}),
        ("avx512_bf16", {"avx512_bf16"}),
        ("avx512", {"avx512f"}),
        ("avx2", {"avx2"}),
    ):
        if needs <= flags:
            return name
    return "x86_64"


@functools.cache
def cpu_isa() -> str:
    """This machine's `isa_class`, from the first `flags` (x86) or `Features` (ARM) line of /proc/cpuinfo."""
    flags: list[str] = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                flags = line.split(":", 1)[1].split()
                break
    return isa_class(flags, platform.machine() or "unknown")


# The device nodes a GPU driver makes (NVIDIA's, AMD ROCm's, WSL2's). Where none exists torch can see no
# GPU, and importing torch only to hear so cost every warm run ~3 s of CPU (its vectors come from the cache).
GPU_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia", "/dev/kfd", "/dev/dxg")


@functools.cache
def cuda_name() -> str | None:
    """The first CUDA device torch sees (its name), or None without one."""
    if not any(os.path.exists(node) for node in GPU_DEVICE_NODES):
        return None
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


class DeviceUnavailableError(RuntimeError):
    pass


def device_problem(device: str, backend: str) -> str | None:
    """What is wrong with a configured device for a backend (None when nothing is)."""
    if device not in DEVICES:
        return f"must be one of {', '.join(DEVICES)}, not {device!r}"
    if device == "cuda" and backend != "torch":
        return (
            f"cuda runs the torch backend only; backend {backend!r} runs on the CPU (use device: cpu or auto)"
        )
    return None


def resolve_device(device: str, backend: str) -> str:
    """The effective device: `auto` is cuda when torch sees a GPU and the backend is torch, else cpu."""
    if device == "cpu" or backend != "torch":
        return "cpu"
    if cuda_name() is not None:
        return "cuda"
    if device == "cuda":
        raise DeviceUnavailableError(
            "device 'cuda' asked for, but torch sees no CUDA device: use device: auto or cpu"
        )
    return "cpu"


def compute_identity(device: str, backend: str) -> str:
    """`<device>:<ISA class or GPU name>/<precision>`: `cpu:avx512_bf16/fp32`, `cuda:NVIDIA H100/fp32`."""
    effective = resolve_device(device, backend)
    where = cuda_name() if effective == "cuda" else cpu_isa()
    return f"{effective}:{where}/{PRECISION[backend]}"


@contextlib.contextmanager
def fp32_matmuls() -> Iterator[None]:
    """torch's fp32 matrix products in full fp32 while a model runs: `set_float32_matmul_precision`
    ('high'/'medium', set by anyone in the process) lets them use TF32 on a GPU and bf16 on an AMX CPU."""
    import torch

    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)
