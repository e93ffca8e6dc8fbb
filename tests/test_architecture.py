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
