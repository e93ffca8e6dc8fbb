"""What every composition of memeval's configs needs, set up by one explicit call before it composes:

    from experiments.configure.setup import setup
    setup()

- the `stage` config group's nodes, built from the stage classes (experiments/configure/nodes.py), and the
  `system` group's bases, built from the live adapters' classes (experiments/configure/nodes.py);
- the OmegaConf resolvers the YAML files use, below.

Called by each entry point that composes (the Hydra apps' mains, experiments.configure.compose.compose_config
that the gate, reports, studies, the server, benchmarks and tests use). Once per process: a later call finds
the nodes and resolvers there and does nothing (building the nodes again cost ~0.1 s of CPU per compose,
a quarter of it, and a study or a test composes hundreds of times). Nothing here runs at import, and
nothing is registered through Hydra's plugin discovery, which would run it in every Hydra app of the
environment (tests/project/test_architecture.py).
"""

from __future__ import annotations

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from experiments import PROJECT_ROOT
from experiments.configure.nodes import register_stage_nodes, register_system_nodes
from experiments.exit_codes import RULE
from experiments.shipped_data import shipped_dataset


def setup() -> None:
    """Register the stage nodes and the resolvers, unless they are registered already."""
    share_the_config_store()
    if _registered():
        return
    register_resolvers()
    register_stage_nodes()
    register_system_nodes()


def _registered() -> bool:
    repo = ConfigStore.instance().repo
    nodes = all("dataclass" in repo.get(group, {}) for group in ("stage", "system"))
    return nodes and all(OmegaConf.has_resolver(name) for name in RESOLVERS)


def share_the_config_store() -> None:
    """Hydra deep-copies its config repository for every compose, and for each group `--help` lists, and
    the copy takes the ConfigStore singleton with every stage node in it: a fifth of a compose's CPU, and
    8.5 of the 10.4 s a Hydra-rendered --help took. Nothing writes to the store while composing
    (ConfigStore.load hands out a deep copy of the node it loads), so the store's copy may be the store
    (tests/configure/test_setup.py composes with and without this and compares)."""
    ConfigStore.__deepcopy__ = _itself  # type: ignore[attr-defined]


def _itself(store: ConfigStore, memo: dict) -> ConfigStore:
    return store


def register_resolvers() -> None:
    """The resolvers alone: enough for a config that names no stage (the --help templates)."""
    for name, resolver in RESOLVERS.items():
        OmegaConf.register_new_resolver(name, resolver, replace=True)


def _subdir(base: str | None, name: str) -> str | None:
    # `cache_dir=null` turns caching off; plain `${cache_dir}/embeddings` would make a folder named "None".
    return None if base is None else f"{base}/{name}"


def _file_sha256(path: str) -> str:
    # Imported when called: entry points import this module before parsing their arguments (numpy, no).
    from retrieval.retrievers.trec_run import file_sha256

    return file_sha256(path)


RESOLVERS = {
    # `${project_root:}`: data that ships with the project, from any working directory.
    "project_root": lambda: str(PROJECT_ROOT),
    # `${shipped_data:spark25}`: a dataset shipped with memeval, in a checkout or an installed wheel.
    "shipped_data": lambda name: str(shipped_dataset(name)),
    # `${subdir:${cache_dir},embeddings}`: a folder under the cache, or null when caching is off.
    "subdir": _subdir,
    # `${exit_code_rule:}` in the --help templates (conf/hydra/help/): experiments/exit_codes.py's one rule.
    "exit_code_rule": lambda: RULE,
    # `${file_sha256:${.path}}`: a file's content hash in the config, so the config hash (resume) and the
    # stage's fingerprint (caches) change when the file does (the TREC run channel, conf/stage/trec_run.yaml).
    "file_sha256": _file_sha256,
}
