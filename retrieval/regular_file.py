"""Reading an input file safely: only regular files, at most a size cap, never blocking.

A suite's files (experiments/suites/files.py) and a live system's cassette (experiments/systems/cassette.py)
are read through `read_regular_file`. A FIFO named `queries.jsonl` would block `open()` until a writer
came, and a file that links to `/dev/zero` would be read until memory ran out: so the file is opened
without blocking, checked with fstat on the open descriptor (no race with a swapped path), refused unless
it is a regular file, and read to at most `limit` bytes. The errors are OSErrors with a `strerror` that
says what is wrong, so a caller's `except OSError` names the file and the reason.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

MAX_FILE_BYTES = 1 << 30  # 1 GiB: BEAM's largest chat.json (10M tokens) is well under it


class NotARegularFile(OSError):
    """A FIFO, socket or device where a regular file belongs."""


class FileTooLarge(OSError):
    """A file over the size cap."""


def size_text(size: int) -> str:
    """A byte count as people say it: 64 KiB, 1 GiB."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size} bytes"


def kind_of(mode: int) -> str:
    """What a file that is not a regular file is, in words."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_regular(fd: int, path: str | Path) -> None:
    """IsADirectoryError or NotARegularFile unless the open descriptor `fd` is a regular file."""
    mode = os.fstat(fd).st_mode
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory, not a file", str(path))
    if not stat.S_ISREG(mode):
        raise NotARegularFile(errno.EINVAL, f"is {kind_of(mode)}: only regular files are read", str(path))


def read_regular_file(path: str | Path, limit: int = MAX_FILE_BYTES, what: str = "a suite file") -> bytes:
    """The bytes of a regular file of at most `limit` bytes; FileNotFoundError, IsADirectoryError,
    NotARegularFile or FileTooLarge otherwise (each an OSError whose strerror says why). `what` names the
    file's role in the size error ("larger than 1 GiB, a suite file's limit")."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens at once instead of waiting for a writer
    try:
        check_regular(fd, path)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            # Never more than the cap, whatever the file claims its size is; but asked for in the size it
            # claims (+1 byte to see more): `read(limit + 1)` allocates the whole 1 GiB for every file.
            claimed = min(os.fstat(fd).st_size, limit)
            data = fh.read(claimed + 1)
            while claimed < len(data) <= limit and (more := fh.read(min(1 << 20, limit + 1 - len(data)))):
                data += more  # a file longer than fstat said (it grew): on to the cap, never past it
    finally:
        os.close(fd)
    if len(data) > limit:
        raise FileTooLarge(errno.EFBIG, f"larger than {size_text(limit)}, {what}'s limit", str(path))
    return data
