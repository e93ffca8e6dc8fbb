"""What a run may reuse instead of recomputing: the retrieval-prefix candidates on disk (CandidateCache)
and, within one process (a multirun's jobs), corpora, indexes, candidates, rank levels and built stages
(ProcessMemo). retrieval.pipeline.Pipeline.run consults them; the keys (suite hash, the `retrieval`
source hash and stage fingerprints) are made there, so a code or config change never reads an old entry.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retrieval import cache_io


@dataclass(frozen=True)
class CandidateCache:
    """On-disk store of retrieval-prefix candidates, one checksummed pickle per prefix fingerprint.

    A torn or corrupt entry is reported, deleted and recomputed; an unwritable folder means no caching.
    """

    folder: str | Path

    def _path(self, key: str) -> Path:
        return Path(self.folder) / f"{key}.pkl"

    def load(self, key: str) -> dict | None:
        return cache_io.load_pickle(self._path(key))

    def save(self, key: str, value: dict) -> bool:
        return cache_io.save_pickle(self._path(key), value)


@dataclass(frozen=True)
class ProcessMemo:
    """What one process reuses between runs (the jobs of a multirun): ingested corpora, built indexes
    and retrieval-prefix candidates, keyed by suite hash + fingerprints; a few entries per kind (LRU).
    """

    max_entries: int = 4
    _kinds: dict = field(default_factory=dict, repr=False)

    def get(self, kind: str, key: Any) -> Any | None:
        entries = self._kinds.setdefault(kind, OrderedDict())
        if key not in entries:
            return None
        entries.move_to_end(key)
        return entries[key]

    def put(self, kind: str, key: Any, value: Any) -> Any:
        entries = self._kinds.setdefault(kind, OrderedDict())
        entries[key] = value
        while len(entries) > self.max_entries:
            entries.popitem(last=False)
        return value

    def get_or_make(self, kind: str, key: Any, make: Callable[[], Any]) -> Any:
        value = self.get(kind, key)
        return self.put(kind, key, make()) if value is None else value
