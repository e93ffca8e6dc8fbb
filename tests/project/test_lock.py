"""The committed lock (requirements.lock, what CI installs) agrees with pyproject.toml's ranges.

A dependency added to pyproject.toml but not locked, or a lock pin outside the range pyproject.toml
allows, fails here: the lock is regenerated with `make lock` (docs/dependencies.md)."""

from __future__ import annotations

import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.support import REPO

LLM_SERVER_LOCK = "requirements-llm-server.lock"


def locked_versions(text: str) -> dict[str, Version]:
    pins = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        assert sep, f"requirements.lock:{number}: not a `name==version` pin: {line!r}"
        pins[canonicalize_name(name)] = Version(version)
    return pins


def stale_problems(pyproject: dict, lock_text: str) -> list[str]:
    """Each of pyproject's requirements (dependencies and every extra) missing from the lock or pinned
    outside its range."""
    pins = locked_versions(lock_text)
    project = pyproject["project"]
    wanted = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        wanted += extra
    problems = []
    for text in wanted:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate():
            continue
        pin = pins.get(canonicalize_name(req.name))
        if pin is None:
            problems.append(f"{req.name}: in pyproject.toml but not in requirements.lock")
        elif not req.specifier.contains(pin, prereleases=True):
            problems.append(f"{req.name}: locked {pin} is outside pyproject.toml's {req.specifier}")
    return problems


def test_the_lock_covers_every_requirement_of_pyproject_within_its_range():
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))
    # the llm-server extra is locked apart (requirements-llm-server.lock): `make run` never compiles it
    locks = "\n".join((REPO / name).read_text("utf-8") for name in ("requirements.lock", LLM_SERVER_LOCK))
    assert stale_problems(pyproject, locks) == []


def test_a_stale_lock_is_reported():
    pyproject = {
        "project": {
            "dependencies": ["numpy>=2", "newlib>=1"],
            "optional-dependencies": {"dev": ["pytest>=8"]},
        }
    }
    lock = "# header\nnumpy==1.26.4\npytest==8.1.0\n"
    assert stale_problems(pyproject, lock) == [
        "numpy: locked 1.26.4 is outside pyproject.toml's >=2",
        "newlib: in pyproject.toml but not in requirements.lock",
    ]
