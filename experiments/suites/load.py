"""The suite a run config's `suite` node names (a loader `_target_` and its arguments, resolved), built once
per process when asked to (`memoise`): the one place a run, a benchmark or a report gets its suite from.

    suite = load_suite(settings.suite, memoise=True)  # from a composed config: configure/settings.py
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate

from experiments.suites.suite import Suite, SuiteError
from retrieval.reuse import process_memo

# Keys of a suite config node that say how reports show the suite, not how to load it.
SUITE_REPORT_KEYS = ("report_label", "primary")


def files_signature(path: object) -> tuple:
    """(name, size, mtime) of every file under a suite path, so a memoised suite is never stale. Walked
    with os.scandir, not Path.rglob (each job of a sweep walks it, and rglob makes a Path per entry); like
    rglob, it does not descend into symlinked folders."""
    root = str(path)
    if os.path.isfile(root):
        found = os.stat(root)
        return ((root, found.st_size, found.st_mtime_ns),)
    files: list[tuple[str, int, int]] = []
    folders = [root] if os.path.isdir(root) else []
    while folders:
        with os.scandir(folders.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    folders.append(entry.path)
                elif entry.is_file():
                    found = entry.stat()
                    files.append((entry.path, found.st_size, found.st_mtime_ns))
    return tuple(sorted(files))


def load_suite(suite: Mapping[str, Any], *, memoise: bool = False) -> Suite:
    """The suite a `suite` node names; `memoise` reuses the one this process loaded (same node and files)."""
    # `report_label` and `primary` are for tables and reports, not the loader.
    loader = {k: v for k, v in suite.items() if k not in SUITE_REPORT_KEYS}
    if memoise:
        key = (
            json.dumps(loader, sort_keys=True, default=repr),
            os.getcwd(),
            files_signature(suite.get("path", "")),
        )
        return process_memo().get_or_make("suite", key, lambda: load_suite(suite))
    try:
        built = instantiate(loader, _convert_="all")
    except InstantiationException as err:  # Hydra wraps the loader's own error: surface it
        if isinstance(err.__cause__, SuiteError):
            raise err.__cause__ from None
        raise
    if not isinstance(built, Suite):
        raise TypeError(f"suite config must build a Suite, got {type(built).__name__}")
    return built
