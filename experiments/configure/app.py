"""A Hydra app whose body takes a record, not the config: the composed config is read once, here in the
configuration layer, into the app's frozen record (experiments/configure/app_settings.py), and the body
gets that record and what Hydra says of its job (`Job`).

    @hydra_app("conform", ConformSettings.from_config)
    def run_app(settings: ConformSettings, job: Job) -> None: ...

    run_app()  # Hydra parses the command line, composes conf/conform.yaml, runs the body

The body's `__module__` and `__name__` are kept (functools.wraps), and Hydra unwraps to the body, so the
job's name (`hydra.job.name`: the body's module) and its output folders are the app's own.
memeval-run (experiments/run/app.py) hands its composed config on itself: a run finishes and checks it first.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

S = TypeVar("S")
R = TypeVar("R")


@dataclass(frozen=True)
class Job:
    """What Hydra says of the running job: its output folder, the config groups' choices
    (`system=chroma`), and the command line's overrides (as given)."""

    output_dir: Path
    choices: Mapping[str, str | None]
    overrides: tuple[str, ...]

    @classmethod
    def current(cls) -> Job:
        hydra_node = HydraConfig.get()
        return cls(
            output_dir=Path(hydra_node.runtime.output_dir),
            choices=dict(hydra_node.runtime.choices),
            overrides=tuple(str(o) for o in hydra_node.overrides.task),
        )


def hydra_app(
    config_name: str,
    record: Callable[[DictConfig], S],
    *,
    refused: Callable[[BaseException, Job], None] | None = None,
) -> Callable[[Callable[[S, Job], R]], Callable[[], R]]:
    """A Hydra app over conf/<config_name>.yaml whose body takes `record(cfg)` and the `Job`.
    `refused(error, job)`: what the app does when its record cannot be made (a setting of the wrong kind,
    a value that does not resolve), before the error goes on to `console_script`: an app that leaves no
    folder behind a refused start removes it there, or exits 2 itself."""

    def decorate(body: Callable[[S, Job], R]) -> Callable[[], R]:
        @functools.wraps(body)
        def task(cfg: DictConfig) -> R:
            job = Job.current()
            try:
                settings = record(cfg)
            except BaseException as err:
                if refused is not None:
                    refused(err, job)
                raise
            return body(settings, job)

        return hydra.main(version_base="1.3", config_path="pkg://experiments.conf", config_name=config_name)(
            task
        )

    return decorate
