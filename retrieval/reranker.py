"""Cross-encoder relevance scores with an on-disk cache, for the cross-encoder rerank stage.

A cross-encoder reads (query, memory) together and returns one relevance logit per pair. It is the
costly part of a rerank, so scores are cached by (model fingerprint, query text, memory text): a
sweep over the stage's mode or weight re-scores nothing. Entries live in append-only, checksummed
`.npz` shards (retrieval/cache_io.py) under one folder per key (KEY_RULES["rerank_scores"] in
retrieval/code_version.py: name, the model's content hash over all its files, max_length, backend, the
compute identity (device, pinned precision, CPU ISA class or GPU name: retrieval/compute.py), the versions
of the libraries that run the model and this module's own source, as in `encoder.py`), so
parallel sweep workers never write the same file and a code, library or model change never reads old
scores. A torn or corrupt shard is dropped with a warning and its pairs are scored again.

The model is loaded lazily, once per process. No trained cross-encoder ships on PyPI, so the
default is a local directory written by `memeval-train-reranker`; users with hub access may name
any published cross-encoder. A model that cannot be found is a clear error, never a fallback.
"""

from __future__ import annotations

import functools
import hashlib
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from retrieval import cache_io
from retrieval.backends import accelerate, check_backend, export_folder
from retrieval.code_version import KEY_RULES, model_hash
from retrieval.compute import (
    DeviceUnavailableError,
    compute_identity,
    device_problem,
    fp32_matmuls,
    resolve_device,
)
from retrieval.encoder import EXPORT_DIR, ModelNotFoundError, require_local_or_online
from retrieval.stage import FieldError

TRAINED_DEFAULT = "./models/cross-encoder-beam500k"


def _how_to_provide(model: str) -> str:
    return (
        f"cross-encoder model {model!r} not found. Train one here with `memeval-train-reranker` "
        f"(python -m experiments.training.reranker; it writes {TRAINED_DEFAULT}), point "
        "stage.cross_encoder.scorer.model at a local directory holding a CrossEncoder, or, where the "
        "Hugging Face hub is reachable, name a published one (e.g. cross-encoder/ms-marco-MiniLM-L-6-v2)"
    )


def _looks_local(model: str) -> bool:
    return model.startswith((".", "/", "~")) or model.count("/") > 1 or os.sep != "/" and os.sep in model


def resolve_cross_encoder_path(model: str) -> str:
    """A local directory as given; a path-like name that does not exist is an error at once."""
    folder = Path(model).expanduser()
    if folder.is_dir():
        return str(folder.resolve())
    if _looks_local(model):
        raise ModelNotFoundError(_how_to_provide(model))
    return model  # a hub name


def load_cross_encoder(
    path: str,
    max_length: int,
    device: str = "auto",
    backend: str = "torch",
    export_dir: str = EXPORT_DIR,
    threads: int | None = None,
):
    """The model at `path`, loaded once per process per content: an edited folder is loaded again."""
    device = resolve_device(device, backend)
    return _load_cross_encoder(path, model_hash(path), max_length, device, backend, export_dir, threads)


@functools.lru_cache(maxsize=4)
def _load_cross_encoder(
    path: str,
    revision: str,
    max_length: int,
    device: str,
    backend: str,
    export_dir: str,
    threads: int | None,
):
    check_backend(backend)  # a missing runtime package fails before the model loads
    model = _load_torch_cross_encoder(path, max_length, device)
    if backend != "torch":
        folder = export_folder(export_dir, path, revision, "cross-encoder")
        accelerate(model[0], backend=backend, folder=folder, task="sequence-classification", threads=threads)
    return model


def _load_torch_cross_encoder(path: str, max_length: int, device: str):
    import torch
    from sentence_transformers import CrossEncoder

    # fp32 weights whatever the checkpoint was saved in (transformers 5 loads its config's dtype)
    kwargs = {
        "num_labels": 1,
        "max_length": max_length,
        "device": device,
        "model_kwargs": {"dtype": torch.float32},
    }
    if Path(path).is_dir():
        return CrossEncoder(path, **kwargs)
    try:  # a hub name: the local HF cache first, so an offline machine fails fast
        return CrossEncoder(path, local_files_only=True, **kwargs)
    except OSError as err:
        if os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE"):
            raise ModelNotFoundError(_how_to_provide(path)) from err
    try:
        return CrossEncoder(path, **kwargs)
    except OSError as err:
        raise ModelNotFoundError(_how_to_provide(path)) from err


