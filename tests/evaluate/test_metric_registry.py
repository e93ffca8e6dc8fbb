"""A metric is one file of experiments/evaluate/metrics/ declaring `METRICS`: the package's scan finds
exactly the names the files declare, and the names a run accepts (and the error that lists them) are
derived from it, so no list can forget one."""

from __future__ import annotations

import ast

import pytest

from experiments.evaluate.metrics import families, known_names, parse_metric
from tests.support import REPO

FOLDER = REPO / "experiments" / "evaluate" / "metrics"


def _declared_on_disk() -> dict[str, str]:
    """Each name a module's `METRICS` declares, with its module, read from the source."""
    found = {}
    for path in sorted(FOLDER.glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["METRICS"]:
                value = node.value
                if isinstance(value, ast.Dict):
                    names = [k.value for k in value.keys]
                else:  # {name: ... for name in (...)}
                    names = [e.value for e in value.generators[0].iter.elts]
                found.update({name: path.stem for name in names})
    return found


def test_the_scan_finds_the_metrics_the_files_declare():
    on_disk = _declared_on_disk()
    assert len(on_disk) >= 15 and {"P", "R", "nDCG", "RR", "AP", "harm"} <= set(on_disk)
    scanned = {name: family.kernel.__module__.rsplit(".", 1)[1] for name, family in families().items()}
    assert scanned == on_disk


@pytest.mark.parametrize("name", sorted(_declared_on_disk()))
def test_every_declared_metric_is_accepted_and_listed(name):
    family = families()[name]
    given = f"{name}@5" if family.needs_cutoff else name
    assert parse_metric(given).family == name
    listed = known_names().split(" (k a positive integer)")[0].split(", ")
    assert (f"{name}@k" in listed) and ((name in listed) != family.needs_cutoff)
    if family.needs_cutoff:
        with pytest.raises(ValueError, match=f"unknown metric name '{name}'"):
            parse_metric(name)
