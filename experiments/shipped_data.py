"""Where the data that ships with memeval (`datasets/<name>/`, e.g. the default suite spark25) is found.

Configs name it as `${shipped_data:spark25}` (registered by experiments/configure/setup.py), so the same
config works in two layouts:

- a checkout (or an editable install): `<repository>/datasets/<name>/`;
- an installed wheel: pyproject.toml's `data-files` put the folders under `<prefix>/share/memeval/datasets/`,
  which is found through the installed distribution's file list (right for a venv, a `--user` and a system
  install alike).

`datasets/` stays a plain folder, never a Python package: a package of that name would shadow Hugging
Face's `datasets` for every program in the environment.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

# The folder above the package (a checkout, or site-packages in a wheel); not imported from `experiments`,
# whose config resolver imports this module.
PROJECT_ROOT = Path(__file__).resolve().parents[1]

DISTRIBUTION = "memeval"
INSTALLED_PREFIX = ("share", "memeval", "datasets")  # pyproject.toml's [tool.setuptools.data-files]


def installed_datasets_root(dist: metadata.Distribution | None = None) -> Path | None:
    """`<prefix>/share/memeval/datasets` of the installed distribution (memeval's by default), or None
    when it is not installed or holds no data (an editable install)."""
    if dist is None:
        try:
            dist = metadata.distribution(DISTRIBUTION)
        except metadata.PackageNotFoundError:
            return None
    n = len(INSTALLED_PREFIX)
    for file in dist.files or []:  # e.g. ../../../share/memeval/datasets/spark25/suite.yaml
        parts = file.parts
        for i in range(len(parts) - n):
            if parts[i : i + n] == INSTALLED_PREFIX:
                located = Path(str(dist.locate_file(file))).resolve()
                return located.parents[len(parts) - i - n - 1]  # the `datasets` folder above the file
    return None


def shipped_dataset(name: str) -> Path:
    """The folder of the shipped dataset `name`: the checkout's in a checkout, else the installed copy.

    When neither has it, the checkout's path is returned, so the loader's error names where it looked."""
    checkout = PROJECT_ROOT / "datasets" / name
    # PROJECT_ROOT is site-packages in an installed wheel, where `datasets/` may be Hugging Face's package.
    if (PROJECT_ROOT / "pyproject.toml").is_file() and checkout.is_dir():
        return checkout
    installed = installed_datasets_root()
    if installed is not None and (installed / name).is_dir():
        return installed / name
    return checkout
