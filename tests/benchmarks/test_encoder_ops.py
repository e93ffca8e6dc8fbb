"""The bi-encoder op profile (experiments/benchmarks/encoder_ops.py): ops land in the right category, the
report's conclusions are computed from the numbers, and a real run on BEAM messages writes both files."""

from __future__ import annotations

import json

import pytest

from experiments.benchmarks.encoder_ops import main, openvino_category, render, torch_category


def test_torch_ops_are_sorted_into_categories():
    assert torch_category("aten::addmm") == "linear layers"
    assert torch_category("aten::_scaled_dot_product_flash_attention_for_cpu") == "attention"
    assert torch_category("aten::softmax") == "attention"
    assert torch_category("aten::native_layer_norm") == "layer norm"
    assert torch_category("aten::gelu") == "everything else"
    assert torch_category("aten::embedding") == "everything else"


def test_openvino_nodes_are_sorted_by_type_fusion_and_rank():
    assert openvino_category("FullyConnected", "", 3) == "linear layers"
    assert openvino_category("FullyConnectedQuantizedLegacy", "", 3) == "linear layers"
    # The fused attention block: its original layers include the softmax, whatever its output rank.
    assert openvino_category("Subgraph", "node_transpose,node_softmax,node_matmul_1", 3) == "attention"
    # Unfused attention ops (the score matmul, mask add, select) are the 4-d ones.
    assert openvino_category("MatMul", "node_matmul_105", 4) == "attention"
    assert openvino_category("Add", "node_add_106", 4) == "attention"
    assert openvino_category("Add", "node_add_238", 3) == "everything else"
    assert openvino_category("MVN", "", 3) == "layer norm"


def _results(torch_ms: dict, int8_ms: dict) -> dict:
    machine = {
        "cpu": "test",
        "nproc": 2,
        "date_utc": "today",
        "loadavg_start": [0.5, 0.5, 0.5],
        "loadavg_end": [0.5, 0.5, 0.5],
        "command": "python -m experiments.benchmarks.encoder_ops",
    }
    fp32 = {"linear layers": 800.0, "attention": 400.0, "layer norm": 20.0, "everything else": 50.0}
    return {
        "machine": machine,
        "args": {"batch": 16, "seed": 0, "repeats": 5},
        "backends": {
            "torch": {"batch_ms": sum(torch_ms.values()), "ms": torch_ms},
            "openvino": {"batch_ms": sum(fp32.values()), "ms": fp32},
            "openvino-int8": {"batch_ms": sum(int8_ms.values()), "ms": int8_ms},
        },
    }


def test_the_report_derives_the_bound_from_the_numbers():
    torch_ms = {"linear layers": 720.0, "attention": 180.0, "layer norm": 20.0, "everything else": 80.0}
    int8_ms = {"linear layers": 240.0, "attention": 180.0, "layer norm": 20.0, "everything else": 60.0}
    text = render(_results(torch_ms, int8_ms))
    assert "runs this batch **2.00x** as fast as torch fp32" in text  # 1000 / 500
    assert "linear layers are 3.0x as fast as torch's" in text  # 720 / 240
    assert "takes 260.0 ms in int8 against torch's 280.0 ms (1.1x)" in text
    assert "at most 3.8x torch" in text  # 1000 / 260
    # 3x torch is 333.3 ms a batch; the other ops take 260 of it: 73.3 ms left, 720 / 73.3 = 9.8x
    assert "would have to take 73.3 ms: 9.8x as fast as torch's fp32 ones" in text


def test_the_report_says_when_the_other_ops_alone_are_over_budget():
    torch_ms = {"linear layers": 500.0, "attention": 200.0, "layer norm": 20.0, "everything else": 80.0}
    int8_ms = {"linear layers": 100.0, "attention": 200.0, "layer norm": 20.0, "everything else": 80.0}
    text = render(_results(torch_ms, int8_ms))
    assert "The other ops alone exceed the 3x budget (266.7 ms a batch)" in text


@pytest.mark.slow  # loads BEAM 100K, MiniLM in torch and OpenVINO (exported on first use): ~30-90 s
def test_a_real_profile_writes_the_report(tmp_path):
    args = ["--backends", "torch,openvino", "--batch", "2", "--repeats", "1", "--wait-quiet", "0"]
    args += ["--out", str(tmp_path)]
    assert main(args) == 0
    results = json.loads((tmp_path / "encoder-ops.json").read_text())
    for backend in ("torch", "openvino"):
        row = results["backends"][backend]
        assert row["ms"]["linear layers"] > 0 and row["ms"]["attention"] > 0
        # the profiler's op times account for the timed batch (profiling overhead and timer noise aside)
        assert 0.5 * row["batch_ms"] < sum(row["ms"].values()) < 2.0 * row["batch_ms"]
    text = (tmp_path / "encoder-ops.md").read_text()
    assert "| torch |" in text and "| openvino |" in text
