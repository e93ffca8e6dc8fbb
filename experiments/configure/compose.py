"""Where the Hydra configs live (inside the package, so installed console scripts find them), the one way
to compose them outside a Hydra app (gate, reports, studies, the server, benchmarks, tests), and what every
composition finishes alike: the variant's name and stage order (build.py `finish_variant`).

    cfg = compose_config(["suite=beam", "variant=dense"])
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf, open_dict

from experiments.configure.build import finish_variant
from experiments.configure.nodes import stage_classes, system_nodes
from experiments.configure.setup import register_resolvers, setup

# conf/ at the top of the checkout, shipped as the package experiments.conf (pyproject's package-dir):
# the package's folder is the config folder in a checkout, an editable install and a wheel alike.
_CONF = importlib.import_module("experiments.conf")
# A stale conf folder left inside experiments/ (only __pycache__) would shadow it as a namespace package.
if getattr(_CONF, "__file__", None) is None:
    raise ImportError(f"experiments.conf resolved to {list(_CONF.__path__)}, not conf/: delete that folder")
CONF_DIR = Path(_CONF.__file__).resolve().parent


def compose_config(
    overrides: Sequence[str] = (), config_name: str = "config", *, hydra_node: bool = False
) -> DictConfig:
    """The config `memeval-run <overrides>` would run (finish_variant), without Hydra's node; with it
    (`hydra_node=True`) as composed, before `run_config` finishes it. Also from inside a Hydra app
    (memeval-study), whose Hydra reads the same conf dir."""
    setup()
    if GlobalHydra.instance().is_initialized():
        cfg = compose(config_name=config_name, overrides=list(overrides), return_hydra_config=True)
    else:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name=config_name, overrides=list(overrides), return_hydra_config=True)
    return cfg if hydra_node else run_config(cfg)


def run_config(cfg: DictConfig) -> DictConfig:
    """A config composed with Hydra's node as its run sees it: the node removed (as Hydra's compose() and
    its jobs remove it), the variant named by the choice the node records and its stages ordered."""
    choice = cfg.hydra.runtime.choices.get("variant")
    with open_dict(cfg):
        del cfg["hydra"]
    return finish_variant(cfg, choice)


def parse_overrides(overrides: Sequence[str]) -> list:
    """Hydra's parse of each override line (a copy of it: a sweep's jobs repeat most lines, and Hydra's
    grammar parser is a generated ANTLR parser, slow per line)."""
    import copy

    return [copy.copy(_parsed(line)) for line in overrides]


@functools.lru_cache(maxsize=1024)
def _parsed(line: str) -> Any:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_overrides([line])[0]


def shapes_composition(override) -> bool:
    """Whether a parsed override changes the composition itself (a config-group choice, `key@package=`,
    `~key`, a sweep, `hydra.*`), rather than setting a value (`stage.x.weight=0.2`).

    Hydra applies value settings after the defaults list is composed, in order, so configs that differ
    only in values can share one composition and have their values set as Hydra sets them
    (`apply_values`)."""
    name = override.key_or_group
    return (
        override.package is not None
        or override.is_delete()
        or override.is_sweep_override()
        or name.split(".")[0].split("/")[0] == "hydra"
        or (CONF_DIR / name).is_dir()
    )


def split_overrides(overrides: Sequence[str]) -> tuple[list, list]:
    """Parsed `overrides` as (those that shape the composition, plain value settings)."""
    parsed = parse_overrides(overrides)
    return [o for o in parsed if shapes_composition(o)], [o for o in parsed if not shapes_composition(o)]


def apply_values(cfg: DictConfig, values: list) -> DictConfig:
    """A deep copy of `cfg` with the parsed value overrides applied exactly as Hydra applies them."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    cfg = config_copy(cfg)
    ConfigLoaderImpl._apply_overrides_to_config(values, cfg)
    return cfg


class Composer:
    """The configs of many override lists (a sweep's jobs, a study's rows) for one Hydra composition per
    distinct set of the overrides that shape it (`shapes_composition`): configs that differ only in values
    (`stage.x.weight=0,0.1,...`) share one composition, then get their values set as Hydra sets them
    (`apply_values`): the same configs as Hydra's own, at a fraction of the cost (tests/run/test_sweeps.py and
    tests/study/test_study.py compare them).

    `compose(shaping overrides)` composes one: compose_config (a study) or the launcher's config loader (a
    sweep). `given`, a config composed already from `given_overrides` (a sweep's master config: its command
    line without its sweeps), is the base of an override list with the same shaping overrides whose values
    include the given ones, each set again as it was. A `+key=` addition is never applied twice: such a
    list is composed. Scoped to one sweep or study: the YAML files cannot change under it unseen for long.
    """

    def __init__(
        self,
        compose: Callable[[list[str]], DictConfig],
        given: DictConfig | None = None,
        given_overrides: Sequence[str] = (),
    ) -> None:
        self._compose = compose
        self._bases: dict[tuple[str, ...], DictConfig] = {}
        self.given = given
        shaping, values = split_overrides(given_overrides)
        self._given_key = tuple(o.input_line for o in shaping)
        self._given_values = {o.input_line for o in values}

    def __call__(self, overrides: Sequence[str]) -> DictConfig:
        shaping, values = split_overrides(overrides)
        key = tuple(o.input_line for o in shaping)
        if self._is_given(key, values):
            base = self.given
        elif key in self._bases:
            base = self._bases[key]
        else:
            base = self._bases[key] = self._compose(list(key))
        return apply_values(base, values)

    def _is_given(self, key: tuple[str, ...], values: list) -> bool:
        return (
            self.given is not None
            and key == self._given_key
            and self._given_values <= {o.input_line for o in values}
            and not any(o.is_add() for o in values)
        )


