"""Chroma through its own server (`chroma run`) and official client (experiments/systems/chroma.py).

The integration tests start the real server on a free loopback port. With memeval's own encoder as its
embeddings, Chroma must rank exactly as `variant=dense` on spark25 and on BEAM 100K conversation 1: the
same ids in the same order per query (two ids may trade places only where dense's scores tie within 1e-6),
scores within 1e-6. On the tiny suite the adapter keeps scopes apart, ingests idempotently, resets a scope
alone and ranks ties in ingest order.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from experiments.systems.chroma import ChromaSystem
from experiments.systems.protocol import LiveSystemError, SearchRequest
from retrieval.encoder import SentenceEncoder
from retrieval.stage import FieldError
from tests.live_services import free_port, memeval_run, ranking_differences, rankings, started
from tests.support import CACHE_DIR, tiny_suite

CHROMA = shutil.which("chroma", path=str(Path(sys.executable).parent))


def heartbeat(port: int) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/heartbeat", timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def chroma_port(tmp_path_factory):
    """A real Chroma server (the chromadb package's own `chroma run`) on a free port, data in a tmp folder."""
    assert CHROMA, "the chroma command of the chromadb package is not in this venv (make setup installs it)"
    tmp, port = tmp_path_factory.mktemp("chroma"), free_port()
    command = [CHROMA, "run", "--host", "127.0.0.1", "--port", str(port), "--path", str(tmp / "data")]
    with started(command, lambda: heartbeat(port), tmp / "chroma.log"):
        yield port


def test_a_chroma_server_down_at_start_is_named_before_any_work():
    system = ChromaSystem(encoder=SentenceEncoder(cache_dir=None), port=free_port())
    with pytest.raises(
        LiveSystemError, match=r"the Chroma server at http://127.0.0.1:\d+ is not reachable .*chroma run"
    ):
        system.check_available()


def test_a_bad_chroma_config_names_each_field():
    with pytest.raises(FieldError) as err:
        ChromaSystem(encoder=SentenceEncoder(cache_dir=None), port=70000, ingest_batch=0)
    assert [field for field, _ in err.value.problems] == ["port", "ingest_batch"]


@pytest.mark.integration
def test_scopes_idempotent_ingest_reset_and_ties_on_the_tiny_suite(chroma_port):
    suite = tiny_suite()
    system = ChromaSystem(
        encoder=SentenceEncoder(cache_dir=str(CACHE_DIR / "embeddings"), show_progress=False),
        port=chroma_port,
        collection_prefix="tiny",
    )
    system.check_available()
    scopes = {s: [m for m in suite.memories if m.scope["conversation"] == s] for s in ("c1", "c2")}
    for name, memories in scopes.items():
        system.reset({"conversation": name})
        system.ingest({"conversation": name}, memories)
        system.ingest({"conversation": name}, memories)  # a retried ingest stores nothing twice
        system.wait_until_searchable({"conversation": name}, memories)
        assert system._collection({"conversation": name}).count() == len(memories)
    for q in suite.queries:
        hits = system.search(SearchRequest(q.id, q.text, q.scope, 10))
        # the same texts live in both scopes: any id of the other scope would be a leak
        assert [h.id.split(":")[0] for h in hits] == [q.scope["conversation"]] * 5, q.id
    # c1 and c2 hold the same texts: within one scope they tie with nothing, across a reset they come back
    system.reset({"conversation": "c2"})
    assert system.search(SearchRequest("x", "travel budget", {"conversation": "c2"}, 10)) == []
    assert len(system.search(SearchRequest("x", "travel budget", {"conversation": "c1"}, 10))) == 5
    # ties: two memories with one text have one distance; they come back in ingest order
    same = [replace(m, id=f"t:{i}", text="identical text") for i, m in enumerate(scopes["c2"][:3])]
    system.ingest({"conversation": "c2"}, list(reversed(same)))
    system.wait_until_searchable({"conversation": "c2"}, same)
    hits = system.search(SearchRequest("t", "identical text", {"conversation": "c2"}, 3))
    assert [h.id for h in hits] == ["t:2", "t:1", "t:0"] and len({h.score for h in hits}) == 1
    system.close()


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("suite", ["spark25", "beam100k_conversation_1"])
def test_chroma_ranks_exactly_as_dense(suite, chroma_port, tmp_path, beam_100k):
    overrides = ["suite=spark25"] if suite == "spark25" else ["suite=beam", f"suite.path={beam_100k / '1'}"]
    dense = memeval_run(tmp_path, tmp_path / "dense", *overrides, "variant=dense")
    chroma = memeval_run(
        tmp_path,
        tmp_path / "chroma",
        *overrides,
        "variant=system",
        "system=chroma",
        f"system.adapter.port={chroma_port}",
        f"system.adapter.collection_prefix={suite.replace('_', '-')}",
    )
    assert ranking_differences(chroma / "run.trec", dense / "run.trec", tolerance=1e-6) == []
    assert len(rankings(dense / "run.trec")) == (25 if suite == "spark25" else 20)
