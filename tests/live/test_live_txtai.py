"""txtai's API (PyPI: txtai[api]), conf/system/txtai.yaml and the YAML adapter, started by the test with
the command docs/live_systems.md shows (uvicorn txtai.api:app, its config in CONFIG). With the bundled MiniLM
it ranks exactly as `variant=dense` on spark25: same ids and order per query (ties within 1e-6 may trade
places), scores within 1e-6. Its `/add` only buffers: the `after_ingest` call (`/upsert`) indexes a scope,
and the count of the scope (txtai SQL over memeval's scope key) confirms it.
"""

from __future__ import annotations

import json
import re
import urllib.request

import pytest

from tests.live_services import free_port, memeval_run, ranking_differences, rankings, started
from tests.support import REPO, doc_commands

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/count", timeout=2) as response:
            return json.loads(response.read()) is not None
    except OSError:
        return False


def start_command(port: int) -> list[str]:
    """The page's command that starts txtai, on `port`, as a shell line run from the checkout."""
    (line,) = [
        c for c in doc_commands((REPO / "docs" / "live_systems.md").read_text()) if "txtai.api:app" in c
    ]
    line = (
        re.sub(r"\s*&$", "", line)
        .replace("8001", str(port))
        .replace(".venv/bin/uvicorn", "exec .venv/bin/uvicorn")
    )
    return ["bash", "-c", f"cd {REPO} && {line}"]  # exec: the server is the process the test stops


def test_txtai_ranks_exactly_as_dense_on_spark25(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    dense = memeval_run(tmp_path, tmp_path / "dense", "suite=spark25", "variant=dense")
    with started(start_command(port), lambda: answers(url), tmp_path / "txtai.log", wait_s=300):
        txtai = memeval_run(
            tmp_path,
            tmp_path / "txtai",
            "suite=spark25",
            "variant=system",
            "system=txtai",
            f"system.base_url={url}",
        )
    assert ranking_differences(txtai / "run.trec", dense / "run.trec", tolerance=1e-6) == []
    assert len(rankings(txtai / "run.trec")) == 25
    metrics = json.loads((txtai / "metrics.json").read_text())
    cost = metrics["system"]
    assert cost["memories_ingested"] == 306 and cost["errors"] == 0 and metrics["scope_leaks"] == 0
