"""The real services memeval-conform is checked against, each started on 127.0.0.1 as the live tests start
them (tests/live_services.py): memeval-serve (bm25, exp05), the npm reference MCP memory server (started by
the MCP adapter itself), txtai's API, Chroma's server. `served(name)` yields the overrides that point
`memeval-conform system=<config>` at the running service.

Regenerates the committed tables (reports/conformance/<service>.md, each service's conformance.md) and the
matrix of every check by service in docs/conformance.md (between its `conformance-matrix` markers):

    .venv/bin/python -m tests.conform_services reports/conformance
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.live_services import free_port, started
from tests.support import CACHE_DIR, REPO

SERVICES = {  # name -> the conf/system/ config it is checked through
    "memeval_serve_bm25": "memeval_serve",
    "memeval_serve_exp05": "memeval_serve",
    "mcp_memory": "mcp_memory",
    "txtai": "txtai",
    "chroma": "chroma",
}


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@contextmanager
def served(name: str, log_dir: Path) -> Iterator[list[str]]:
    """The service `name` running (stopped after); yields the system overrides that reach it."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    if name.startswith("memeval_serve_"):
        variant = name.removeprefix("memeval_serve_")
        command = [
            sys.executable,
            "-m",
            "experiments.serve.cli",
            f"variant={variant}",
            f"cache_dir={CACHE_DIR}",
            "--port",
            str(port),
        ]
        with started(command, lambda: _answers(f"{url}/health"), log_dir / f"{name}.log"):
            yield [f"system.base_url={url}"]
    elif name == "txtai":
        from tests.live.test_live_txtai import start_command  # the docs' command, as its live test runs it

        with started(
            start_command(port), lambda: _answers(f"{url}/count"), log_dir / "txtai.log", wait_s=300
        ):
            yield [f"system.base_url={url}"]
    elif name == "chroma":
        chroma = shutil.which("chroma", path=str(Path(sys.executable).parent))
        command = [
            str(chroma),
            "run",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--path",
            str(log_dir / "chroma"),
        ]
        with started(command, lambda: _answers(f"{url}/api/v2/heartbeat"), log_dir / "chroma.log"):
            yield [f"system.adapter.port={port}", f"encoder.cache_dir={CACHE_DIR / 'embeddings'}"]
    elif name == "mcp_memory":
        yield []  # the MCP adapter starts the server over stdio (npx), a fresh graph each time
    else:
        raise ValueError(f"no service {name!r}: one of {', '.join(SERVICES)}")


def conform_command(name: str, overrides: list[str], run_dir: Path) -> list[str]:
    return [
        str(Path(sys.executable).parent / "memeval-conform"),
        f"system={SERVICES[name]}",
        *overrides,
        "tracking=none",
        f"hydra.run.dir={run_dir}",
    ]


MARKERS = ("<!-- conformance-matrix: begin -->", "<!-- conformance-matrix: end -->")
CELL = {"pass": "pass", "fail": "**FAIL**", "not_applicable": "n/a"}


def matrix(reports: dict[str, dict]) -> str:
    """Every check by service, linking each service's table."""
    names = list(reports)
    head = "| check | " + " | ".join(f"[{n}](../reports/conformance/{n}.md)" for n in names) + " |"
    rows = [head, "|---|" + "---|" * len(names)]
    for i, check in enumerate(next(iter(reports.values()))["checks"]):
        rows.append(
            f"| `{check['id']}` | "
            + " | ".join(CELL[reports[n]["checks"][i]["status"]] for n in names)
            + " |"
        )
    totals = " | ".join(
        f"{r['counts']['pass']} / {r['counts']['fail']} / {r['counts']['not_applicable']}"
        for r in reports.values()
    )
    rows.append(f"| pass / fail / n/a | {totals} |")
    return "\n".join(rows)


def main(out: Path) -> None:
    """Run the suite against every service; each table to out/<service>.md, the matrix into the docs."""
    import subprocess

    out.mkdir(parents=True, exist_ok=True)
    reports = {}
    with tempfile.TemporaryDirectory(prefix="conform-services-") as tmp:
        for name in SERVICES:
            run_dir = Path(tmp) / name
            run_dir.mkdir()
            with served(name, run_dir) as overrides:
                t = time.perf_counter()
                done = subprocess.run(
                    conform_command(name, overrides, run_dir), cwd=REPO, capture_output=True, text=True
                )
                wall = time.perf_counter() - t
            if done.returncode not in (0, 1):
                raise SystemExit(
                    f"{name}: exit {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
                )
            report = json.loads((run_dir / "conformance.json").read_text())
            table = (
                (run_dir / "conformance.md")
                .read_text()
                .replace(
                    f"# Conformance: {SERVICES[name]}", f"# Conformance: {name} (system={SERVICES[name]})"
                )
            )
            (out / f"{name}.md").write_text(table)
            reports[name] = report
            print(f"{name}: {report['counts']} in {wall:.1f} s (exit {done.returncode})")
    docs = REPO / "docs" / "conformance.md"
    head, rest = docs.read_text().split(MARKERS[0])
    docs.write_text(f"{head}{MARKERS[0]}\n{matrix(reports)}\n{MARKERS[1]}{rest.split(MARKERS[1])[1]}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "reports" / "conformance")
