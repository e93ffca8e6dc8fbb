"""A run folder's format, below the runner that writes it (experiments/run/outputs.py) and the readers
that find it again (experiments/track/finished_runs.py, experiments/run/resume.py, reports): its files
(trec.py: run.trec and qrels; ranking.py: ranking.csv) and the tags that name a run (tags.json, MLflow).
"""

from typing import Any

CONFIG_HASH_TAG = "memeval.config_hash"
CODE_VERSION_TAG = "memeval.code_version"
RUN_DIR_TAG = "memeval.run_dir"  # on a run: the run directory it was logged from
# On a run with a recorded or replayed live channel: its cassette's content digest (the run version holds
# it too, through the channel's fingerprint, so a replay of other content is never answered by this run).
CASSETTE_TAG = "memeval.cassette_sha256"
PARTIAL_TAG = "memeval.partial"  # on a partial merge (memeval-merge --allow-partial): what it lacks


def resume_enabled(setting: Any, multirun: bool) -> bool:
    """`resume`: auto (a multirun's job is answered by its finished run folder, if any), true, false."""
    if isinstance(setting, bool):
        return setting
    if str(setting).lower() == "auto":
        return multirun
    raise ValueError(f"resume must be auto, true or false, not {setting!r}")
