"""A conformance check: one behaviour of a memory service, asked on small generated data, with evidence.

A check is a class in one of the group modules of this package (the module's name is its group), found by
a scan (`check_classes`), named by its class: `IsolationLookAlikeValues` in isolation.py is the check
`isolation.look_alike_values`. Its docstring's first line is what it asks (conformance.json's `asks`).
`run(probe)` returns an `Outcome`: pass, fail (the reason and the evidence that shows it), or
not-applicable (the service cannot express what it asks: no reset, no count, no scores), never a pass.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

if TYPE_CHECKING:
    from experiments.conform.probe import Probe

Status = Literal["pass", "fail", "not_applicable"]
GROUPS = ("isolation", "lifecycle", "content", "ranking", "supersession", "failure")  # the report's order


@dataclass
class Outcome:
    status: Status
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)  # what was measured (timings under `timings`)


def passed(reason: str = "", **details: Any) -> Outcome:
    return Outcome("pass", reason, details)


def failed(reason: str, **details: Any) -> Outcome:
    return Outcome("fail", reason, details)


def not_applicable(reason: str) -> Outcome:
    return Outcome("not_applicable", reason)


class Check:
    """One behaviour. Subclasses state their docstring (what it asks) and `run`."""

    group: ClassVar[str] = ""  # the module's name, set by the scan
    id: ClassVar[str] = ""

    def run(self, probe: Probe) -> Outcome:
        raise NotImplementedError

    @classmethod
    def asks(cls) -> str:
        return (cls.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


@functools.cache
def check_classes() -> tuple[type[Check], ...]:
    """Every check of the group modules, in group order then definition order; the id is
    `<group>.<the class name after its group, snake_case>` (two of one id are an error)."""
    package = importlib.import_module(__package__ or "experiments.conform")
    missing = set(GROUPS) - {info.name for info in pkgutil.iter_modules(package.__path__)}
    if missing:
        raise TypeError(f"conformance groups without a module: {sorted(missing)}")
    found: dict[str, type[Check]] = {}
    for group in GROUPS:
        module = importlib.import_module(f"{package.__name__}.{group}")
        for cls in vars(module).values():
            if (
                isinstance(cls, type)
                and issubclass(cls, Check)
                and cls.__module__ == module.__name__
                and not cls.__name__.startswith("_")  # a group's shared base, not a check
            ):
                name = _snake(cls.__name__)
                if not name.startswith(f"{group}_"):
                    raise TypeError(
                        f"{cls.__qualname__} in {group}.py: a check's class name starts with its group"
                    )
                cls.group, cls.id = group, f"{group}.{name[len(group) + 1 :]}"
                if cls.id in found:
                    raise TypeError(f"two conformance checks are named {cls.id}: {found[cls.id]}, {cls}")
                found[cls.id] = cls
    return tuple(found.values())
