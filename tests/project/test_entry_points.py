"""The documented commands start: every console script answers --help from a directory outside the
repository (configs ship inside the package), and a run that cannot start refuses before any work.

The scripts are the ones `pip install` put next to this interpreter; CI also checks them after a
non-editable install into a fresh virtualenv (.ci/check_installed).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO

BIN = Path(sys.executable).parent
SCRIPTS = {
    "memeval-run": "memeval-run: score one retrieval variant",
    "memeval-gate": "usage: memeval-gate",
    "memeval-report": "usage: memeval-report",
    "memeval-train-reranker": "memeval-train-reranker: fine-tune a cross-encoder",
    "memeval-study": "memeval-study: run a study plan",
    "memeval-serve": "usage: memeval-serve",
    "memeval-merge": "usage: memeval-merge",
    "memeval-export": "usage: memeval-export",
    "memeval-protocols": "usage: memeval-protocols",
    "memeval-conform": "memeval-conform: check a memory service",
}


def _env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1"}


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_console_script_answers_help_from_another_directory(script, tmp_path):
    path = BIN / script
    assert path.is_file(), f"{script} is not installed next to {sys.executable}: pip install -e ."
    done = subprocess.run([str(path), "--help"], cwd=tmp_path, env=_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert SCRIPTS[script] in done.stdout
    assert not any(tmp_path.iterdir())  # asking for help writes nothing


def test_a_run_whose_reranker_is_missing_refuses_before_any_work_and_leaves_no_folder(tmp_path):
    missing = tmp_path / "no-such-reranker"
    done = subprocess.run(
        [
            str(BIN / "memeval-run"),
            "variant=spark_phase2",
            f"stage.cross_encoder.scorer.model={missing}",
            "tracking=none",
        ],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert str(missing) in done.stderr and "memeval-train-reranker" in done.stderr
    assert "memories" not in done.stdout  # the suite was never loaded, nothing was retrieved
    assert not (tmp_path / "outputs").exists()


# What --help must not wait for: each costs from 0.5 s (pandas) to several seconds (torch) to import.
HEAVY = {
    "scipy",
    "pandas",
    "torch",
    "mlflow",
    "sentence_transformers",
    "transformers",
    "matplotlib",
    "sklearn",
}
ENTRY_MODULES = {  # console script module -> heavy packages it may import before parsing its arguments
    "experiments.run.app": set(),
    "experiments.study.cli": set(),
    "experiments.training.reranker": set(),
    "experiments.gate": {"pandas"},  # argparse apps whose options need the run-table code
    "experiments.compare.cli": {"pandas"},
    "experiments.merge": {"pandas"},
    "experiments.conform.cli": set(),
}


@pytest.mark.parametrize("module", ENTRY_MODULES)
def test_entry_modules_import_no_heavy_package_before_parsing_arguments(module):
    # The import graph, not a timing: timings are noise on a shared machine, the graph is not.
    code = f"import sys, {module}; print(' '.join(sorted({sorted(HEAVY)!r} & sys.modules.keys())))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(done.stdout.split())
    assert loaded <= ENTRY_MODULES[module], f"{module} imports {sorted(loaded - ENTRY_MODULES[module])}"


@pytest.mark.slow  # three Hydra --help renderings, ~2 s of CPU each
def test_help_text_is_the_one_hydra_renders_for_each_app():
    # The apps answer --help from their template without Hydra (whose group listing costs ~1.5 s);
    # this runs Hydra's own help for each and compares.
    from experiments.configure.compose import help_text, shown_in_help

    apps = {
        "config": "experiments.run.app",
        "run_study": "experiments.study.cli",
        "train_reranker": "experiments.training.reranker",
        "conform": "experiments.conform.cli",
    }
    for config_name, module in apps.items():
        code = (
            "import sys; from experiments.configure.setup import setup; setup(); "
            f"from {module} import run_app; sys.argv = ['app', '--help']; run_app()"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env())
        assert done.returncode == 0, done.stderr
        # Hydra lists every group; the apps leave out internal ones and those they do not take (below)
        listed = [
            line
            for line in done.stdout.split("\n")
            if not ((m := re.match(r"([a-z_/]+): ", line)) and not shown_in_help(m[1], config_name))
        ]
        assert "\n".join(listed) == help_text(config_name) + "\n", config_name


def test_help_lists_no_internal_group_and_only_the_groups_an_app_takes():
    """Issue 41: --help listed `stage/dataclass`, and memeval-train-reranker listed studies and systems."""
    from experiments.configure.compose import help_text

    for config_name in ("config", "run_study", "train_reranker"):
        text = help_text(config_name)
        assert "dataclass" not in text and "\nvariant: " in text and "\nstage: " in text, config_name
    assert "\nstudy: " in help_text("run_study") and "\nstudy: " not in help_text("config")
    trainer = help_text("train_reranker")
    assert "\nstudy: " not in trainer and "\nsystem: " not in trainer and "\nsweep: " not in trainer


def test_the_configs_are_the_top_level_conf_folder_imported_as_experiments_conf():
    import experiments.conf

    from experiments.configure.compose import CONF_DIR

    assert CONF_DIR == REPO / "conf" == Path(experiments.conf.__file__).parent
    assert (CONF_DIR / "config.yaml").is_file() and not REPO.joinpath("experiments", "conf").exists()


def test_the_wheel_lists_every_package_of_the_tree():
    # package-dir (conf/ -> experiments.conf) needs an explicit package list; a new package folder
    # missing from it would be left out of the wheel.
    import tomllib

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    tree = {
        ".".join(init.parent.relative_to(REPO).parts)
        for top in ("retrieval", "experiments", "hydra_plugins")
        for init in (REPO / top).rglob("__init__.py")
    }
    conf = REPO / "conf"  # experiments.conf: its group folders hold YAML only, listed as data packages
    groups = {
        ".".join(("experiments", "conf", *d.relative_to(conf).parts))
        for d in conf.rglob("*")
        if d.is_dir() and "__pycache__" not in d.parts and any(d.glob("*.yaml"))
    }
    data = {  # YAML read beside the code that reads it (experiments/gates/): shipped as data packages
        ".".join(d.relative_to(REPO).parts)
        for d in (REPO / "experiments").rglob("*")
        if d.is_dir() and any(d.glob("*.yaml")) and not (d / "__init__.py").exists()
    }
    assert listed == tree | {"experiments.conf", "hydra_plugins"} | groups | data


def test_python_m_experiments_run_composes_the_run_config(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "experiments.run", "--cfg", "job", "variant=bm25", "tracking=none"],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "experiments.suites.jsonl.load_suite" in done.stdout and not any(tmp_path.iterdir())


def test_the_gate_and_serve_configs_ship_beside_their_code_not_as_config_groups():
    # Read with yaml, not composed: a Hydra config group listed by --help would promise `gate=...`.
    from experiments.configure.compose import config_groups
    from experiments.gate import GATES_DIR, GateConfig
    from experiments.serve.service import OVERRIDE_KEYS_FILE, load_override_keys

    assert not {"gate", "serve"} & set(config_groups())
    assert GATES_DIR.parent == REPO / "experiments" and GateConfig.load("spark25").name == "spark25"
    assert OVERRIDE_KEYS_FILE.parent == REPO / "experiments" / "serve" and load_override_keys()


def test_memeval_run_help_lists_the_stages_without_a_heavy_import():
    # --help lists the `stage` group, found by importing the stage modules (experiments/configure/nodes.py):
    # a stage module imports its heavy libraries when it works, not when it is scanned.
    code = (
        "import contextlib, io, sys\n"
        "sys.argv = ['memeval-run', '--help']\n"
        "from experiments.run.app import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.suppress(SystemExit):\n"
        "    main()\n"
        "assert 'instruction_boost' in out.getvalue()\n"
        f"print(' '.join(sorted({sorted(HEAVY)!r} & sys.modules.keys())))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == []
