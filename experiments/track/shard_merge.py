"""The automatic merge of a sharded sweep: `memeval-run -m shard=0/4,1/4,2/4,3/4` ends with one run.

Wired in conf/config.yaml (`hydra.callbacks.shard_merge`, after `mlflow_sweep`: Hydra ends callbacks in
reverse order, so the merge runs before the sweep's parent is finished and its best child chosen). When
every job of the sweep has finished, the shard jobs of each config are merged (experiments/merge.py) into
`<sweep dir>/merged/<k>`, each logged as a child of the sweep's parent with its shards below it.
A sweep that shards nothing does nothing here. Any launcher: the jobs' folders are all it reads.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from experiments.shards import SHARD_KEY, SHARDS_KEY
from experiments.track.sweep_parent import read_parent


def shards_swept(overrides: list[str]) -> bool:
    return any(o.split("=", 1)[0].lstrip("+~") in (SHARD_KEY, SHARDS_KEY) for o in overrides if "=" in o)


class ShardMergeCallback(Callback):
    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if not shards_swept([str(o) for o in config.hydra.overrides.task]):
            return
        # pandas and scipy (~2 s): a sweep that shards needs them here, one that does not never imports them
        from experiments.merge import merge_sweep

        sweep_dir = Path(str(config.hydra.sweep.dir))
        merged = merge_sweep(sweep_dir, read_parent(sweep_dir))
        for folder in merged:
            print(f"merged run in {folder}")
        if not merged:
            print(f"warning: no merged run in {sweep_dir} (see above)", file=sys.stderr)
