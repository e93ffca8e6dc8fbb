"""Report sections a study plan names (`sections: [exp05_acceptance]`): small plug-ins, one function each.

A section is a function `SectionContext -> list[Block]` (experiments.compare.render blocks), added
to the comparison report after the generic tables. The study runner knows none of them: it looks a
name up here. Register one with `@register_section("name")`, or name any importable function in the
plan as `package.module:function`. The built-in ones are the modules of this package (generic: any
plan can name them) and of experiments/study/questions/ (one study's own question); every module of
both is imported, so a new generic section is a new file here.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from experiments.compare.analysis import Comparison
from experiments.compare.render import Block

# The packages whose modules register sections on import: found by a scan, by name, as stages are
# (experiments/configure/nodes.py), so this package imports none of them (questions/ imports this one).
SECTION_PACKAGES = ("experiments.study.sections", "experiments.study.questions")


@dataclass(frozen=True)
class SectionContext:
    """What a section sees: the report's comparison, its significance table and the plan's settings."""

    comparison: Comparison
    significance: pd.DataFrame  # one row per (metric, run): mean, delta, CI, p_value, p_holm, significant
    primary: str
    alpha: float
    seed: int
    options: Mapping[str, Any] = field(default_factory=dict)  # the plan's options for this section
    study: Any = None  # the StudyResult (plan, rows, run dirs) when the report is a study's, else None


SectionFunction = Callable[[SectionContext], list[Block]]
_REGISTRY: dict[str, SectionFunction] = {}


def register_section(name: str) -> Callable[[SectionFunction], SectionFunction]:
    def add(function: SectionFunction) -> SectionFunction:
        _REGISTRY[name] = function
        return function

    return add


def available_sections() -> list[str]:
    for package in map(importlib.import_module, SECTION_PACKAGES):
        for module in pkgutil.iter_modules(package.__path__):  # each registers its sections on import
            importlib.import_module(f"{package.__name__}.{module.name}")
    return sorted(_REGISTRY)


def resolve_section(name: str) -> SectionFunction:
    """A registered section, or `module:function`; KeyError naming what exists when neither."""
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            function = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as err:
            raise KeyError(f"cannot import report section {name!r}: {err}") from None
        if not callable(function):
            raise KeyError(f"report section {name!r} is not a function")
        return function
    known = available_sections()
    if name not in _REGISTRY:
        raise KeyError(f"no report section named {name!r}; registered: {known} (or give module:function)")
    return _REGISTRY[name]
