"""Dataset identity: which bytes a suite was read from, and which known release they are.

A loader hands `dataset_tags` the files it read, each with the path a release names it by
(`100K/1/chat.json`, `locomo10.json`); the answer is the suite tags a run writes to tags.json and MLflow:
- `dataset_sha256`: the sha256 of the one file read, or of the manifest (`<path>\\t<sha256>` lines,
  sorted) when several were;
- `dataset_files`: the per-file sha256s (JSON), when they fit in an MLflow tag;
- `dataset_release`: the known release (experiments/suites/releases.py) every file matches, with how
  much of it was read; `modified <release>` when a file has a release's path but other bytes; else
  `unknown`. Content hashes (Suite.content_hash) say what was scored; this says where it came from.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from experiments.suites.releases import RELEASES

# MLflow refuses tag values over 8,000 characters (BEAM 500K's per-file list comes close).
_MAX_TAG_CHARS = 7000


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def release_name(hashes: Mapping[str, str]) -> str:
    """The known release every file matches (`name`, or `name (n of N files)` for part of it, counting the
    release's files of the kinds read), `modified name: paths` when
    a file has a release's path but other bytes, else `unknown (not a known release)`."""
    for name, files in RELEASES.items():
        modified = sorted(path for path, sha in hashes.items() if path in files and files[path] != sha)
        if modified:
            return f"modified {name}: {', '.join(modified[:5])}{' ...' if len(modified) > 5 else ''}"
    by_sha = {sha: (name, path) for name, files in RELEASES.items() for path, sha in files.items()}
    found = {by_sha.get(sha, (None, None))[0] for sha in hashes.values()}
    if len(found) == 1 and None not in found:
        (name,) = found
        # Out of the release's files of the kinds read (BEAM without topics reads no topic.json).
        kinds = {Path(p).name for p in hashes}
        total = sum(Path(p).name in kinds for p in RELEASES[name])
        return name if len(hashes) == total else f"{name} ({len(hashes)} of {total} files)"
    return "unknown (not a known release)"


def dataset_tags(files: Sequence[tuple[str, str | Path]]) -> dict[str, str]:
    """Suite tags for the files a loader read: (release path, file on disk) pairs."""
    hashes = {name: file_sha256(path) for name, path in files}
    if len(hashes) == 1:
        combined = next(iter(hashes.values()))
    else:
        combined = hashlib.sha256(
            "".join(f"{p}\t{h}\n" for p, h in sorted(hashes.items())).encode()
        ).hexdigest()
    listed = json.dumps(dict(sorted(hashes.items())), separators=(",", ":"))
    return {
        "dataset_release": release_name(hashes),
        "dataset_sha256": combined,
        "dataset_files": listed
        if len(listed) <= _MAX_TAG_CHARS
        else f"{len(hashes)} files (manifest: dataset_sha256)",
    }
