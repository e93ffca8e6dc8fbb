"""Cache files written atomically with a checksum and read back only when they verify.

Shared by every on-disk cache (retrieval-prefix candidates, embedding shards, rerank-score shards, the
finished-run index). Payloads are plain arrays (`.npz` read with `allow_pickle=False`) or JSON, never a
pickle: a cache folder is shared between users and CI jobs, and anyone who can write a file there can
also compute its checksum, so a format that can run code would be code execution. A file is `MAGIC +
sha256(payload) + payload`, written to a temporary name and
renamed into place, so a reader never sees half a file. Reading:
- a missing file is a miss;
- a torn, truncated or altered file (bad header, checksum mismatch, payload that does not decode) is
  reported with one `CacheWarning` naming the file, deleted, and treated as a miss (the caller
  recomputes it): a corrupt entry is never trusted and never crashes a later run;
- an unwritable cache (read-only folder, a file where a folder should be) degrades to no caching there,
  with one warning per folder per process; the run itself goes on and writes its results.

`COUNTS` counts hits and misses per cache kind in this process; a run reports the difference.
"""

from __future__ import annotations

import hashlib
import io
import os
import uuid
import warnings
from collections import Counter
from pathlib import Path

import numpy as np

MAGIC = b"memeval-cache-v1\n"
_HEADER = len(MAGIC) + 32

COUNTS: Counter = Counter()  # e.g. COUNTS["embeddings.hits"]; process-wide, read as deltas
_warned: set[str] = set()


class CacheWarning(UserWarning):
    """A cache entry was corrupt (and recomputed), or a cache folder cannot be written."""


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, CacheWarning, stacklevel=3)


def write_verified(path: str | Path, payload: bytes) -> bool:
    """Write `payload` with its checksum atomically; False (and one warning) if the cache is unwritable."""
    path = Path(path)
    tmp = path.with_name(f".{uuid.uuid4().hex}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("wb") as fh:
            fh.write(MAGIC + hashlib.sha256(payload).digest() + payload)
        os.replace(tmp, path)  # atomic: parallel sweep jobs never read half a file
        return True
    except OSError as err:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        _warn_once(
            f"unwritable:{path.parent}",
            f"cache folder {path.parent} cannot be written ({err.__class__.__name__}: {err}); "
            "going on without caching there",
        )
        return False


def discard(path: str | Path, why: str) -> None:
    """Report a corrupt entry once (it is deleted, so the next run does not see it again) and delete it."""
    warnings.warn(f"corrupt cache entry {path} ({why}): deleted, recomputing", CacheWarning, stacklevel=3)
    try:
        Path(path).unlink(missing_ok=True)
    except OSError:
        pass


def read_verified(path: str | Path) -> bytes | None:
    """The payload of a verified entry; None when it is missing, unreadable or corrupt (then deleted)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    except OSError as err:
        _warn_once(f"unreadable:{path}", f"cache entry {path} cannot be read ({err}); recomputing")
        return None
    payload = data[_HEADER:]
    if not data.startswith(MAGIC) or len(data) < _HEADER:
        discard(path, "torn, or not a checksummed memeval cache file")
        return None
    if hashlib.sha256(payload).digest() != data[len(MAGIC) : _HEADER]:
        discard(path, "checksum mismatch: torn or altered")
        return None
    return payload


def save_arrays(path: str | Path, **arrays: np.ndarray) -> bool:
    """Plain arrays as a checksummed `.npz`; an object array (which only pickle could store) is refused."""
    buffer = io.BytesIO()
    np.savez(buffer, allow_pickle=False, **arrays)  # ValueError for an object array: never pickled
    return write_verified(path, buffer.getvalue())


def load_arrays(path: str | Path, names: tuple[str, ...] | None = None) -> dict[str, np.ndarray] | None:
    """The named arrays (all, for None) of a verified `.npz` entry; None when missing or corrupt (then
    deleted). Read with `allow_pickle=False`: a planted entry holding a pickle is corrupt, never run."""
    payload = read_verified(path)
    if payload is None:
        return None
    try:
        with np.load(io.BytesIO(payload), allow_pickle=False) as data:
            return {name: data[name] for name in (data.files if names is None else names)}
    except Exception as err:
        discard(
            path, f"not a readable .npz of plain arrays{' with ' + ', '.join(names) if names else ''}: {err}"
        )
        return None
