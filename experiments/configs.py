"""Where the Hydra configs live (inside the package, so installed console scripts find them) and one
way to compose them outside a Hydra app (gate, reports, benchmarks, tests).

    cfg = compose_config(["suite=beam", "variant=dense"])
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig

CONF_DIR = Path(__file__).resolve().parent / "conf"


def compose_config(overrides: Sequence[str] = (), config_name: str = "config") -> DictConfig:
    """The config `memeval-run <overrides>` would see (without Hydra's runtime fields)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name=config_name, overrides=list(overrides))
