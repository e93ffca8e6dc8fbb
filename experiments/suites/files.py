"""Reading a suite's files safely: only regular files, at most a size cap, never blocking.

Every suite loader reads its files through `read_suite_file` (the canonical JSONL format, BEAM's
chat.json and probing_questions.json). A FIFO named `queries.jsonl` would block `open()` until a writer
came, and a `memories.jsonl` that links to `/dev/zero` would be read until memory ran out: so the file
is opened without blocking, checked with fstat on the open descriptor (no race with a swapped path),
refused unless it is a regular file, and read to at most `limit` bytes. The errors are OSErrors with a
`strerror` that says what is wrong, so a loader's `except OSError` names the file and the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

# One implementation for every input file memeval reads (a live system's cassette too).
from retrieval.regular_file import MAX_FILE_BYTES, FileTooLarge, NotARegularFile, read_regular_file, size_text

__all__ = ["MAX_FILE_BYTES", "FileTooLarge", "NotARegularFile", "read_suite_file", "size_text"]


def read_suite_file(path: str | Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; FileNotFoundError, IsADirectoryError,
    NotARegularFile or FileTooLarge otherwise (each an OSError whose strerror says why)."""
    return read_regular_file(path, limit, what="a suite file")


def reads_folder(loader: Callable[..., Any]) -> Callable[..., Any]:
    """Declares a suite loader whose `path` names a folder (or a list of folders), so the config check
    (experiments/configure/check.py) refuses a file there before any work; one without it reads a file."""
    loader.reads_folder = True  # type: ignore[attr-defined]
    return loader
