"""What produced a cached value, written down once: the rule every cache key in memeval follows.

A cache keyed by config alone answers a changed tokenizer, a changed `max_seq_length` or a new
sentence-transformers with its old results (and lets a CI gate pass a real regression). So a key is a
hash of everything that produced the value:

- the code: `source_hash(...)` of the packages or modules that computed it;
- the libraries: `library_versions(...)` of the distributions that computed it;
- the model: `model_hash(path)`, the content of every file of a local model folder that loading can
  read (configs, tokenizer files, `modules.json`, pooling, `sentence_bert_config.json`, weights), or
  the revision of a hub model;
- the backend that ran the model and where it ran (`compute`: effective device, pinned precision, the
  CPU's ISA class or the GPU's name; retrieval/compute.py), and the inputs the cache names (role, prompt,
  suite hash ...).

`KEY_RULES` lists, per cache, what its key covers; `KeyRule.key(**parts)` is the only way a cache makes
its key, and refuses parts other than the ones its rule names, so the rule, the code and
docs/caching.md (its table is `key_table()`, checked by tests/retrieval/test_cache_keys.py) cannot drift
apart.
Source hashes and library versions are computed once per process; a model folder is hashed once per
process per (path, size and mtime of its files).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

# The libraries whose versions change an embedding or a cross-encoder score for the same weights.
MODEL_LIBRARIES = ("sentence-transformers", "transformers", "torch", "tokenizers")
# ... and, for a model run by another runtime, that runtime's (retrieval/backends.py).
BACKEND_LIBRARIES: Mapping[str, tuple[str, ...]] = {
    "torch": (),
    "onnx": ("onnxruntime", "onnx", "onnxscript"),
    "onnx-int8": ("onnxruntime", "onnx", "onnxscript"),
    "openvino": ("openvino", "onnx", "onnxscript"),
    "openvino-bf16": ("openvino", "onnx", "onnxscript"),
    "openvino-int8": ("openvino", "nncf", "onnx", "onnxscript"),
}
# Everything the `retrieval` package computes candidates with.
RETRIEVAL_LIBRARIES = (
    "numpy",
    "scipy",
    "scikit-learn",
    "bm25s",
    "rank-bm25",
    *MODEL_LIBRARIES,
    *sorted({lib for libs in BACKEND_LIBRARIES.values() for lib in libs}),
)
# ... and what a run's evaluation adds (metrics, statistics).
RUN_LIBRARIES = (*RETRIEVAL_LIBRARIES, "pandas")

# Subfolders of a model folder that sentence-transformers reads only for its own onnx/openvino backends,
# which memeval never asks for (retrieval/backends.py exports from the torch weights instead).
_UNREAD_MODEL_FOLDERS = frozenset({"onnx", "openvino"})


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


def model_files(folder: str | Path) -> list[Path]:
    """The files of a local model folder that loading it can read: every regular file, in every
    subfolder (pooling and normalisation modules live in `1_Pooling/`...), except hidden ones (`.git`,
    `.cache`) and the onnx/openvino folders sentence-transformers reads only for backends memeval never
    passes to it. A superset of what is read is safe: an unread file changing only costs a miss."""
    root = Path(folder)
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = sorted(
            d for d in dirnames if not d.startswith(".") and not (here == root and d in _UNREAD_MODEL_FOLDERS)
        )
        found += [here / f for f in sorted(filenames) if not f.startswith(".") and (here / f).is_file()]
    return found


def model_hash(path: str) -> str:
    """sha256 (16 hex) of a model: for a local folder, the names and contents of `model_files(path)`;
    for a hub name, its revision (the snapshot it resolves to). Memoised per process by the files'
    paths, sizes and mtimes: an edit to any file (a new `max_seq_length`) is a new hash."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        return _hub_revision(path)
    files = model_files(folder)
    signature = tuple((str(p), st.st_size, st.st_mtime_ns) for p in files for st in [p.stat()])
    return _content_hash(str(folder.resolve()), signature)


@functools.lru_cache(maxsize=64)
def _content_hash(folder: str, signature: tuple[tuple[str, int, int], ...]) -> str:
    digest = hashlib.sha256()
    for name, _, _ in signature:
        digest.update(Path(name).relative_to(folder).as_posix().encode() + b"\0")
        with open(name, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()[:16]


@functools.cache
def _hub_revision(name: str) -> str:
    """A hub model's revision: the local snapshot's content if the hub cache has it, else the commit the
    hub names; a name that resolves to neither keys as itself (it cannot load either)."""
    try:
        from huggingface_hub import snapshot_download

        snapshot = snapshot_download(name, local_files_only=True)
    except Exception:  # not in the local hub cache (or not a hub name)
        snapshot = None
    if snapshot is not None and Path(snapshot).is_dir():
        return model_hash(snapshot)
    if os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE"):
        return f"hub:{name}"
    try:
        from huggingface_hub import HfApi

        return f"hub:{name}@{HfApi().model_info(name).sha}"
    except Exception:
        return f"hub:{name}"


@dataclass(frozen=True)
class KeyRule:
    """What one cache's key covers: the code, the libraries, and the named parts its caller passes."""

    cache: str
    code: tuple[str, ...]  # packages/modules whose source is hashed
    libraries: tuple[str, ...]
    parts: Mapping[str, str]  # part name -> what it is (docs/caching.md prints these)
    where: str  # the folder or file the key names
    backend_dependent: bool = False  # `backend` part adds its runtime's libraries and backends.py

    def key(self, **parts: Any) -> str:
        """sha256 (hex) of the rule's code, libraries and exactly its parts: a missing or extra part is a
        programming error, so no cache can leave out what its rule says it covers."""
        if set(parts) != set(self.parts):
            raise TypeError(
                f"the {self.cache} key takes exactly {sorted(self.parts)}, got {sorted(parts)} "
                "(retrieval/code_version.py KEY_RULES)"
            )
        code, libraries = self.code, self.libraries
        if self.backend_dependent and parts["backend"] != "torch":
            code += ("retrieval.backends",)
            libraries += BACKEND_LIBRARIES[parts["backend"]]
        payload = {
            "cache": self.cache,
            "code": source_hash(*code),
            "libraries": library_versions(*libraries),
            "parts": {k: parts[k] for k in sorted(parts)},
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True, default=repr).encode()).hexdigest()


