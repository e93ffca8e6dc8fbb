"""MLflow run names say what tells runs apart (issue 41: every sweep parent was cut to `sweep suite=beam s…`
in the runs table, and ten live runs of different services were all `spark25-system`)."""

from __future__ import annotations

from experiments.track.run_params import live_run_name, sweep_axes, sweep_run_name


def _parent(overrides: list[str], variant: str | None = "hybrid") -> str:
    return sweep_run_name(overrides, sweep_axes(overrides), variant)


def test_a_sweep_parent_is_named_by_its_variant_and_swept_keys_first():
    overrides = [
        "suite=beam",
        "suite.path=../shared/beam/100K",
        "variant=exp05",
        "stage.instruction_boost.weight=0,0.2,0.35",
    ]
    assert _parent(overrides) == "sweep exp05 weight=0,0.2,0.35"
    other = _parent([*overrides[:3], "stage.fusion.k=20,60"])
    assert other.startswith("sweep exp05 k=") and other != _parent(overrides)[:20]
    assert _parent(["variant=bm25,dense"]) == "sweep variant=bm25,dense"
    assert _parent(["shard=0/2,1/2"], None) == "sweep shard=0/2,1/2"


def test_a_live_run_is_named_by_its_service_and_mode():
    names = {
        live_run_name("spark25", "system", system, mode)
        for system in ("atomicmemory", "memeval_serve", "chroma")
        for mode in ("live", "record", "replay")
    }
    assert len(names) == 9 and "spark25-system atomicmemory replay" in names
