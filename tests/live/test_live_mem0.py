"""mem0 as a live memory system (experiments/systems/mem0.py): offline, no LLM, suite ids in and out.

The slow tests start a real mem0 (MiniLM embedder, local Qdrant in a temporary folder) on the tiny
two-scope suite: it stores what it is given, returns suite ids, keeps scopes apart, ignores a repeated
ingest, ranks as memeval's dense channel does with the same model, and never calls an LLM.
"""

from __future__ import annotations

import numpy as np
import pytest

from experiments.systems.mem0 import Mem0System, _scope_user_id
from experiments.systems.protocol import LiveSystemError, MemorySystem, SearchRequest
from retrieval.encoder import SentenceEncoder
from retrieval.stage import FieldError
from tests.support import tiny_suite


def test_scope_user_ids_are_distinct_and_whitespace_free():
    a = _scope_user_id({"conversation": "1 2"})
    b = _scope_user_id({"conversation": "1", "user": "2"})
    assert a != b and not any(c.isspace() for c in a + b)
    assert a == _scope_user_id({"conversation": "1 2"})


def test_unknown_override_is_refused_before_mem0_starts():
    system = Mem0System()
    request = SearchRequest(
        query_id="q7", text="x", scope={"conversation": "c1"}, k=3, overrides={"boost": 1}
    )
    with pytest.raises(LiveSystemError, match=r"query 'q7'.*\['boost'\]"):
        system.search(request)
    assert system.state.memory is None  # refused before any model or store was loaded


def test_threshold_outside_mem0_range_is_a_config_error_naming_the_field():
    with pytest.raises(FieldError) as err:
        Mem0System(threshold=-0.5, embed_batch_size=0)
    assert [field for field, _ in err.value.problems] == ["threshold", "embed_batch_size"]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    suite = tiny_suite()
    system = Mem0System(store_dir=str(tmp_path_factory.mktemp("mem0")))
    scopes: dict[str, list] = {}
    for m in suite.memories:
        scopes.setdefault(m.scope["conversation"], []).append(m)
    for name, memories in scopes.items():
        scope = {"conversation": name}
        system.reset(scope)
        system.ingest(scope, memories)
        assert system.wait_until_searchable(scope, memories) >= 0.0
    yield suite, system, scopes
    system.close()


@pytest.mark.slow
def test_mem0_is_a_memory_system_that_returns_suite_ids_within_scope(loaded):
    suite, system, _ = loaded
    assert isinstance(system, MemorySystem)
    for q in suite.queries:
        hits = system.search(SearchRequest(query_id=q.id, text=q.text, scope=q.scope, k=3))
        assert 0 < len(hits) <= 3
        assert all(h.id.startswith(q.scope["conversation"] + ":") for h in hits), q.id  # no leak
        texts = {m.id: m.text for m in suite.memories}
        assert all(h.text == texts[h.id] for h in hits)  # stored verbatim (infer=False)
        if q.id in suite.qrels:
            assert hits[0].id in suite.qrels[q.id], q.id


@pytest.mark.slow
def test_mem0_ranks_like_memeval_dense_with_the_same_model(loaded):
    suite, system, scopes = loaded
    encoder = SentenceEncoder(cache_dir=None, show_progress=False)
    for q in suite.queries:
        memories = scopes[q.scope["conversation"]]
        cosine = (
            encoder.encode([m.text for m in memories], role="document")
            @ encoder.encode([q.text], role="query")[0]
        )
        hits = system.search(SearchRequest(query_id=q.id, text=q.text, scope=q.scope, k=len(memories)))
        positive = [memories[i].id for i in np.argsort(-cosine) if cosine[i] > 0]
        assert [h.id for h in hits] == positive, q.id  # mem0 drops negative cosines (threshold 0)
        by_id = dict(zip((m.id for m in memories), cosine, strict=True))
        assert [h.score for h in hits] == pytest.approx([by_id[h.id] for h in hits], abs=1e-5)


@pytest.mark.slow
def test_repeated_ingest_stores_nothing_twice_and_reset_empties_the_scope(loaded):
    _, system, scopes = loaded
    scope = {"conversation": "c1"}
    system.ingest(scope, scopes["c1"])  # a retried ingest
    assert sorted(system._stored(_scope_user_id(scope))) == sorted(m.id for m in scopes["c1"])
    system.reset({"conversation": "c2"})
    assert system._stored(_scope_user_id({"conversation": "c2"})) == {}
    assert len(system._stored(_scope_user_id(scope))) == len(scopes["c1"])  # other scope untouched
    system.ingest({"conversation": "c2"}, scopes["c2"])


@pytest.mark.slow
def test_no_llm_call_happens_and_one_would_be_caught(loaded):
    suite, system, _ = loaded
    assert system.llm_calls == 0  # after ingesting and searching the whole suite
    # The guard is real: mem0's own LLM path (infer=True) reaches it and is refused.
    with pytest.raises(Exception, match="memeval runs mem0 with infer=False"):  # mem0 wraps it in LLMError
        system.memory.add([{"role": "user", "content": "I moved to Lisbon"}], user_id="probe", infer=True)
    assert system.llm_calls == 1
