"""The answer stage's per-query score columns as metric names the gate and reports take
(`answer.lexical.f1`, `answer.llm_longmemeval.correct`, `answer.lexical.f1@random`): higher is better,
paired per query like retrieval's metrics. `answer` (the text) and `answer.evidence_in_context` are not."""

from __future__ import annotations

import re

ANSWER_METRIC = re.compile(r"answer\.[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)+(@(retrieved|gold|random|none))?")


def is_answer_metric(name: str) -> bool:
    return isinstance(name, str) and ANSWER_METRIC.fullmatch(name) is not None
