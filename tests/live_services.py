"""Test support for third-party memory services (Chroma, txtai, the MCP memory server): start one as a real
subprocess on a free loopback port, run memeval against it, and compare rankings with a tolerance for ties."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from tests.support import CACHE_DIR

ENV = {**os.environ, "MLFLOW_TRACKING_URI": "", "HF_HUB_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def started(
    command: Sequence[str],
    ready: Callable[[], bool],
    log: Path,
    *,
    env: dict | None = None,
    wait_s: float = 180,
) -> Iterator[subprocess.Popen]:
    """`command` as a subprocess (output to `log`) until `ready()` answers True; stopped (SIGTERM) after."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(list(command), env=env or ENV, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + wait_s
            while not ready():
                assert proc.poll() is None, (
                    f"{command[0]} exited with {proc.returncode}: {log.read_text()[-2000:]}"
                )
                assert time.monotonic() < deadline, f"{command[0]} did not come up in {wait_s:g} s"
                time.sleep(0.3)
            yield proc
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def memeval_run(cwd: Path, run_dir: Path, *overrides: str) -> Path:
    """`python -m experiments.run` with the shared embedding cache, no tracking; the run folder."""
    args = [
        sys.executable,
        "-m",
        "experiments.run",
        f"hydra.run.dir={run_dir}",
        f"cache_dir={cwd / 'cache'}",
        f"encoder.cache_dir={CACHE_DIR / 'embeddings'}",
        "progress=false",
        "tracking=none",
        *overrides,
    ]
    proc = subprocess.run(args, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return run_dir


def rankings(run_trec: Path) -> dict[str, list[tuple[str, float]]]:
    """A TREC run file as {query id: [(doc id, score), ...] in rank order}."""
    out: dict[str, list[tuple[str, float]]] = {}
    for line in run_trec.read_text().splitlines():
        qid, _, doc, _, score, _ = line.split()
        out.setdefault(qid, []).append((doc, float(score)))
    return out


def ranking_differences(candidate: Path, reference: Path, tolerance: float = 1e-6) -> list[str]:
    """Where two run files disagree: a query missing, other ids, a score off by more than `tolerance`, or
    another order. Two ids may trade places only where their reference scores are within `tolerance` (a tie
    that float rounding may break either way); every query's ids must be the same set."""
    got, want = rankings(candidate), rankings(reference)
    problems = [f"queries differ: {sorted(set(got) ^ set(want))[:5]}"] if set(got) != set(want) else []
    for qid in sorted(set(got) & set(want)):
        ids, ref_ids = [d for d, _ in got[qid]], [d for d, _ in want[qid]]
        ref = dict(want[qid])
        if set(ids) != set(ref_ids):
            problems.append(f"{qid}: other ids ({sorted(set(ids) ^ set(ref_ids))[:4]})")
            continue
        off = [(d, s, ref[d]) for d, s in got[qid] if abs(s - ref[d]) > tolerance]
        if off:
            problems.append(f"{qid}: scores off by more than {tolerance:g}: {off[:3]}")
        swapped = [
            (a, b) for a, b in zip(ids, ref_ids, strict=True) if a != b and abs(ref[a] - ref[b]) > tolerance
        ]
        if swapped:
            problems.append(f"{qid}: another order beyond ties: {swapped[:3]}")
    return problems