def config_copy(cfg: DictConfig) -> DictConfig:
    """`copy.deepcopy(cfg)`, made by a pickle round trip: C code where OmegaConf's deepcopy is Python
    code node by node (a sweep copies each job's config), and the same tree, every node's value, type,
    flags and metadata (tests/run/test_configs.py walks both). A config holding something pickle cannot take
    is deep-copied. In memory only: these bytes never touch a file, so nothing planted can reach
    `pickle.loads` here (with copy.deepcopy the tracked sweep went over its 2x-one-run target:
    reports/benchmarks/sweep_cost.md)."""
    import copy
    import pickle

    try:
        return pickle.loads(pickle.dumps(cfg, protocol=pickle.HIGHEST_PROTOCOL))
    except (pickle.PicklingError, TypeError, AttributeError):
        return copy.deepcopy(cfg)


def config_groups() -> dict[str, list[str]]:
    """Each config group (a folder of CONF_DIR, Hydra's own `hydra/...` left out) and its options."""
    groups: dict[str, list[str]] = {}
    for path in sorted(CONF_DIR.rglob("*.yaml")):
        group = path.parent.relative_to(CONF_DIR).as_posix()
        if group != "." and group != "hydra" and not group.startswith("hydra/"):
            groups.setdefault(group, []).append(path.stem)
    # The stage nodes built from the classes are options as well (experiments/configure/nodes.py).
    groups["stage"] = sorted({*groups.get("stage", []), *stage_classes()})
    groups["stage/dataclass"] = sorted(stage_classes())
    # And the `system` group's bases, built from the live adapters' classes (experiments/configure/nodes.py).
    for name in system_nodes():
        group, _, option = f"system/dataclass/{name}".rpartition("/")
        groups.setdefault(group, []).append(option)
    return {group: sorted(options) for group, options in sorted(groups.items())}


# Groups an app's --help lists only where that app takes them: plans for memeval-study; live systems and
# sweeps not for the trainers (a trainer runs no study, system or sweep).
HELP_ONLY_IN = {"study": ("run_study",), "system": ("config", "run_study"), "sweep": ("config", "run_study")}


def shown_in_help(group: str, config_name: str) -> bool:
    """Whether `--help` of the app composing `config_name` lists `group`: never the bases built from the
    classes (`stage/dataclass`, `system/dataclass`: internal, a variant's files start from them)."""
    if "dataclass" in group.split("/"):  # the bases and what sits below them (system/dataclass/unset)
        return False
    return config_name in HELP_ONLY_IN.get(group, (config_name,))


def help_text(config_name: str) -> str:
    """The app's `hydra.help.template` with `$APP_CONFIG_GROUPS` filled in as Hydra fills it.

    Hydra's own --help composes the config once per group to list them (seconds of CPU on this tree);
    the options are just the YAML files of each group folder, read here at once.
    """
    import string

    register_resolvers()
    # The app's config selects its help template (`override hydra/help: <name>`, conf/hydra/help/).
    conf = yaml.safe_load((CONF_DIR / f"{config_name}.yaml").read_text())
    key = "override hydra/help"
    chosen = [e[key] for e in conf.get("defaults", []) if isinstance(e, dict) and key in e]
    if not chosen:
        raise ValueError(f"{CONF_DIR / f'{config_name}.yaml'}: defaults: no `override hydra/help: <name>`")
    # Read as Hydra reads it, interpolations resolved (`${exit_code_rule:}`: experiments/exit_codes.py).
    template = OmegaConf.load(CONF_DIR / "hydra" / "help" / f"{chosen[0]}.yaml").template
    shown = {g: o for g, o in config_groups().items() if shown_in_help(g, config_name)}
    groups = "".join(f"{group}: {', '.join(options)}\n" for group, options in shown.items())
    # substitute, not safe_substitute: a placeholder Hydra would fill and this does not is an error
    return string.Template(template).substitute(APP_CONFIG_GROUPS=groups)


def answer_help(config_name: str, argv: Sequence[str]) -> bool:
    """Print the help text and return True when `argv` asks for `--help` (the Hydra apps' mains call it)."""
    if "--help" not in argv and "-h" not in argv:
        return False
    print(help_text(config_name))
    return True


def yaml_text(container: Any) -> str:
    """`OmegaConf.to_yaml` of a config already turned into a container (to_container), through libyaml's
    emitter when PyYAML has it (C, not Python: a sweep job writes its config every run). The representers are
    OmegaConf's (a string that would read back as a number or bool is quoted); a long string may be folded
    at other places, and the YAML reads back the same (tests/run/test_configs.py)."""
    dumper = _dumper()
    return yaml.dump(container, default_flow_style=False, allow_unicode=True, sort_keys=False, Dumper=dumper)


@functools.cache
def _dumper() -> type:
    from omegaconf._utils import get_omega_conf_dumper

    omegaconf_dumper = get_omega_conf_dumper()
    if not getattr(yaml, "__with_libyaml__", False):
        return omegaconf_dumper

    class Dumper(yaml.CDumper):
        pass

    for kind, represent in omegaconf_dumper.yaml_representers.items():
        Dumper.add_representer(kind, represent)
    for kind, represent in omegaconf_dumper.yaml_multi_representers.items():
        Dumper.add_multi_representer(kind, represent)
    return Dumper
