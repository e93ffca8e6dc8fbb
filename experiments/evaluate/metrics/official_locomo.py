"""LoCoMo's own retrieval recall (snap-research/LoCoMo task_eval/evaluation.py:228-237,
`eval_question_answering`), reproduced for `suite.protocol=official`: it owns `R@k`.

Per question, over the raw `evidence` list as the file has it (never split, cleaned or de-duplicated):

    recall = (number of evidence entries found in the top k) / len(evidence);   no evidence: 1

An entry is found at turn granularity when it equals the dia_id of a retrieved turn (so `D8:6; D9:17`, `D`
and `D:11:26` are never found but still count in the denominator); at session granularity when its session
number, `entry.split(':')[0][1:]` (`D8:6; D9:17` -> `8`, `D:11:26` -> ``), is that of a retrieved session,
so two entries of one session count twice. Upstream's retriever returns the top k turns' dia_ids or the top k
sessions; here they are the run's top k memories.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from experiments.evaluate.metrics import Metric

NAME = "LoCoMo task_eval/evaluation.py eval_question_answering (recall per question)"
# What upstream's stats script prints as the run's number, beside memeval's mean of the same values.
AGGREGATE = "LoCoMo task_eval/evaluation_stats.py: Overall recall accuracy"


def locomo_recall(evidence: Sequence[str], context: Sequence[str], *, by_session: bool) -> float:
    """Upstream's recall of one question: `context` holds the retrieved dia_ids (turns) or session numbers."""
    if not evidence:
        return 1.0
    found = set(context)
    hits = sum((e.split(":")[0][1:] if by_session else e) in found for e in evidence)
    return hits / len(evidence)


@dataclass(frozen=True)
class LocomoScorer:
    """`evidence`: each scored question's raw evidence list; `unit`: a memory id -> its dia_id (turn
    granularity) or its session number (session granularity)."""

    evidence: Mapping[str, tuple[str, ...]]
    unit: Mapping[str, str]
    by_session: bool
    name: str = NAME

    @cached_property
    def scored(self) -> frozenset[str]:
        return frozenset(self.evidence)

    def owns(self, metric: Metric) -> bool:
        return metric.family == "R"

    aggregate_name: str = AGGREGATE

    def aggregate(self, values: Mapping[str, float]) -> float:
        """The number upstream's stats script prints for these per-question values (analyze_aggr_acc's rag
        branch, evaluation_stats.py:52-67, 127-138): each value as stored, rounded to 3 places
        (evaluate_qa.py:103), a question with no evidence counted 0, over every question. It differs from
        memeval's mean (no rounding, no evidence = 1) by those conventions only."""
        stored = sum(round(v, 3) for q, v in values.items() if self.evidence[q])
        return stored / len(values) if values else float("nan")

    def score(self, query_id: str, ranked: Sequence[str], metric: Metric) -> float:
        context = [self.unit[m] for m in ranked[: metric.k] if m in self.unit]
        return locomo_recall(self.evidence[query_id], context, by_session=self.by_session)
