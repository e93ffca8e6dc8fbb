"""A Hydra callback that hears a sweep's end as plain values: Hydra's Callback API hands `on_multirun_end` its
own config node (a DictConfig); this reads from it the two things a sweep's end needs, the sweep's folder
and its command-line overrides, so a subclass (experiments/merge.py `ShardMergeCallback`) takes no config.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class SweepEndCallback(Callback):
    """Subclasses implement `sweep_ended(sweep_dir, overrides)`."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self.sweep_ended(Path(str(config.hydra.sweep.dir)), [str(o) for o in config.hydra.overrides.task])

    def sweep_ended(self, sweep_dir: Path, overrides: list[str]) -> None:
        raise NotImplementedError
