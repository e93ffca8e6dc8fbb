"""The command line and report files shared by the seeded coverage simulations (cluster_calibration,
frontier_coverage, answer_ppi_coverage): one parser, one way to name the command, one way to write.

args = arguments(__doc__, argv)                       # --replications, --seed, --out
command = command_line("cluster_calibration", argv)   # the command written into the report
write(args.out, "cluster_calibration", record, text)  # OUT/<name>.json and OUT/<name>.md, text printed
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path


def arguments(doc: str, argv: list[str] | None) -> argparse.Namespace:
    """A simulation's options: `--replications` (1,000), `--seed` (0), `--out` (reports/benchmarks)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--replications", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("reports/benchmarks"))
    return parser.parse_args(argv)


def command_line(name: str, argv: list[str] | None) -> str:
    """The command that reruns benchmark `name` with `argv` (the process's own arguments when None)."""
    arguments = sys.argv[1:] if argv is None else argv
    return (f".venv/bin/python -m experiments.benchmarks.{name} " + shlex.join(arguments)).strip()


def write(out: Path, name: str, record: object, text: str) -> None:
    """`record` as OUT/<name>.json and `text` as OUT/<name>.md (the folder made), then `text` printed."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
    (out / f"{name}.md").write_text(text)
    print(text)
