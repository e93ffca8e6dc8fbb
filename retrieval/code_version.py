"""What code computed a cached artifact: a hash of the Python sources of the modules involved.

A cache keyed by config alone answers a changed tokenizer with its old results (and lets a CI gate pass
a real regression). Every cache key therefore carries `source_hash(...)` of the package or modules that
computed the entry, and, for model outputs, `library_versions(...)` of the libraries that ran the model.
Both are computed once per process: the code a process runs does not change while it runs.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

# The libraries whose versions change an embedding or a cross-encoder score for the same weights.
MODEL_LIBRARIES = ("sentence-transformers", "transformers", "torch", "tokenizers")


def _sources(name: str) -> list[tuple[str, Path]]:
    """(stable name, file) of every .py file of a package (recursively), or of one module."""
    spec = importlib.util.find_spec(name)
    if spec is None:
        raise ModuleNotFoundError(f"no module named {name!r}: cannot hash its source")
    if spec.submodule_search_locations:
        files = []
        for location in spec.submodule_search_locations:
            root = Path(location)
            files += [(f"{name}/{p.relative_to(root).as_posix()}", p) for p in root.rglob("*.py")]
        return sorted(files)
    if spec.origin is None or not spec.origin.endswith(".py"):
        raise ValueError(f"module {name!r} has no Python source to hash ({spec.origin})")
    return [(name, Path(spec.origin))]


@functools.cache
def source_hash(*names: str) -> str:
    """sha256 (16 hex) of the sources of these packages/modules: file names and contents, in order."""
    digest = hashlib.sha256()
    for name in names:
        for label, path in _sources(name):
            digest.update(label.encode() + b"\0")
            digest.update(path.read_bytes())
            digest.update(b"\0")
    return digest.hexdigest()[:16]


@functools.cache
def library_versions(*distributions: str) -> str:
    """`name=version` of each installed distribution ('absent' when it is not installed)."""

    def one(dist: str) -> str:
        try:
            return version(dist)
        except PackageNotFoundError:
            return "absent"

    return ",".join(f"{d}={one(d)}" for d in distributions)
