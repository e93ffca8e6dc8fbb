"""The offline answer endpoint for the integration tier: `llama_cpp.server` serving SmolLM2-135M
(memeval[llm-server]), started once per session on 127.0.0.1 and stopped by its own PID at the end."""

from __future__ import annotations

import pytest

from experiments.answer.llama_server import nothing_listens, start_server
from experiments.answer.offline_model import smollm2_gguf

# n_threads 1 with OMP_WAIT_POLICY=passive (experiments/answer/llama_server.py): on a shared 2-core machine
# reports/benchmarks/answer_stage.md compares 1 and 2.
N_THREADS = 1


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory):
    log = tmp_path_factory.mktemp("llama_server") / "server.log"
    server = start_server(smollm2_gguf(), n_threads=N_THREADS, log=log)
    try:
        yield server
    finally:
        server.stop()
        assert server.process.returncode is not None and nothing_listens(server.port)
