"""MLflow params: each setting once, in one text form (experiments/track/run_params.py)."""

from __future__ import annotations

from experiments.configure.compose import compose_config
from experiments.configure.settings import RunSettings
from experiments.track.run_params import child_run_name, param_text, run_params, sweep_axes, varying_overrides


def test_params_are_each_setting_once_in_one_spelling():
    cfg = compose_config(["variant=exp05", "stage.instruction_boost.weight=0"])
    settings = RunSettings.from_config(cfg)
    params = run_params(settings.config, settings.references)
    assert params["stage.instruction_boost.weight"] == "0"
    assert params["encoder.model"] and not any(k.startswith("stage.dense.encoder") for k in params)
    assert params["stage.fusion.weights"] == "null" and params["stage.bm25.enabled"] == "true"
    assert params["variant.stages"].startswith('["')  # JSON, not a Python repr
    assert not {"progress", "resume", "cache_dir"} & set(params)
    assert [param_text(v) for v in (0, 0.0, 0.1, 1e-7, 100, float("nan"), None, [0.0, "a"])] == [
        "0", "0", "0.1", "1e-07", "100", "nan", "null", '[0, "a"]',
    ]  # fmt: skip


def test_a_child_is_named_by_what_varies_among_its_siblings():
    rows = [
        ["variant=exp05", "stage.instruction_boost.weight=0.0"],
        ["variant=exp05", "stage.instruction_boost.weight=0.2"],
    ]
    assert varying_overrides(rows) == ["stage.instruction_boost.weight"]
    assert child_run_name("exp05", {"stage.instruction_boost.weight": 0.0}) == "exp05 weight=0"
    # two fields of the same name keep their full keys
    both = {"stage.a.weight": 0.1, "stage.b.weight": 0.2}
    assert child_run_name("x", both) == "x stage.a.weight=0.1 stage.b.weight=0.2"
    assert sweep_axes(["variant=exp05", "stage.x.weight=0,0.2", "+k=range(0,3)"]) == {
        "stage.x.weight": "0,0.2", "k": "range(0,3)",
    }  # fmt: skip
