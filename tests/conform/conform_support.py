"""Running memeval-conform in process on a composed config (what the console script runs, without Hydra's
app): the tests' helper."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from experiments.configure.app_settings import ConformSettings
from experiments.configure.compose import compose_config
from experiments.conform.cli import conform


def conform_run(run_dir: Path, *overrides: str, system: str = "memeval_serve") -> tuple[int, dict[str, Any]]:
    """(exit code, conformance.json) of `memeval-conform system=<system> tracking=none <overrides>`."""
    cfg = compose_config([f"system={system}", "tracking=none", *overrides], config_name="conform")
    code = conform(ConformSettings.from_config(cfg), run_dir, system)
    return code, json.loads((run_dir / "conformance.json").read_text())


def statuses(report: dict[str, Any], status: str) -> set[str]:
    return {c["id"] for c in report["checks"] if c["status"] == status}
