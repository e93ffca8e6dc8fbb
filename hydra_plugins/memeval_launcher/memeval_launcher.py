"""memeval's default Hydra launcher: Hydra's basic one, composing each sweep job's config once.

Hydra's BasicSweeper composes every job's config to validate the batch, then BasicLauncher composes it
again to run it: two full compositions per job, each about as costly as a warm job's own work. Here the
sweeper's validation goes through the launcher's SweepLoader (it shares the launcher's Hydra context), and
the launch takes the configs it validated. Jobs of a sweep that differ only in values
(`stage.x.weight=0,0.1,...`) share one composition of what shapes the config (group choices, `hydra.*`,
deletions: experiments.configure.compose.Composer, which composes a study's rows too), then get their values
set exactly as Hydra sets them, and the few Hydra fields that name the job's overrides
(`hydra.overrides.task`, `hydra.job.override_dirname`) as Hydra writes them. tests/run/test_sweeps.py compares
every job's config, Hydra node included, with Hydra's own composition.

Each job then runs through `run_job` below: Hydra's own, with its config copies and YAML files made
cheaper (what it changes is listed there).

Selected in conf/config.yaml (`override hydra/launcher: memeval`, conf/hydra/launcher/memeval.yaml); any
sweeper works with it (basic, Optuna), and `hydra/launcher=joblib` or `=slurm` work as before (they compose
in their workers). Hydra imports this module in every Hydra app of the environment (its plugin discovery):
at import it defines classes and imports only Hydra and OmegaConf, never memeval
(tests/project/test_architecture.py).
"""

import gc
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra._internal.core_plugins.basic_launcher import BasicLauncher
from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import (
    JobReturn,
    JobRuntime,
    JobStatus,
    _flush_loggers,
    configure_log,
    env_override,
    filter_overrides,
    setup_globals,
)
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

log = logging.getLogger(__name__)


