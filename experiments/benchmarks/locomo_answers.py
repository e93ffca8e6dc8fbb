"""Record the LoCoMo answer cassette that CI replays (tests/answer/test_locomo_answers.py):

    python -m experiments.benchmarks.locomo_answers                 # records into tests/data/answers/
    python -m experiments.benchmarks.locomo_answers --sample 40 --threads 2

Starts the offline endpoint (llama_cpp.server + SmolLM2-135M, memeval[llm-server]) and runs memeval-run
on LoCoMo conversations 1-5 (../shared/locomo, categories 1-4, suite.protocol=memeval) with bm25, a seeded
sample of questions answered from the retrieved top k and from k random turns of the same conversation,
in record mode. Re-record after any change to the answer prompts (a replay of changed prompts is a miss).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from experiments import PROJECT_ROOT
from experiments.answer.llama_server import start_server
from experiments.answer.offline_model import smollm2_gguf

CASSETTE = PROJECT_ROOT / "tests" / "data" / "answers" / "locomo_smollm2_bm25.cassette.jsonl"
LOCOMO = PROJECT_ROOT.parent / "shared" / "locomo" / "locomo10_conv1-5.json"


def overrides(sample: int, k: int, cassette: Path, mode: str) -> list[str]:
    """memeval-run's overrides for the recorded run and its replay (the same but for mode and URL)."""
    return [
        "suite=locomo", f"suite.path={LOCOMO}", "suite.protocol=memeval", "variant=bm25",
        "answer=llm", "answer.model=smollm2", f"answer.endpoint.model_file={smollm2_gguf()}",
        f"answer.sample={sample}", f"answer.k={k}", "answer.max_tokens=32", "answer.window_tokens=4096",
        "answer.context=[retrieved,random]", "answer.judges=[lexical]", f"answer.mode={mode}",
        f"answer.cassette={cassette}",
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sample", type=int, default=100)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--out", default=str(CASSETTE))
    parser.add_argument("--run-dir", default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(smollm2_gguf(), n_threads=args.threads, log=Path(tmp) / "server.log")
        try:
            command = [
                sys.executable, "-m", "experiments.run",
                *overrides(args.sample, args.k, Path(args.out), "record"),
                f"answer.endpoint.base_url={server.base_url}", f"answer.concurrency={args.concurrency}",
                "tracking.enabled=false", "progress=false",
                f"hydra.run.dir={args.run_dir or Path(tmp) / 'run'}",
            ]  # fmt: skip
            return subprocess.run(command, cwd=PROJECT_ROOT).returncode
        finally:
            server.stop()


if __name__ == "__main__":
    sys.exit(main())
