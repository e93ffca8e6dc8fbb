"""memeval's default Hydra launcher: Hydra's basic one, composing each sweep job's config once.

Hydra's BasicSweeper composes every job's config to validate the batch, then BasicLauncher composes it
again to run it: two full compositions (~0.2 s of CPU each on this config tree) per job. Here the
sweeper's validation goes through the launcher's composer (it shares the launcher's Hydra context), and
the launch takes the configs it validated. Jobs of a sweep
that differ only in values (`stage.x.weight=0,0.1,...`) share one composition of what shapes the config
(group choices, `hydra.*`, deletions: experiments.configs.split_overrides), then get their values set
exactly as Hydra sets them, and the few Hydra fields that name the job's overrides
(`hydra.overrides.task`, `hydra.job.override_dirname`) as Hydra writes them. tests/test_sweeps.py compares
every job's config, Hydra node included, with Hydra's own composition.

Selected in experiments/conf/config.yaml (`override hydra/launcher: memeval`); any sweeper works with it
(basic, Optuna), and `hydra/launcher=joblib` or `=slurm` work as before (they compose in their workers).
"""

# No `from __future__ import annotations`: Hydra execs plugin modules outside sys.modules, where
# dataclasses cannot resolve string annotations.

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra._internal.core_plugins.basic_launcher import BasicLauncher
from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn, configure_log, filter_overrides, run_job, setup_globals
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

log = logging.getLogger(__name__)


class SweepComposer:
    """`load_sweep_config(master, overrides)` as Hydra's config loader computes it, one composition per
    distinct set of config-shaping overrides."""

    def __init__(self, config_loader: Any, master: DictConfig) -> None:
        self.config_loader = config_loader
        self.master = master
        self._bases: dict[tuple[str, ...], DictConfig] = {}
        self._validated: dict[tuple[str, ...], DictConfig] = {}

    def validate(self, overrides: Sequence[str]) -> DictConfig:
        """Compose a job's config now (an error stops the sweep before any job runs); its launch takes it."""
        cfg = self(overrides)
        if len(self._validated) < 256:  # a huge batch is composed again at launch, not held in memory
            self._validated[tuple(overrides)] = cfg
        return cfg

    def for_launch(self, overrides: Sequence[str]) -> DictConfig:
        """The job's config: the one validated, else composed now."""
        cfg = self._validated.pop(tuple(overrides), None)
        return cfg if cfg is not None else self(overrides)

    def __call__(self, overrides: Sequence[str]) -> DictConfig:
        from hydra._internal.config_loader_impl import get_overrides_dirname

        from experiments.configs import apply_values, parse_overrides, shapes_composition

        parsed = parse_overrides(overrides)
        key = tuple(o.input_line for o in parsed if shapes_composition(o))
        if key not in self._bases:
            self._bases[key] = self.config_loader.load_sweep_config(self.master, list(key))
        cfg = apply_values(self._bases[key], [o for o in parsed if not shapes_composition(o)])
        # What Hydra records of the job's own overrides: all of them, in the order given.
        task = [o for o in parsed if not o.is_hydra_override()]
        with open_dict(cfg.hydra):
            cfg.hydra.overrides.task = [o.input_line for o in task]
            conf = cfg.hydra.job.config.override_dirname
            cfg.hydra.job.override_dirname = get_overrides_dirname(
                overrides=task, kv_sep=conf.kv_sep, item_sep=conf.item_sep, exclude_keys=conf.exclude_keys
            )
        OmegaConf.copy_cache(from_config=self.master, to_config=cfg)
        return cfg


class _ComposingLoader:
    """Hydra's config loader, but `load_sweep_config` of this sweep's master config goes through the
    composer. The sweeper validates each batch with it before the launch (Hydra's BasicSweeper and the
    Optuna sweeper both do), and the launch then takes the configs validated."""

    def __init__(self, loader: Any, composer: SweepComposer) -> None:
        self._loader = loader
        self._composer = composer

    def load_sweep_config(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        if master_config is not self._composer.master:
            return self._loader.load_sweep_config(master_config, sweep_overrides)
        return self._composer.validate(sweep_overrides)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class MemevalLauncher(BasicLauncher):
    """BasicLauncher, with each job's config from one composer shared with the sweeper's validation."""

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        loader = hydra_context.config_loader
        if isinstance(loader, _ComposingLoader):
            loader = loader._loader
        self.composer = SweepComposer(loader, config)
        # The sweeper holds this same context: its batch validation now composes through the composer.
        hydra_context.config_loader = _ComposingLoader(loader, self.composer)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        setup_globals()
        assert self.hydra_context is not None and self.config is not None and self.task_function is not None
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        log.info(f"Launching {len(job_overrides)} jobs locally")
        runs: list[JobReturn] = []
        for idx, overrides in enumerate(job_overrides, initial_job_idx):
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            sweep_config = self.composer.for_launch(list(overrides))
            with open_dict(sweep_config):
                sweep_config.hydra.job.id = idx
                sweep_config.hydra.job.num = idx
            runs.append(
                run_job(
                    hydra_context=self.hydra_context,
                    task_function=self.task_function,
                    config=sweep_config,
                    job_dir_key="hydra.sweep.dir",
                    job_subdir_key="hydra.sweep.subdir",
                )
            )
            configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        return runs


@dataclass
class MemevalLauncherConf:
    _target_: str = "hydra_plugins.memeval_launcher.memeval_launcher.MemevalLauncher"


ConfigStore.instance().store(
    group="hydra/launcher", name="memeval", node=MemevalLauncherConf, provider="memeval"
)
