"""memeval's harness: suites, metrics, statistics, the runner, tracking, gate, reports, benchmarks."""

from pathlib import Path

from omegaconf import OmegaConf

PROJECT_ROOT = Path(__file__).resolve().parents[1]

# `${project_root:}` in configs: data that ships with the project resolves from any working directory.
if not OmegaConf.has_resolver("project_root"):
    OmegaConf.register_new_resolver("project_root", lambda: str(PROJECT_ROOT))
