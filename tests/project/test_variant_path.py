"""docs/architecture.md "How a variant becomes a pipeline" lists the files a stage field's value passes
through, from the command line to the call that reads it; this runs the documented command and checks the
list against the memeval files on the call stack where the stage is built and where it ranks."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

from tests.support import CACHE_DIR, REPO

DOC = REPO / "docs" / "architecture.md"
SECTION = "## How a variant becomes a pipeline"

# Runs the app as `memeval-run` does, with a profiler that records, the first time the boost is built
# (`__post_init__`) and ranks (`rank_all`), the project's files on the stack and the weight it holds.
TRACER = """
import json, sys
from pathlib import Path
from experiments.configure.setup import setup
from experiments.run.app import run_app
from retrieval.stages.instruction_boost import InstructionBoost

repo, seen = Path.cwd().resolve(), {}

def files(frame):
    out = []
    while frame is not None:
        path = Path(frame.f_code.co_filename)
        if path.is_absolute() and path.is_relative_to(repo) and ".venv" not in path.parts:
            out.append(path.relative_to(repo).as_posix())
        frame = frame.f_back
    return list(dict.fromkeys(reversed(out)))

def profile(frame, event, arg):
    name = frame.f_code.co_name
    if event == "call" and name in ("__post_init__", "rank_all") and name not in seen:
        stage = frame.f_locals.get("self")
        if type(stage) is InstructionBoost:
            seen[name] = [files(frame.f_back if name == "__post_init__" else frame), stage.weight]

sys.argv = ["memeval-run", *sys.argv[1:]]
setup()
sys.setprofile(profile)
try:
    run_app()
finally:
    sys.setprofile(None)
    print("TRACE " + json.dumps(seen))
"""


def _documented() -> tuple[list[str], list[str]]:
    """The section's command (its first code span) and its numbered files."""
    text = DOC.read_text().split(SECTION, 1)[1].split("\n## ", 1)[0]
    command = shlex.split(re.search(r"`(memeval-run [^`]+)`", text)[1])[1:]
    return command, re.findall(r"^\d+\. `([^`]+)`", text, re.M)


def test_the_documented_path_of_a_stage_field_is_the_one_a_run_takes(tmp_path):
    command, files = _documented()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            TRACER,
            *command,
            "tracking=none",
            "progress=false",
            "cache_dir=null",
            f"encoder.cache_dir={CACHE_DIR / 'embeddings'}",  # shared embeddings: no re-encoding
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=REPO,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.rsplit("TRACE ", 1)[1])
    (built, built_weight), (ranked, ranked_weight) = seen["__post_init__"], seen["rank_all"]
    weight = float(next(a for a in command if a.startswith("stage.instruction_boost.weight=")).split("=")[1])
    assert built_weight == ranked_weight == weight  # the command line's value, built and read
    assert list(dict.fromkeys(built + ranked)) == files
    # At most 5 files from the command line to the stage (issue #34); config_check.py validates only.
    assert len(files) <= 5