class SweepLoader:
    """Hydra's config loader, but `load_sweep_config` of this sweep's master config comes from one
    experiments.configure.compose.Composer (one composition per distinct set of config-shaping overrides, the
    master config reused where it is that composition already), with the few Hydra fields that name the
    job's own overrides written as Hydra writes them. The sweeper validates each batch with it before the
    launch (Hydra's BasicSweeper and the Optuna sweeper both do), and the launch takes the configs validated.
    """

    def __init__(self, loader: Any, master: DictConfig) -> None:
        # Imported here, not at the top: Hydra imports this module in every Hydra app of the environment.
        from experiments.configure.compose import Composer, parse_overrides

        self.loader = loader
        self.master = master
        task = parse_overrides(list(master.hydra.overrides.task))
        self.composer = Composer(
            lambda key: loader.load_sweep_config(master, key),
            given=master,
            given_overrides=[o.input_line for o in task if not o.is_sweep_override()],
        )
        self._validated: dict[tuple[str, ...], DictConfig] = {}

    def load_sweep_config(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        """A job's config, composed now (an error stops the sweep before any job runs), kept for launch."""
        if master_config is not self.master:
            return self.loader.load_sweep_config(master_config, sweep_overrides)
        cfg = self.job_config(sweep_overrides)
        if len(self._validated) < 256:  # a huge batch is composed again at launch, not held in memory
            self._validated[tuple(sweep_overrides)] = cfg
        return cfg

    def for_launch(self, overrides: Sequence[str]) -> DictConfig:
        """The job's config: the one validated, else composed now."""
        cfg = self._validated.pop(tuple(overrides), None)
        return cfg if cfg is not None else self.job_config(overrides)

    def job_config(self, overrides: Sequence[str]) -> DictConfig:
        from hydra._internal.config_loader_impl import get_overrides_dirname

        from experiments.configure.compose import parse_overrides

        cfg = self.composer(overrides)
        # What Hydra records of the job's own overrides: all of them, in the order given.
        task = [o for o in parse_overrides(overrides) if not o.is_hydra_override()]
        with open_dict(cfg.hydra):
            cfg.hydra.overrides.task = [o.input_line for o in task]
            conf = cfg.hydra.job.config.override_dirname
            cfg.hydra.job.override_dirname = get_overrides_dirname(
                overrides=task, kv_sep=conf.kv_sep, item_sep=conf.item_sep, exclude_keys=conf.exclude_keys
            )
        OmegaConf.copy_cache(from_config=self.master, to_config=cfg)
        return cfg

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


class MemevalLauncher(BasicLauncher):
    """BasicLauncher, with each job's config from one composer shared with the sweeper's validation."""

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        loader = hydra_context.config_loader
        if isinstance(loader, SweepLoader):
            loader = loader.loader
        # The sweeper holds this same context: its batch validation now composes through the composer.
        self.loader = hydra_context.config_loader = SweepLoader(loader, config)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        setup_globals()
        assert self.hydra_context is not None and self.config is not None and self.task_function is not None
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        log.info(f"Launching {len(job_overrides)} jobs locally")
        runs: list[JobReturn] = []
        for idx, overrides in enumerate(job_overrides, initial_job_idx):
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            sweep_config = self.loader.for_launch(list(overrides))
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
            if len(runs) == 1:
                # What the first job left alive (suite, indexes, process memo, modules) stays for the sweep:
                # out of the cyclic collector's full passes, which re-walked it every few jobs. Once: a later
                # job's garbage is collected as usual.
                gc.freeze()
        return runs


def run_job(
    hydra_context: HydraContext,
    task_function: TaskFunction,
    config: DictConfig,
    job_dir_key: str,
    job_subdir_key: str | None,
) -> JobReturn:
    """`hydra.core.utils.run_job` of Hydra 1.3.8 (pinned in pyproject.toml), the same steps in the same
    order, four of them cheaper (they were a fifth of a warm sweep job):
    - `HydraConfig` holds the job config's own (read-only) Hydra node, not a copy of it (`_hydra_view`): the
      job's output directory is set in it once, where Hydra copies the node, sets the directory in both and
      copies the node again;
    - `JobReturn.hydra_cfg` is that view, not a third copy (nothing changes it after the job);
    - the task's config is copied without the Hydra node (`_copy_without_hydra`), not copied whole and the
      node deleted from the copy;
    - `.hydra/config.yaml`, `hydra.yaml`, `overrides.yaml` are written by libyaml's emitter with OmegaConf's
      representers (experiments.configure.compose.yaml_text): the same YAML, read back, as Hydra's files.
    Hydra's `chdir` (a deprecated default) is left to Hydra: a job that asks for it runs through Hydra's own.
    tests/run/test_sweeps.py compares every file and return with the basic launcher's.
    """
    from hydra import version
    from hydra.core.utils import run_job as hydras_run_job

    from experiments.configure.compose import yaml_text

    chdir = config.hydra.job.chdir
    if chdir or (chdir is None and not version.base_at_least("1.2")):
        return hydras_run_job(
            hydra_context=hydra_context,
            task_function=task_function,
            config=config,
            job_dir_key=job_dir_key,
            job_subdir_key=job_subdir_key,
        )
    callbacks = hydra_context.callbacks
    orig_hydra_cfg = HydraConfig.instance().cfg
    hydra_cfg = HydraConfig.instance().cfg = _hydra_view(config)  # for `${hydra:...}` in the directory keys
    output_dir = str(OmegaConf.select(config, job_dir_key))
    if job_subdir_key is not None:
        output_dir = os.path.join(output_dir, str(OmegaConf.select(config, job_subdir_key)))
    with read_write(config.hydra.runtime), open_dict(config.hydra.runtime):  # the view's node too
        config.hydra.runtime.output_dir = os.path.abspath(output_dir)
    try:
        ret = JobReturn()
        task_cfg = _copy_without_hydra(config)
        ret.cfg = task_cfg
        ret.hydra_cfg = hydra_cfg
        ret.overrides = OmegaConf.to_container(config.hydra.overrides.task)
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        ret.working_dir = os.getcwd()
        configure_log(config.hydra.job_logging, config.hydra.verbose)
        if config.hydra.output_subdir is not None:
            hydra_output = Path(config.hydra.runtime.output_dir) / Path(config.hydra.output_subdir)
            hydra_output.mkdir(parents=True, exist_ok=True)
            for name, node in (
                ("config.yaml", task_cfg),
                ("hydra.yaml", hydra_cfg),
                ("overrides.yaml", config.hydra.overrides.task),
            ):
                text = yaml_text(OmegaConf.to_container(node, enum_to_str=True))
                (hydra_output / name).write_text(text, encoding="utf-8")
        with env_override(hydra_cfg.hydra.job.env_set):
            callbacks.on_job_start(config=config, task_function=task_function)
            try:
                ret.return_value = task_function(task_cfg)
                ret.status = JobStatus.COMPLETED
            except Exception as e:
                ret.return_value = e
                ret.status = JobStatus.FAILED
        ret.task_name = JobRuntime.instance().get("name")
        _flush_loggers()
        callbacks.on_job_end(config=config, job_return=ret)
        return ret
    finally:
        HydraConfig.instance().cfg = orig_hydra_cfg


def _hydra_view(config: DictConfig) -> DictConfig:
    """What `HydraConfig.set_config(config)` stores: the Hydra node made read-only, under a root of its own
    and still a child of `config` (so `${hydra:...}` and interpolations from it into the task's config
    resolve), but the node itself rather than a copy: a job's config is its own (composed for it), and
    ends with the job."""
    from hydra.conf import HydraConf

    OmegaConf.set_readonly(config.hydra, True)
    node_type = OmegaConf.get_type(config, "hydra")
    assert node_type is not None and issubclass(node_type, HydraConf)
    view = DictConfig({})
    view.__dict__["_content"] = {"hydra": config._get_node("hydra")}
    return view


def _copy_without_hydra(config: DictConfig) -> DictConfig:
    """`copy.deepcopy(config)` with its `hydra` key deleted, as Hydra makes the task's config, without
    copying the Hydra node (two thirds of the config) only to delete it (and copied by `config_copy`, the
    same tree faster). tests/run/test_sweeps.py compares the two."""
    from experiments.configure.compose import config_copy

    content = config.__dict__["_content"]
    config.__dict__["_content"] = {key: node for key, node in content.items() if key != "hydra"}
    try:
        return config_copy(config)
    finally:
        config.__dict__["_content"] = content
