"""The installed package finds its data: spark25 (the default suite) ships as pyproject.toml's data-files
and `${shipped_data:NAME}` finds it in a checkout and after a wheel install (.ci/check_installed runs
`memeval-run` from a built wheel in an empty folder; these are the fast checks behind it)."""

from __future__ import annotations

import fnmatch
import subprocess
import tomllib
from importlib import metadata
from pathlib import Path

from experiments.configure.compose import compose_config
from experiments.shipped_data import INSTALLED_PREFIX, installed_datasets_root, shipped_dataset
from tests.support import REPO

DATA_FILES = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["data-files"]


def tracked(folder: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", folder], cwd=REPO, capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_every_tracked_file_under_datasets_ships_in_the_wheel():
    patterns = [Path(p) for globs in DATA_FILES.values() for p in globs]

    def shipped(name: str) -> bool:  # setuptools globs one folder each: `*` never crosses a `/`
        f = Path(name)
        return any(f.parent == p.parent and fnmatch.fnmatchcase(f.name, p.name) for p in patterns)

    missing = [f for f in tracked("datasets") if not shipped(f)]
    assert tracked("datasets") and not missing, f"not in [tool.setuptools.data-files]: {missing}"
    for target, globs in DATA_FILES.items():  # each file lands in the folder named like its source's
        for pattern in globs:
            source = Path(pattern).parent.relative_to("datasets").as_posix()
            assert target == "/".join((*INSTALLED_PREFIX, source))


def test_datasets_is_never_a_python_package():
    # A `datasets` package would shadow Hugging Face's `datasets` for every program in the environment.
    assert not [f for f in tracked("datasets") if f.endswith(".py")]


def test_the_default_suite_resolves_to_the_shipped_spark25():
    cfg = compose_config([])
    assert Path(cfg.suite.path) == shipped_dataset("spark25") == REPO / "datasets" / "spark25"
    assert (Path(cfg.suite.path) / "suite.yaml").is_file()


def test_an_installed_wheel_s_data_is_found_through_its_file_list(tmp_path):
    """As pip lays out a wheel: the dist-info in site-packages, the data files under <prefix>/share."""
    site = tmp_path / "lib" / "site-packages"
    data = tmp_path / "share" / "memeval" / "datasets" / "spark25"
    data.mkdir(parents=True)
    (data / "suite.yaml").write_text("name: spark25\n")
    info = site / "memeval-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: memeval\nVersion: 0.1.0\n")
    (info / "RECORD").write_text(
        "../../share/memeval/datasets/spark25/suite.yaml,,\nexperiments/__init__.py,,\n"
    )
    root = installed_datasets_root(metadata.PathDistribution(info))
    assert root == (tmp_path / "share" / "memeval" / "datasets").resolve()


def test_an_install_without_data_gives_none(tmp_path):
    info = tmp_path / "memeval-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: memeval\nVersion: 0.1.0\n")
    (info / "RECORD").write_text("experiments/__init__.py,,\n")
    assert installed_datasets_root(metadata.PathDistribution(info)) is None