def _rule(cache: str, where: str, code: Sequence[str], libraries: Sequence[str], **parts: str) -> KeyRule:
    backend_dependent = "backend" in parts
    return KeyRule(cache, tuple(code), tuple(libraries), parts, where, backend_dependent)


_MODEL = (
    "`model_hash` of its folder's files (configs, tokenizer, modules, pooling, max_seq_length, weights) "
    "or its hub revision"
)
_COMPUTE = (
    "where and in what precision the model ran: `<device>:<CPU ISA class (amx, avx512_bf16, avx512, avx2) "
    "or GPU name>/<precision pinned by the backend>` (retrieval/compute.py)"
)
_BACKEND = (
    "the inference backend (a backend other than torch adds its runtime's versions and the source of "
    "retrieval/backends.py)"
)

KEY_RULES: Mapping[str, KeyRule] = {
    r.cache: r
    for r in (
        _rule(
            "embeddings",
            "`<cache_dir>/embeddings/<model>-<key>/*.npz`; per entry sha256 of the text",
            ["retrieval.encoder", "retrieval.compute"],
            MODEL_LIBRARIES,
            model=_MODEL,
            name="the model's name as configured",
            role="query or document",
            prompt="the prompt of that role",
            normalize="normalisation",
            backend=_BACKEND,
            calibration="hash of the calibration texts (openvino-int8; empty otherwise)",
            compute=_COMPUTE,
        ),
        _rule(
            "rerank_scores",
            "`<cache_dir>/rerank_scores/<model>-<key>/*.npz`; per entry sha256 of (query, memory text)",
            ["retrieval.reranker", "retrieval.compute"],
            MODEL_LIBRARIES,
            model=_MODEL,
            name="the model's name as configured",
            max_length="truncation length",
            backend=_BACKEND,
            compute=_COMPUTE,
        ),
        _rule(
            "candidates",
            "`<cache_dir>/candidates/<key>.npz` (plain arrays, no pickle)",
            ["retrieval"],
            RETRIEVAL_LIBRARIES,
            suite="the suite's content hash (a scope's own entry, `scope-<key>.npz`: sha256 of that "
            "scope's memories as ingested, its queries and the suite's concept graphs, "
            "`retrieval.reuse.scope_digests`)",
            queries="sha256 of the query ids, in order (a scope's entry: of none; its queries are in its "
            "digest)",
            stages="fingerprint (class + config) of every ingest, retriever and fusion stage; a component "
            "with a model (encoder, cross-encoder) contributes its fingerprint, which has its `model_hash`, "
            "backend and compute identity (device, precision, CPU ISA class or GPU name, as above)",
        ),
        _rule(
            "finished_runs",
            "`<cache_dir>/finished/<config hash>-<suite hash>-<run version>.json`; MLflow tags "
            "`memeval.config_hash`, `suite_hash`, `memeval.code_version`",
            ["retrieval", "experiments"],
            RUN_LIBRARIES,
            stages="fingerprint of every stage of the pipeline (models included, as above) and its depth",
        ),
        _rule(
            "exports",
            "`<export_dir>/<model>-<key>-<kind>/` (ONNX, OpenVINO IR); each checked against fp32 when loaded",
            ["retrieval.backends"],
            ("torch", "transformers", *sorted({lib for libs in BACKEND_LIBRARIES.values() for lib in libs})),
            model=_MODEL,
            kind="bi-encoder or cross-encoder",
        ),
    )
}


def key_table() -> str:
    """The Markdown table of KEY_RULES that docs/caching.md holds (tests/retrieval/test_cache_keys.py
    checks it)."""
    lines = ["| cache | where | key covers |", "|---|---|---|"]
    for rule in KEY_RULES.values():
        covers = [f"source of `{', '.join(rule.code)}`"] if rule.code else []
        covers += [f"versions of {', '.join(rule.libraries)}"] if rule.libraries else []
        covers += [f"{name}: {what}" for name, what in rule.parts.items()]
        lines.append(f"| {rule.cache} | {rule.where} | {'; '.join(covers)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(key_table())
