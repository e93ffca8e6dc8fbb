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


def config_groups() -> dict[str, list[str]]:
    """Each config group (a folder of CONF_DIR, Hydra's own `hydra/...` left out) and its options."""
    groups: dict[str, list[str]] = {}
    for path in sorted(CONF_DIR.rglob("*.yaml")):
        group = path.parent.relative_to(CONF_DIR).as_posix()
        if group != "." and group != "hydra" and not group.startswith("hydra/"):
            groups.setdefault(group, []).append(path.stem)
    return {group: sorted(options) for group, options in sorted(groups.items())}


def help_text(config_name: str) -> str:
    """The app's `hydra.help.template` with `$APP_CONFIG_GROUPS` filled in as Hydra fills it.

    Hydra's own --help composes the config once per group to list them (~1.5 s of CPU on this tree);
    the options are just the YAML files of each group folder, read here in milliseconds.
    """
    import string

    import yaml

    conf = yaml.safe_load((CONF_DIR / f"{config_name}.yaml").read_text())
    groups = "".join(f"{group}: {', '.join(options)}\n" for group, options in config_groups().items())
    # substitute, not safe_substitute: a placeholder Hydra would fill and this does not is an error
    return string.Template(conf["hydra"]["help"]["template"]).substitute(APP_CONFIG_GROUPS=groups)


def answer_help(config_name: str, argv: Sequence[str]) -> bool:
    """Print the help text and return True when `argv` asks for `--help` (the Hydra apps' mains call it)."""
    if "--help" not in argv and "-h" not in argv:
        return False
    print(help_text(config_name))
    return True
