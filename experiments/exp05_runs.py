"""In-process runs of EXP-05 configurations over one suite, sharing the retrieval-prefix cache.

Used by `experiments.exp05_report`: composes the Hydra config of a variant plus overrides, builds the
pipeline, runs it (a weight sweep reuses the cached candidates: only rank stages re-run) and
evaluates it, returning the per-query table and the metrics.json content (with tagging coverage).
"""

from __future__ import annotations

from collections.abc import Sequence

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from experiments.configs import CONF_DIR
from experiments.evaluate import Evaluation
from experiments.run import build_pipeline, execute, load_suite_from_config
from experiments.suites.suite import Suite
from experiments.sweeps import process_memo
from retrieval.pipeline import RunOutput


def compose_config(variant: str, overrides: Sequence[str] = (), suite_path: str | None = None) -> DictConfig:
    extra = [f"suite.path={suite_path}"] if suite_path else []
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        overrides = ["suite=beam", f"variant={variant}", "tracking=none", *extra, *overrides]
        return compose("config", overrides=overrides)


def run_config(cfg: DictConfig, suite: Suite | None = None) -> tuple[Suite, RunOutput, Evaluation]:
    suite = suite or load_suite_from_config(cfg)
    # a weight sweep re-runs only the rank stages that changed (process memo)
    output, evaluation = execute(
        OmegaConf.merge(cfg, {"progress": False}), suite, build_pipeline(cfg), memo=process_memo()
    )
    return suite, output, evaluation
