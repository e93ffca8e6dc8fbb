"""memeval's harness: suites, metrics, statistics, the runner, tracking, gate, reports, benchmarks."""

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]

# MLflow sends usage telemetry from a background client unless told not to. memeval is an offline
# harness, and that client failed one of 16 parallel runs against a local server (a KeyError, exit 2).
# Off by default, set here because MLflow reads it when it is first imported and every memeval entry
# point imports this package first; a user who sets it (or DO_NOT_TRACK) keeps their choice.
if "DO_NOT_TRACK" not in os.environ:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# MLflow draws a "Downloading artifacts" bar for every artifact it fetches; memeval fetches a few small
# files per run (a report over 12 runs drew 12 bars). Off by default, like the telemetry; read at each
# download, so MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR=true shows them again.
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


def _register_checkout_conf() -> None:
    """conf/ ships as the package experiments.conf (pyproject's package-dir maps it, in a wheel and an
    editable install). A checkout used without installing (PYTHONPATH=.) has no such mapping, so the
    same folder is registered under that name here."""
    import importlib.util
    import sys

    init = PROJECT_ROOT / "conf" / "__init__.py"
    if importlib.util.find_spec(f"{__name__}.conf") is None and init.is_file():
        spec = importlib.util.spec_from_file_location(
            f"{__name__}.conf", init, submodule_search_locations=[str(init.parent)]
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)


_register_checkout_conf()
