"""The embedding cache: keyed by role and text, persisted in shards, compacted, shared across processes."""

from __future__ import annotations

import numpy as np

from retrieval import encoder as enc
from retrieval.encoder import SentenceEncoder


def test_cache_keys_by_role_and_survives_a_new_process(tmp_path):
    first = SentenceEncoder(cache_dir=str(tmp_path), show_progress=False)
    q = first.encode(["always use type hints"], role="query")
    d = first.encode(["always use type hints"], role="document")
    assert first.stats == {"hits": 0, "misses": 2}
    second = SentenceEncoder(cache_dir=str(tmp_path), show_progress=False)  # a fresh process's view
    assert np.array_equal(second.encode(["always use type hints"], role="query"), q)
    assert np.array_equal(second.encode(["always use type hints"], role="document"), d)
    assert second.stats == {"hits": 2, "misses": 0}
    assert np.allclose(np.linalg.norm(q), 1.0, atol=1e-5)


def test_prompts_change_the_key(tmp_path):
    plain = SentenceEncoder(cache_dir=str(tmp_path), show_progress=False)
    prompted = SentenceEncoder(cache_dir=str(tmp_path), query_prompt="query: ", show_progress=False)
    assert plain.fingerprint() != prompted.fingerprint()
    a, b = plain.encode(["hello"], role="query"), prompted.encode(["hello"], role="query")
    assert not np.allclose(a, b)


def test_many_shards_are_compacted_without_losing_a_vector(tmp_path, monkeypatch):
    monkeypatch.setattr(enc, "MAX_SHARDS", 3)
    texts = [f"memory number {i}" for i in range(6)]
    writer = SentenceEncoder(cache_dir=str(tmp_path), show_progress=False)
    vectors = np.vstack([writer.encode([t], role="document") for t in texts])  # one shard each
    folder = next(tmp_path.iterdir())
    assert len(list(folder.glob("*.npz"))) == 6
    reader = SentenceEncoder(cache_dir=str(tmp_path), show_progress=False)
    assert np.array_equal(reader.encode(texts, role="document"), vectors)
    assert reader.stats["misses"] == 0
    assert len(list(folder.glob("*.npz"))) == 1


def test_a_replaced_encoder_does_not_share_the_in_memory_store(tmp_path):
    import dataclasses

    plain = SentenceEncoder(cache_dir=None, show_progress=False)
    plain.encode(["hello"], role="query")
    prompted = dataclasses.replace(plain, query_prompt="query: ")
    assert prompted._memory == {} and plain._memory != {}
