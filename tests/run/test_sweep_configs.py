"""The sweep configs in conf/sweep and conf/hydra/launcher compose to what docs/sweeps.md promises."""

from __future__ import annotations

import pytest
import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser

from experiments.configure.compose import compose_config
from tests.support import REPO
from tests.sweep_support import job_dirs, sweep, write_tiny_suite


def compose_hydra(*overrides: str):
    return compose_config(list(overrides), hydra_node=True)


def sweep_points(key: str, value: str) -> list:
    override = OverridesParser.create().parse_override(f"{key}={value}")
    return list(override.sweep_iterator())


def test_the_boost_sweep_is_21_weights_of_exp05_on_beam_100k():
    cfg = compose_hydra("+sweep=boost_beam")
    assert cfg.hydra.runtime.choices.variant == "exp05" and cfg.suite._target_.endswith("load_beam")
    assert cfg.suite.path.endswith("beam/100K")
    assert str(cfg.hydra.mode) == "RunMode.MULTIRUN"
    points = sweep_points(
        "stage.instruction_boost.weight", cfg.hydra.sweeper.params["stage.instruction_boost.weight"]
    )
    assert len(points) == 21 and points[0] == 0 and points[-1] == pytest.approx(0.5)


def test_the_variant_sweep_covers_every_variant_on_spark25():
    cfg = compose_hydra("+sweep=variants_spark25")
    assert cfg.suite.path.endswith("datasets/spark25")
    assert cfg.hydra.sweeper.params.variant == "glob(*,exclude=[system])"  # system needs a service


def test_the_optuna_sweep_tunes_the_boost_weight_in_memory_with_a_seeded_sampler():
    cfg = compose_hydra("+sweep=optuna_boost_beam")
    sweeper = cfg.hydra.sweeper
    assert "optuna" in sweeper._target_.lower() and sweeper.storage is None
    assert sweeper.direction == "maximize" and sweeper.sampler.seed == 0
    assert sweeper.params["stage.instruction_boost.weight"].startswith("interval(")


def test_the_slurm_launcher_extends_the_plugins_own_config():
    cfg = compose_hydra("hydra/launcher=slurm")
    assert cfg.hydra.launcher._target_.endswith("SlurmLauncher")
    assert cfg.hydra.launcher.cpus_per_task >= 1 and cfg.hydra.launcher.timeout_min > 0


@pytest.mark.slow
def test_optuna_runs_and_a_rerun_replays_its_trials_from_finished_runs(tmp_path):
    suite = write_tiny_suite(tmp_path)
    # bm25 needs no model; the boost node is added only so the sweeper has its parameter to set.
    common = (
        "+sweep=optuna_boost_beam",
        "+stage@stage.instruction_boost=instruction_boost",
        "hydra.sweeper.n_trials=3",
    )
    sweep(tmp_path, suite, tmp_path / "opt1", *common)
    first = yaml.safe_load((tmp_path / "opt1" / "optimization_results.yaml").read_text())
    assert len(job_dirs(tmp_path / "opt1")) == 3
    again = sweep(tmp_path, suite, tmp_path / "opt2", *common)
    assert again.stdout.count("skipped: config") == 3  # the seeded sampler proposed the same weights
    assert yaml.safe_load((tmp_path / "opt2" / "optimization_results.yaml").read_text()) == first


def test_the_single_node_slurm_launcher_fits_make_slurm_up():
    """hydra/launcher=slurm_localhost is `slurm` sized for .ci/slurm-up's cluster: its partition, one core a
    job (2 at a time on 2 cores), and the shared setup lines kept."""
    cfg = compose_hydra("hydra/launcher=slurm_localhost")
    slurm = compose_hydra("hydra/launcher=slurm").hydra.launcher
    launcher = cfg.hydra.launcher
    assert launcher._target_ == slurm._target_ and launcher.setup == slurm.setup
    assert launcher.partition == "debug" and launcher.cpus_per_task == 1 and launcher.mem_gb <= 4
    script = (REPO / ".ci" / "slurm-up").read_text()  # the slurm.conf it writes
    assert "PartitionName=debug " in script and "DefMemPerCPU=1024" in script