@dataclass(frozen=True, kw_only=True)
class CrossEncoderScorer:
    """Relevance logits for (query, memory) pairs from a sentence-transformers CrossEncoder, cached."""

    model: str = TRAINED_DEFAULT
    max_length: int = 64
    batch_size: int = 32
    cache_dir: str | None = ".memeval_cache/rerank_scores"
    # auto | cpu | cuda: auto is cuda when torch sees a GPU (torch backend only). The effective device is
    # part of the fingerprint and the score cache's key.
    device: str = "auto"
    # Runtime threads while scoring (None = the runtime's default). One costs the least CPU a query, and
    # on a shared, oversubscribed CPU more threads only wait on each other (reports/benchmarks/); torch's
    # setting is restored after each call, so other components are unaffected.
    threads: int | None = 1
    # Inference backend (retrieval/backends.py): torch | onnx | onnx-int8 | openvino | openvino-bf16. Part
    # of the fingerprint, hence of the score cache folder: scores from different backends never mix.
    backend: str = "torch"
    export_dir: str | None = EXPORT_DIR  # None (caching off): the default folder; exports are always kept
    # Per-process state (not config): loaded cache shards and hit counters. init=False, so a copy made
    # with dataclasses.replace (another model, another length) never shares scores with this one.
    _memory: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        problem = device_problem(self.device, self.backend)
        if problem:
            raise FieldError([("device", problem)])

    @property
    def path(self) -> str:
        return resolve_cross_encoder_path(self.model)

    def compute(self) -> str:
        """Where and in what precision the scores are computed (retrieval.compute.compute_identity)."""
        return compute_identity(self.device, self.backend)

    def check_available(self) -> None:
        """Raise ModelNotFoundError now, before any work, if the model cannot be loaded (or not on the
        device asked for)."""
        try:
            require_local_or_online(self.path, self.model)
        except ModelNotFoundError as err:
            raise ModelNotFoundError(_how_to_provide(self.model)) from err
        try:
            self.compute()
        except DeviceUnavailableError as err:
            raise ModelNotFoundError(f"cross-encoder {self.model!r}: {err}") from err

    def fingerprint(self) -> str:
        """What changes a score: the model's content, truncation length, backend, compute identity (not
        batch size or cache dir); a stage's fingerprint carries it."""
        try:
            revision = model_hash(self.path)
        except ModelNotFoundError:
            revision = "missing"
        # torch adds nothing, so scores cached before backends existed keep their keys.
        backend = "" if self.backend == "torch" else f"|backend={self.backend}"
        return f"{self.model}@{revision}|max_length={self.max_length}{backend}|compute={self.compute()}"

    @property
    def stats(self) -> dict[str, int]:
        return self._memory.setdefault("stats", {"hits": 0, "misses": 0})

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """One raw logit (float64) per memory text, for one query; higher is more relevant."""
        keys = [_pair_key(query, t) for t in texts]
        store = self._store()
        missing = dict((k, t) for k, t in zip(keys, texts, strict=True) if k not in store)
        self.stats["hits"] += len(keys) - sum(k not in store for k in keys)
        self.stats["misses"] += sum(k not in store for k in keys)
        cache_io.COUNTS["rerank_scores.hits"] += len(keys) - sum(k not in store for k in keys)
        cache_io.COUNTS["rerank_scores.misses"] += sum(k not in store for k in keys)
        if missing:
            import torch

            model = load_cross_encoder(
                self.path,
                self.max_length,
                self.device,
                self.backend,
                self.export_dir or EXPORT_DIR,
                self.threads,
            )
            before = torch.get_num_threads()
            if self.threads:
                torch.set_num_threads(self.threads)
            try:
                with fp32_matmuls():
                    logits = model.predict(
                        [(query, t) for t in missing.values()],
                        batch_size=self.batch_size,
                        activation_fn=torch.nn.Identity(),  # raw logits: modes normalise or rank them
                        show_progress_bar=False,
                    )
            finally:
                torch.set_num_threads(before)
            new = dict(zip(missing, np.asarray(logits, dtype=np.float64).reshape(-1), strict=True))
            store.update(new)
            self._write_shard(new)
        return np.array([store[k] for k in keys], dtype=np.float64)

    def _folder(self) -> Path | None:
        if not self.cache_dir:
            return None
        slug = Path(self.model).name[-60:] or "model"
        key = KEY_RULES["rerank_scores"].key(
            model=model_hash(self.path),
            name=self.model,
            max_length=self.max_length,
            backend=self.backend,
            compute=self.compute(),
        )
        return Path(self.cache_dir) / f"{slug}-{key[:16]}"

    def _store(self) -> dict[str, float]:
        slot = ("store", self.fingerprint())  # keyed by model too: belt and braces
        if slot not in self._memory:
            store: dict[str, float] = {}
            folder = self._folder()
            if folder is not None and folder.is_dir():
                for shard in sorted(folder.glob("[!.]*.npz")):
                    data = cache_io.load_arrays(shard, ("keys", "scores"))  # None: corrupt (warned, deleted)
                    if data is not None and len(data["keys"]) == len(data["scores"]):
                        store.update(zip(data["keys"].tolist(), data["scores"].tolist(), strict=True))
                    elif data is not None:
                        cache_io.discard(shard, "keys and scores differ in length")
            self._memory[slot] = store
        return self._memory[slot]

    def _write_shard(self, new: dict[str, float]) -> None:
        folder = self._folder()
        if folder is None:
            return
        cache_io.save_arrays(  # atomic and checksummed; an unwritable folder warns once, scores stay
            folder / f"{uuid.uuid4().hex}.npz",
            keys=np.array(list(new), dtype="U64"),
            scores=np.array(list(new.values()), dtype=np.float64),
        )


def _pair_key(query: str, text: str) -> str:
    # Length-prefixed so ("ab", "c") and ("a", "bc") never share a key.
    return hashlib.sha256(f"{len(query)}:{query}\x00{text}".encode()).hexdigest()
