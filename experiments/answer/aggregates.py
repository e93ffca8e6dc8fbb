"""Upstream's printed answer aggregates, computed as upstream computes them, beside memeval's own statistics.

- LoCoMo (task_eval/evaluation_stats.py `analyze_acc`): per category (1-5), the count, the sum of the scores
  and their mean, printed rounded to 3 places; the overall mean (evaluate_gpts.py's last print).
- LongMemEval (src/evaluation/print_qa_metrics.py): per question type the mean and count; the
  **task-averaged** accuracy (the mean of the six type means, NaN when a type has no question, as upstream's
  np.mean of an empty list); the overall accuracy (over every question); the abstention accuracy (over the
  questions whose id holds `_abs`); printed rounded to 4 places.
- BEAM (src/evaluation/report_results.py): per ability the mean judge score. Upstream reports event_ordering
  by its normalised Kendall tau over an LLM alignment of the answer's events with the rubric; memeval has no
  such alignment, so that ability's value here is its mean judge score, and the block says so.
An unparsed verdict (score None) is left out of every mean, and each block states how many were.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from experiments.answer.judges.lexical import item_category
from experiments.answer.types import AnswerItem, Verdict

LONGMEMEVAL_TYPES = (
    "single-session-user",
    "single-session-preference",
    "single-session-assistant",
    "multi-session",
    "temporal-reasoning",
    "knowledge-update",
)


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if len(values) else None


def _rounded(value: float | None, places: int) -> float | None:
    return None if value is None or np.isnan(value) else round(value, places)


def locomo(items: Sequence[AnswerItem], scores: Sequence[float | None]) -> dict:
    by_category: dict[int, list[float]] = {}
    for item, score in zip(items, scores, strict=True):
        if score is not None:
            by_category.setdefault(item_category(item), []).append(score)
    categories = {
        str(c): {
            "count": len(v),
            "sum": float(sum(v)),
            "mean": sum(v) / len(v),
            "printed": round(sum(v) / len(v), 3),
        }
        for c, v in sorted(by_category.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))
    }
    every = [s for s in scores if s is not None]
    return {"by_category": categories, "overall": _mean(every)}


def longmemeval(items: Sequence[AnswerItem], scores: Sequence[float | None]) -> dict:
    by_type: dict[str, list[float]] = {t: [] for t in LONGMEMEVAL_TYPES}
    abstention: list[float] = []
    for item, score in zip(items, scores, strict=True):
        if score is None:
            continue
        kind = item.labels.get("question_type")
        if kind not in by_type:
            raise ValueError(f"query {item.query_id}: question_type {kind!r} is not one of LongMemEval's six")
        by_type[kind].append(1 if score else 0)
        if "_abs" in item.query_id:
            abstention.append(1 if score else 0)
    means = {t: (float(np.mean(v)) if v else float("nan")) for t, v in by_type.items()}
    task_averaged = float(np.mean(list(means.values())))
    overall = _mean([x for v in by_type.values() for x in v])
    abstain = _mean(abstention)
    return {
        "by_type": {t: {"mean": _mean(by_type[t]), "count": len(by_type[t])} for t in LONGMEMEVAL_TYPES},
        "task_averaged": None if np.isnan(task_averaged) else task_averaged,
        "overall": overall,
        "abstention": abstain,
        "abstention_count": len(abstention),
        "printed": {
            "task_averaged": _rounded(task_averaged, 4),
            "overall": _rounded(overall, 4),
            "abstention": _rounded(abstain, 4),
        },
    }


def beam(items: Sequence[AnswerItem], scores: Sequence[float | None]) -> dict:
    by_ability: dict[str, list[float]] = {}
    for item, score in zip(items, scores, strict=True):
        if score is not None:
            by_ability.setdefault(str(item.labels.get("ability")), []).append(score)
    return {
        "by_ability": {a: {"mean": sum(v) / len(v), "count": len(v)} for a, v in sorted(by_ability.items())},
        "note": "event_ordering: mean judge score (upstream reports normalised Kendall tau over an LLM "
        "alignment, which memeval does not run)",
    }


def upstream_aggregates(
    benchmark: str, items: Sequence[AnswerItem], verdicts: Mapping[str, Sequence[Verdict]]
) -> dict:
    """Per judge (the keys of `verdicts`, each aligned with `items`): what upstream prints for `benchmark`
    (locomo, longmemeval, beam; any other: the overall mean), with the count of unparsed verdicts left out."""
    out = {}
    for judge, judged in verdicts.items():
        if len(judged) != len(items):
            raise ValueError(f"judge {judge!r}: {len(judged)} verdicts for {len(items)} items")
        scores = [v.score for v in judged]
        if benchmark == "locomo":
            block = locomo(items, scores)
        elif benchmark == "longmemeval":
            block = longmemeval(items, scores)
        elif benchmark == "beam":
            block = beam(items, scores)
        else:
            block = {"overall": _mean([s for s in scores if s is not None])}
        block["unparsed"] = sum(v.unparsed for v in judged)
        block["judged"] = len(judged) - block["unparsed"]
        out[judge] = block
    return out
