"""The tree reads as the flow: no import circles between the project's modules (every import,
top-level or inside a function, counts), and the runner imports nothing study-specific."""

from __future__ import annotations

import ast

from tests.support import REPO


def _module_imports() -> dict[str, set[str]]:
    files = [p for pkg in ("retrieval", "experiments") for p in (REPO / pkg).rglob("*.py")]
    names = {".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__"): p for p in files}
    edges: dict[str, set[str]] = {name: set() for name in names}
    for name, path in names.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            found = next((t for t in targets if t in names and t != name), None)
            if found:
                edges[name].add(found)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    assert _cycles(_module_imports()) == []


def test_the_cycle_finder_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


def test_the_runner_imports_nothing_study_specific():
    imported = _module_imports()["experiments.run.app"]
    assert not {m for m in imported if "exp05" in m or "spark" in m or m.endswith("_report")}


# The system under test (retrieval/) is layered: its core modules (retrieval/*.py: types, the stage
# protocol, the flow, shared arithmetic) sit under the stage folders, which sit under the harness.
STAGE_FOLDERS = ("retrieval.retrievers", "retrieval.fusions", "retrieval.stages")


def test_generic_report_sections_read_score_columns_not_stages():
    # A question's own sections (experiments/study/questions/) may run the stage they study; the generic
    # ones (plugins/, the report writer, the gate's and MLflow reports) read a run's columns only.
    edges = _module_imports()
    generic = ("experiments.study.sections", "experiments.compare", "experiments.study.report")
    found = {
        m: sorted(t for t in ts if t.startswith((*STAGE_FOLDERS, "experiments.systems")))
        for m, ts in edges.items()
        if m.startswith(generic)
    }
    assert {m: ts for m, ts in found.items() if ts} == {}


def test_the_system_under_test_imports_nothing_from_the_harness():
    edges = _module_imports()
    upward = {m: sorted(t for t in ts if t.startswith("experiments")) for m, ts in edges.items()}
    assert {m: ts for m, ts in upward.items() if m.startswith("retrieval") and ts} == {}


def _sets_live(node: ast.ClassDef) -> bool:
    """`live = True` (or `live: ClassVar[bool] = True`) in the class body: a channel a live system answers."""
    for stmt in node.body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
        named = any(isinstance(t, ast.Name) and t.id == "live" for t in targets)
        value = getattr(stmt, "value", None)
        if named and isinstance(value, ast.Constant) and value.value is True:
            return True
    return False


