"""The answer stage's judges, found by a scan of this package: each module's classes with a `name` are judges.

A judge is constructed with keyword options (`protocol`: official | memeval, `prompt_set`, its own options)
and has `judge(items, chat) -> list[Verdict]` (chat is None for the lexical judge), `columns()` naming its
per-query columns and `notes()` saying what it reproduces. A new judge is a new module here; nothing else to
register.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil


@functools.cache
def _judges() -> dict[str, type]:
    found: dict[str, type] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.ispkg:  # prompt_sets/ holds prompt sets, not judges
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            name = cls.__dict__.get("name")
            if cls.__module__ == module.__name__ and isinstance(name, str):
                if name in found:
                    raise RuntimeError(
                        f"two judges named {name!r}: {found[name].__module__} and {module.__name__}"
                    )
                found[name] = cls
    return found


def judge_names() -> tuple[str, ...]:
    return tuple(sorted(_judges()))


def find_judge(name: str) -> type:
    """The judge class called `name`; KeyError naming the known ones when there is none."""
    judges = _judges()
    if name not in judges:
        raise KeyError(f"answer.judges: unknown judge {name!r} (known: {', '.join(sorted(judges))})")
    return judges[name]
