"""A study row's run config, composed and given the study's settings in experiments/configure/study_row.py:
the study runner hands in plain values (a tracking mapping, a cache folder) and reads a record back."""

from __future__ import annotations

from omegaconf import OmegaConf

from experiments.configure.compose import compose_config
from experiments.configure.study_row import KEEP, study_composer, study_row

TRACKER = {
    "_target_": "experiments.track.mlflow_tracker.MlflowTracker",
    "experiment": "s",
    "uri": "sqlite:///s.db",
}


def test_a_row_is_the_run_config_of_its_overrides_with_the_study_settings_over_it(tmp_path):
    overrides = ["variant=hybrid", "metrics=[P@5]", "stage.fusion.k=30"]
    row = study_row(overrides, metrics=["P@5", "R@100"], tracking={"enabled": True, "tracker": TRACKER},
                    cache_dir=str(tmp_path), progress=False)  # fmt: skip
    expected = compose_config(overrides)
    expected.metrics, expected.cache_dir = ["P@5", "R@100"], str(tmp_path)
    expected.progress, expected.resume = False, True
    expected.tracking = OmegaConf.create({"enabled": True, "tracker": TRACKER})
    assert OmegaConf.to_yaml(row.config) == OmegaConf.to_yaml(expected)
    assert row.tracking.enabled is True and row.tracking.tracker == TRACKER
    settings = row.settings()
    assert settings.metrics == ("P@5", "R@100") and settings.stage_order == tuple(expected.variant.stages)


def test_tracking_off_or_kept_and_a_row_measured_alone(tmp_path):
    off = study_row(["variant=dense"], tracking=False, cache_dir=str(tmp_path))
    assert OmegaConf.to_container(off.config.tracking) == {"enabled": False}
    assert (off.tracking.enabled, dict(off.tracking.tracker)) == (False, {})
    kept = study_row(
        ["variant=dense", "tracking=none"], tracking=KEEP, cache_dir=KEEP, composer=study_composer()
    )
    assert kept.config.cache_dir == compose_config(["variant=dense"]).cache_dir
    # alone: no candidate cache and no resume, the encoder's caches where the study's cache put them
    alone = study_row(["variant=dense"], tracking=False, cache_dir=str(tmp_path), alone=True)
    assert alone.config.cache_dir is None and alone.config.resume is False
    assert alone.config.encoder.cache_dir == off.config.encoder.cache_dir == f"{tmp_path}/embeddings"