def test_the_live_adapters_are_on_the_harness_side():
    # An adapter measures another memory system: it is an instrument of the harness, not a part of the
    # system under test. Every class that ingests into a service and waits for it (the MemorySystem
    # protocol), and every `live` channel, is defined under experiments/systems/.
    found = []
    for path in [*(REPO / "retrieval").rglob("*.py"), *(REPO / "experiments").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            methods = {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
            if _sets_live(node) or {"ingest", "wait_until_searchable"} <= methods:
                found.append(f"{path.relative_to(REPO).parent}: {node.name}")
    assert "experiments/systems: SystemRetriever" in found and "experiments/systems: HttpSystem" in found
    assert [where for where in found if not where.startswith("experiments/systems:")] == []


def test_the_system_under_test_does_not_know_hydra():
    # Building a pipeline from Hydra config is the harness's job (experiments/configure/build.py).
    found = [
        f"{path.relative_to(REPO)}: {name}"
        for path in (REPO / "retrieval").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for name in ([a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""])
        if name.split(".")[0] in {"hydra", "omegaconf"}
    ]
    assert found == []


def test_no_core_retrieval_module_imports_from_a_stage_folder():
    edges = _module_imports()
    core = {m for m in edges if m.startswith("retrieval.") and m.count(".") == 1}
    upward = {m: sorted(t for t in edges[m] if t.startswith(STAGE_FOLDERS)) for m in core}
    assert {m: ts for m, ts in upward.items() if ts} == {}


def _targets(node, path: str = "") -> list[tuple[str, str]]:
    if isinstance(node, dict):
        found = [(path, node["_target_"])] if isinstance(node.get("_target_"), str) else []
        return found + [t for k, v in node.items() for t in _targets(v, f"{path}.{k}".lstrip("."))]
    if isinstance(node, list):
        return [t for i, v in enumerate(node) for t in _targets(v, f"{path}[{i}]")]
    return []


def test_every_target_in_the_configs_names_an_object_that_exists():
    import importlib

    import yaml

    missing = []
    for file in sorted((REPO / "conf").rglob("*.yaml")):
        for where, target in _targets(yaml.safe_load(file.read_text())):
            # ???: a class the command line names (system=python: the user's own adapter)
            if target.startswith("hydra.") or "${" in target or target == "???":
                continue
            module, _, attr = target.rpartition(".")
            try:
                getattr(importlib.import_module(module), attr)
            except (ImportError, AttributeError) as err:
                missing.append(f"{file.relative_to(REPO)}: {where}: {target} ({err})")
    assert missing == []


def test_the_base_run_config_runs_nothing_study_specific():
    # A study section (experiments.study...) runs only when a plan or a variant names it, never in the
    # config every run composes.
    import yaml

    targets = _targets(yaml.safe_load((REPO / "conf" / "config.yaml").read_text()))
    assert [t for t in targets if t[1].startswith("experiments.study")] == []


def test_the_system_under_test_names_no_study_plan():
    # Plan ids belong to the experiments that use them (conf/, experiments/study/), not to the stages.
    import re

    plan_ids = re.compile(r"EXP-\d+|exp05|spark25|spark_phase", re.IGNORECASE)
    found = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for path in (REPO / "retrieval").rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if plan_ids.search(line)
    ]
    assert found == []


# Hydra imports every module under hydra_plugins/ in every Hydra app of the environment (its plugin
# discovery), so a module there is a launcher or sweeper and nothing else: it configures nothing, registers
# nothing and imports nothing of memeval when imported. Set-up is one explicit call:
# experiments/configure/setup.py.
PLUGIN_BASES = {"ConfigSource", "SearchPathPlugin", "ConfigStore"}


def test_no_hydra_plugin_registers_configs_or_imports_memeval_at_import():
    plugins = REPO / "hydra_plugins"
    assert sorted(p.name for p in plugins.iterdir() if p.is_dir() and p.name != "__pycache__") == [
        "memeval_launcher"
    ]
    found = []
    for path in plugins.rglob("*.py"):
        tree, where = ast.parse(path.read_text()), path.relative_to(REPO)
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        found += [f"{where}: uses {name}" for name in sorted(names & PLUGIN_BASES)]
        for node in tree.body:  # what runs at import: the module's own statements
            found += [f"{where}: imports {m}" for m in _imported(node) if m.split(".")[0] in MEMEVAL]
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                found.append(f"{where}:{node.lineno}: a call at import")
    assert found == []


MEMEVAL = {"experiments", "retrieval"}


def _imported(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    return [node.module or ""] if isinstance(node, ast.ImportFrom) else []


ANOTHER_APP = """
import json, os, sys
import hydra

@hydra.main(version_base="1.3", config_path=None, config_name=None)
def main(cfg) -> None:
    print(json.dumps({
        "memeval": sorted(m for m in sys.modules if m.split(".")[0] in {"experiments", "retrieval"}),
        "plugins": sorted(m for m in sys.modules if m.startswith("hydra_plugins.")),
        "telemetry": os.environ.get("MLFLOW_DISABLE_TELEMETRY"),
    }))

main()
"""


def test_another_projects_hydra_app_in_this_environment_does_not_import_memeval(tmp_path):
    import json
    import os
    import subprocess
    import sys

    (tmp_path / "app.py").write_text(ANOTHER_APP)
    env = {k: v for k, v in os.environ.items() if k not in {"MLFLOW_DISABLE_TELEMETRY", "DO_NOT_TRACK"}}
    env["HYDRA_FULL_ERROR"] = "1"
    done = subprocess.run(
        [sys.executable, "app.py", "hydra.run.dir=out", "hydra.output_subdir=null"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    # Hydra's plugin discovery ran (it imported memeval's launcher), and pulled in nothing else of memeval.
    assert "hydra_plugins.memeval_launcher.memeval_launcher" in seen["plugins"]
    assert seen["memeval"] == [] and seen["telemetry"] is None


def _imports_from(importers: tuple[str, ...], targets: tuple[str, ...]) -> dict[str, list[str]]:
    """{module under `importers`: the modules under `targets` it imports}, only where there are some."""

    def under(name: str, packages: tuple[str, ...]) -> bool:
        return any(name == p or name.startswith(p + ".") for p in packages)

    found = {m: sorted(t for t in ts if under(t, targets)) for m, ts in _module_imports().items()}
    return {m: ts for m, ts in found.items() if ts and under(m, importers)}


def test_track_and_the_run_folder_format_sit_below_the_runner():
    # experiments/track/ reads finished runs through the run folder's format (experiments/run_folder/),
    # which imports neither the runner that writes it nor the tracker that reads it.
    assert _imports_from(("experiments.track",), ("experiments.run",)) == {}
    assert _imports_from(("experiments.run_folder",), ("experiments.run", "experiments.track")) == {}


def test_the_rule_finder_sees_an_import_from_above():
    assert _imports_from(("experiments.run",), ("experiments.track",))  # the runner logs to MLflow


def test_the_run_serve_and_track_import_no_private_name_of_another_module():
    # memeval-serve answers through Pipeline.answer, and memeval-run's parts meet through public names:
    # a `_name` imported across modules is a second copy of a flow waiting to drift.
    found = [
        f"{path.relative_to(REPO)}: from {node.module} import {alias.name}"
        for folder in ("experiments/run", "experiments/serve", "experiments/track", "experiments/run_folder")
        for path in (REPO / folder).rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("experiments", "retrieval"))
        for alias in node.names
        if alias.name.startswith("_")
    ]
    assert found == []
