"""The reference MCP memory server (npm: @modelcontextprotocol/server-memory), conf/system/mcp_memory.yaml:
the MCP adapter starts it over stdio with npx (which fetches the pinned package from the npm registry on
first use). It stores each memory as an entity named by its suite id and finds entities whose text contains
the whole query: a substring of a stored text finds exactly the memories holding it (in both scopes of the
tiny suite, so the other scope's is counted as a leak by the run), and a full spark25 run scores ~0.
"""

from __future__ import annotations

import json
import shutil

import pytest
from hydra.utils import instantiate

from experiments.configure.compose import compose_config
from experiments.systems.mcp import McpSystem
from experiments.systems.protocol import SearchRequest
from tests.live_services import memeval_run
from tests.support import tiny_suite

pytestmark = [pytest.mark.slow, pytest.mark.integration]

if not (shutil.which("node") and shutil.which("npx")):
    pytest.skip("node and npx are needed to run the npm MCP memory server", allow_module_level=True)


def adapter() -> McpSystem:
    """conf/system/mcp_memory.yaml's adapter as a run composes it (it starts a fresh graph)."""
    cfg = compose_config(["tracking=none", "variant=system", "system=mcp_memory"])
    return instantiate(cfg.system.adapter, _convert_="all")


def test_the_server_stores_suite_ids_and_finds_substrings():
    suite = tiny_suite()
    system = adapter()
    try:
        system.check_available()
        for name in ("c1", "c2"):
            memories = [m for m in suite.memories if m.scope["conversation"] == name]
            system.ingest({"conversation": name}, memories)
            system.ingest({"conversation": name}, memories)  # the server ignores names it holds
        # every text contains the empty string: the whole graph, each suite memory once, nothing else
        everything = system.search(SearchRequest("q", "", {"conversation": "c1"}, 100))
        assert sorted(h.id for h in everything) == sorted(m.id for m in suite.memories)
        hits = system.search(SearchRequest("q", "syntax highlighting", {"conversation": "c1"}, 10))
        assert [h.id for h in hits] == ["c1:0", "c2:0"]  # one graph: the other scope's copy comes back too
        assert hits[0].text == suite.memories[0].text and hits[0].score is None
        assert (
            system.search(SearchRequest("q", "how should code be formatted", {"conversation": "c1"}, 10))
            == []
        )
    finally:
        system.close()


def test_a_spark25_run_through_the_config_scores_about_nothing(tmp_path):
    run = memeval_run(tmp_path, tmp_path / "run", "suite=spark25", "variant=system", "system=mcp_memory")
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["system"]["memories_ingested"] == 306 and metrics["system"]["errors"] == 0
    assert metrics["system"]["unknown_ids"] == 0  # a fresh graph: nothing of an earlier run answers
    assert metrics["overall"]["nDCG@10"] < 0.05  # whole questions are rarely substrings of a memory
