"""memeval's harness: suites, metrics, statistics, the runner, tracking, gate, reports, benchmarks."""

import os
from pathlib import Path

from omegaconf import OmegaConf

PROJECT_ROOT = Path(__file__).resolve().parents[1]

# MLflow sends usage telemetry from a background client unless told not to. memeval is an offline
# harness, and that client failed one of 16 parallel runs against a local server (a KeyError, exit 2).
# Off by default, set here because MLflow reads it when it is first imported and every memeval entry
# point imports this package first; a user who sets it (or DO_NOT_TRACK) keeps their choice.
if "DO_NOT_TRACK" not in os.environ:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


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

# `${project_root:}` in configs: data that ships with the project resolves from any working directory.
if not OmegaConf.has_resolver("project_root"):
    OmegaConf.register_new_resolver("project_root", lambda: str(PROJECT_ROOT))


# `${shipped_data:spark25}`: a dataset that ships with memeval, in a checkout or an installed wheel
# (experiments/shipped_data.py).
def _shipped_data(name: str) -> str:
    from experiments.shipped_data import shipped_dataset

    return str(shipped_dataset(name))


if not OmegaConf.has_resolver("shipped_data"):
    OmegaConf.register_new_resolver("shipped_data", _shipped_data)
# `${subdir:${cache_dir},embeddings}`: a folder under the cache, or null when caching is off
# (plain `${cache_dir}/embeddings` would turn `cache_dir=null` into a folder named "None").
if not OmegaConf.has_resolver("subdir"):
    OmegaConf.register_new_resolver("subdir", lambda base, name: None if base is None else f"{base}/{name}")


# `${exit_code_rule:}` in the --help templates (conf/hydra/help/): the one rule of experiments/exit_codes.py.
def _exit_code_rule() -> str:
    from experiments.exit_codes import RULE

    return RULE


if not OmegaConf.has_resolver("exit_code_rule"):
    OmegaConf.register_new_resolver("exit_code_rule", _exit_code_rule)


# `${file_sha256:${.path}}`: a file's content hash in the config, so the config hash (resume) and the
# stage's fingerprint (caches) change when the file does (the TREC run channel, conf/stage/trec_run.yaml).
def _file_sha256(path: str) -> str:
    from retrieval.retrievers.trec_run import file_sha256

    return file_sha256(path)


if not OmegaConf.has_resolver("file_sha256"):
    OmegaConf.register_new_resolver("file_sha256", _file_sha256)
