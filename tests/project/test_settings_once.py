"""A run reads its settings once: the configuration layer (experiments/configure/) and the app that hands
it the composed config (experiments/run/app.py) alone speak OmegaConf; every other module takes the frozen
record configure/settings.py makes (`RunSettings`), or plain values from it. Checked on the source: an
import of omegaconf, or a DictConfig in an annotation, names the module."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import REPO

CONFIG_LAYER = ("experiments/configure/", "experiments/run/app.py")
# Where Hydra itself hands over a DictConfig, and nothing of ours could take its place:
EXEMPT = {
    # Hydra's Launcher plugin API: it composes and hands each job its config.
    "hydra_plugins/memeval_launcher/memeval_launcher.py",
    # Hydra's Callback API: on_multirun_start/end receive Hydra's own node (the sweep's folder, overrides).
    "experiments/track/sweep_parent.py",
    # ... and hand a sweep's end on as plain values (its folder, its overrides): the shard merge's and the
    # skipped jobs' callbacks subclass it and take no config.
    "experiments/track/sweep_end.py",
    # Hydra and OmegaConf errors, caught by class to exit 2 with one line (no config is read).
    "experiments/exit_codes.py",
}
CONFIG_TYPES = {"DictConfig", "ListConfig"}


def _annotations(tree: ast.AST) -> list[ast.expr]:
    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
            found += [a.annotation for a in every if a is not None and a.annotation is not None]
            found += [node.returns] if node.returns is not None else []
        elif isinstance(node, ast.AnnAssign):
            found.append(node.annotation)
    return found


def _names_a_config(annotation: ast.expr) -> bool:
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name) and node.id in CONFIG_TYPES:
            return True
        if isinstance(node, ast.Attribute) and node.attr in CONFIG_TYPES:
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if any(t in node.value for t in CONFIG_TYPES):
                return True
    return False


def config_readers(source: str) -> list[str]:
    """What in a module's source speaks OmegaConf: each omegaconf import and each annotation that names a
    DictConfig or ListConfig, with its line."""
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        modules = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
        if any(m.split(".")[0] == "omegaconf" for m in modules):
            found.append(f"line {node.lineno}: imports omegaconf")
    found += [f"line {a.lineno}: takes a {ast.unparse(a)}" for a in _annotations(tree) if _names_a_config(a)]
    return found


def _modules() -> list[Path]:
    return sorted(p for top in ("experiments", "hydra_plugins") for p in (REPO / top).rglob("*.py"))


def test_only_the_configuration_layer_speaks_omegaconf():
    found = {}
    for path in _modules():
        name = path.relative_to(REPO).as_posix()
        if name.startswith(CONFIG_LAYER) or name in EXEMPT:
            continue
        if readers := config_readers(path.read_text()):
            found[name] = readers
    assert found == {}, "\n".join(f"{name}: {'; '.join(why)}" for name, why in found.items())


def test_every_exemption_is_a_module_that_still_needs_it():
    stale = [name for name in EXEMPT if not config_readers((REPO / name).read_text())]
    assert stale == []


def test_the_scan_finds_an_import_and_an_annotation():
    source = (
        "from __future__ import annotations\n"
        "import omegaconf.errors\n"
        "def f(cfg: DictConfig, x: int) -> 'ListConfig | None': ...\n"
        "y: list[omegaconf.DictConfig] = []\n"
    )
    assert config_readers(source) == [
        "line 2: imports omegaconf",
        "line 3: takes a DictConfig",
        "line 3: takes a 'ListConfig | None'",
        "line 4: takes a list[omegaconf.DictConfig]",
    ]
    assert config_readers("def f(settings: RunSettings) -> dict: ...\n") == []
