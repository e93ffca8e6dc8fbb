"""Start and stop `llama_cpp.server` on 127.0.0.1 for a GGUF file: the offline OpenAI-compatible endpoint
of the tests (tests/answer/conftest.py) and of experiments/benchmarks/answer_stage.py.

    python -m llama_cpp.server --model <gguf> --model_alias <file name> --host 127.0.0.1 --port <free> \
        --n_ctx 4096 --n_threads <n> --seed 42

The alias is the GGUF's file name: the model id the server reports (and a cassette records) is then the
same on every machine, not this machine's path to the file.

The process is the server itself (no shell wrapper), so its own PID is what `stop` ends; `stop` then
checks that nothing listens on its port any more. OMP_WAIT_POLICY=passive: the build uses OpenMP, whose
spinning waits would take a shared core from other jobs.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def nothing_listens(port: int) -> bool:
    """No process accepts connections on 127.0.0.1:`port` (a connect is refused). Not a bind test: the
    stopped server's closed connections linger in TIME_WAIT, which a bind would take for a listener."""
    with socket.socket() as s:
        s.settimeout(2.0)
        try:
            s.connect(("127.0.0.1", port))
        except ConnectionRefusedError:
            return True
        except OSError:
            return False
        return False


@dataclass
class LlamaServer:
    process: subprocess.Popen
    port: int
    started_s: float  # process start to GET /v1/models answering
    log: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def model_id(self) -> str:
        with urllib.request.urlopen(f"{self.base_url}/models", timeout=5) as answer:
            return json.loads(answer.read())["data"][0]["id"]

    def stop(self, timeout_s: float = 15.0) -> None:
        """End the server by its PID (SIGTERM, then SIGKILL) and check its port is free."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout_s)
        deadline = time.monotonic() + timeout_s
        while not nothing_listens(self.port):
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"llama_cpp.server (pid {self.process.pid}) stopped, but port {self.port} still answers"
                )
            time.sleep(0.1)


def start_server(
    gguf: Path, *, n_threads: int = 1, n_ctx: int = 4096, seed: int = 42, log: Path, timeout_s: float = 120.0
) -> LlamaServer:
    """Start the server and wait until GET /v1/models answers (RuntimeError with its log's tail if it
    exits or does not answer within `timeout_s`)."""
    port = free_port()
    command = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", gguf.name,
        "--host", "127.0.0.1",
        "--port", str(port), "--n_ctx", str(n_ctx), "--n_threads", str(n_threads), "--seed", str(seed),
    ]  # fmt: skip
    env = {**os.environ, "OMP_WAIT_POLICY": "passive", "OMP_NUM_THREADS": str(n_threads)}
    started = time.monotonic()
    handle = open(log, "wb")  # noqa: SIM115 (the server writes to it for its whole life)
    process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=env)
    server = LlamaServer(process, port, 0.0, log)
    while True:
        if process.poll() is not None:
            raise RuntimeError(
                f"llama_cpp.server exited with {process.returncode}: {log.read_text()[-1500:]}"
            )
        try:
            server.model_id()
            server.started_s = time.monotonic() - started
            return server
        except OSError:
            if time.monotonic() - started > timeout_s:
                server.stop()
                raise RuntimeError(
                    f"llama_cpp.server did not answer in {timeout_s:g} s: {log.read_text()[-1500:]}"
                ) from None
            time.sleep(0.2)
