"""The layers written in docs/architecture.md ("## Layers") hold in the import graph: no import from a lower
layer to a higher one, no circle, `track/` reaches `run/` by no path, and the configuration layer alone
(with the app that hands it the composed config) speaks OmegaConf."""

from __future__ import annotations

import re

from tests.project.test_architecture import _cycles, _module_imports
from tests.support import REPO

DOC = REPO / "docs" / "architecture.md"


def documented_layers() -> list[list[str]]:
    """The doc's layers, highest first, each a list of package or module names under experiments/
    (`retrieval` and `experiments` name those packages' own modules)."""
    block = DOC.read_text().split("<!-- layers: highest first -->", 1)[1].split("<!-- end layers -->", 1)[0]
    return [re.findall(r"`(\w+)`", line.split(":", 1)[0]) for line in block.strip().splitlines()]


def layer_of(module: str, layers: list[list[str]]) -> int | None:
    parts = module.split(".")
    name = "retrieval" if parts[0] == "retrieval" else parts[1] if len(parts) > 1 else "experiments"
    return next((i for i, names in enumerate(layers) if name in names), None)


def upward_imports(edges: dict[str, set[str]], layers: list[list[str]]) -> list[str]:
    """`a -> b` for each import from a lower layer (a larger index) to a higher one."""
    return sorted(
        f"{a} -> {b}"
        for a, targets in edges.items()
        for b in targets
        if layer_of(a, layers) is not None
        and layer_of(b, layers) is not None
        and layer_of(b, layers) < layer_of(a, layers)
    )


def test_every_module_has_a_layer_in_the_doc():
    layers = documented_layers()
    assert len(layers) >= 5 and layers[-1] == ["retrieval"]
    assert [m for m in _module_imports() if layer_of(m, layers) is None] == []


def test_no_import_runs_from_a_lower_layer_to_a_higher_one():
    assert upward_imports(_module_imports(), documented_layers()) == []


def test_the_layer_check_finds_an_import_that_runs_back_up():
    layers = [["run"], ["configure"], ["retrieval"]]
    edges = {"experiments.configure.build": {"experiments.run.app"}, "experiments.run.app": set()}
    assert upward_imports(edges, layers) == ["experiments.configure.build -> experiments.run.app"]


def test_no_import_circle_between_the_layers_modules():
    assert _cycles(_module_imports()) == []


def _reached(edges: dict[str, set[str]], start: set[str]) -> set[str]:
    seen, todo = set(start), list(start)
    while todo:
        for target in edges.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_tracking_reaches_the_runner_by_no_path():
    edges = _module_imports()
    tracking = {m for m in edges if m.startswith("experiments.track")}
    reached = _reached(edges, tracking)
    assert sorted(m for m in reached if m == "experiments.run" or m.startswith("experiments.run.")) == []
