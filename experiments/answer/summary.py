"""From judged answers to per_query.csv columns and the metrics.json `answer` block (docs/answers.md).

Per judge (its first column is its score: `answer.lexical.f1`, `answer.llm_longmemeval.correct`):
- `overall`: the mean over the judged queries with a parsed verdict, the count, the unparsed count (a
  reply that could not be parsed is neither right nor wrong: it is left out and said), and the 95%
  interval over whole conversations (statistics.cluster_mean_ci, as retrieval's), none under 2 clusters;
- `by_label`: the same per label value;
- `by_retrieval`: the same for the queries with all / some / none of their evidence in the context;
- `differences`: gold - retrieved and retrieved - random, per query paired, with the cluster sign-flip
  interval (statistics.cluster_delta_ci), when those contexts were run.
Beside them, F's parts: upstream's printed aggregates, the judges' agreement (two or more judges), the
PPI block (with `answer.labels`). MLflow gets `answer_acc_<judge>` and its interval bounds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from experiments.answer.stage import AnswerOutcome, Judged, answer_item
from experiments.answer.types import AnswerItem
from experiments.evaluate.statistics import cluster_delta_ci, cluster_mean_ci
from experiments.evaluate.table import query_cluster

DIFFERENCES = (("gold", "retrieved"), ("retrieved", "random"))


def verdict_values(judged: Judged, key: str, columns: Sequence[str]) -> dict[str, float]:
    """A judge's per-query columns: the score under the first, its extras (by the column's last part) under
    the rest; NaN when unparsed or absent."""
    verdict = judged.verdicts[key]
    out = {columns[0]: np.nan if verdict.score is None else float(verdict.score)}
    for column in columns[1:]:
        value = verdict.extra.get(column.rsplit(".", 1)[-1])
        out[column] = np.nan if value is None or verdict.unparsed else float(value)
    return out


def per_query_columns(outcome: AnswerOutcome, ids: Sequence[str]) -> dict[str, list[Any]]:
    """Columns for per_query.csv, aligned with `ids` (the suite's queries): the answer, whether the
    evidence was in its context, each judge's columns; other contexts' judge columns as `<column>@<mode>`."""
    columns: dict[str, list[Any]] = {}
    for i, (mode, judged) in enumerate(outcome.judged.items()):
        by_id = {j.query.id: j for j in judged}
        suffix = "" if i == 0 else f"@{mode}"
        if i == 0:
            columns["answer"] = [by_id[q].record["answer"] if q in by_id else None for q in ids]
            columns["answer.evidence_in_context"] = [by_id[q].evidence if q in by_id else None for q in ids]
        for key, names in outcome.judge_columns.items():
            rows = [verdict_values(by_id[q], key, names) if q in by_id else None for q in ids]
            for name in names:
                columns[name + suffix] = [np.nan if r is None else r[name] for r in rows]
    return columns


def _mean_ci(values: np.ndarray, clusters: np.ndarray) -> dict[str, Any]:
    out: dict[str, Any] = {"n": int(values.size), "mean": float(values.mean()) if values.size else None}
    if len(set(clusters.tolist())) >= 2:
        out["ci95"] = list(cluster_mean_ci(values, clusters))
    else:
        out["ci95"] = None
        out["ci_reason"] = "fewer than 2 conversations: no interval"
    return out


def _scores(judged: Sequence[Judged], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(scores, clusters, kept mask) of the parsed verdicts of one judge."""
    raw = [j.verdicts[key].score for j in judged]
    kept = np.array([s is not None for s in raw], dtype=bool)
    scores = np.array([s for s in raw if s is not None], dtype=float)
    clusters = np.array([query_cluster(j.query) for j in judged], dtype=object)[kept]
    return scores, clusters, kept


def judge_summary(judged: Sequence[Judged], key: str) -> dict[str, Any]:
    scores, clusters, kept = _scores(judged, key)
    out = {**_mean_ci(scores, clusters), "unparsed": int((~kept).sum()), "denominator": "parsed verdicts"}
    by_label: dict[str, dict[str, Any]] = {}
    labels = sorted({name for j in judged for name in j.query.labels})
    for name in labels:
        values = np.array([j.query.labels.get(name) for j in judged], dtype=object)[kept]
        by_label[name] = {
            str(v): _mean_ci(scores[values == v], clusters[values == v]) for v in sorted(set(values) - {None})
        }
    out["by_label"] = by_label
    shares = np.array([j.evidence for j in judged], dtype=object)[kept]
    out["by_retrieval"] = {
        share: _mean_ci(scores[shares == share], clusters[shares == share])
        for share in ("all", "some", "none")
        if (shares == share).any()
    }
    return out


def _difference(a: Sequence[Judged], b: Sequence[Judged], key: str, seed: int) -> dict[str, Any] | None:
    first = {j.query.id: j for j in a}
    pairs = [(first[j.query.id], j) for j in b if j.query.id in first]
    pairs = [
        (x, y) for x, y in pairs if x.verdicts[key].score is not None and y.verdicts[key].score is not None
    ]
    if not pairs:
        return None
    diffs = np.array([x.verdicts[key].score - y.verdicts[key].score for x, y in pairs], dtype=float)
    clusters = np.array([query_cluster(x.query) for x, _ in pairs], dtype=object)
    out: dict[str, Any] = {
        "n": int(diffs.size), "mean": float(diffs.mean()),
        "better": int((diffs > 0).sum()), "worse": int((diffs < 0).sum()),
    }  # fmt: skip
    if len(set(clusters.tolist())) >= 2:
        interval = list(cluster_delta_ci(diffs, clusters, seed=seed))
        out["interval"] = "cluster sign-flip (statistics.cluster_delta_ci)"
        if np.isfinite(interval).all():
            out["ci95"] = interval
        else:  # metrics.json stays strict JSON: no Infinity
            out["ci95"] = None
            out["ci_reason"] = (
                f"unbounded: {len(set(clusters.tolist()))} conversations cannot reject any shift at 95% "
                "(2 / 2**G > 0.05)"
            )
    else:
        out["ci95"] = None
        out["ci_reason"] = "fewer than 2 conversations: no interval"
    return out


def answer_items(judged: Sequence[Judged]) -> list[AnswerItem]:
    return [answer_item(j.query, j.record["answer"]) for j in judged]


def answer_block(
    outcome: AnswerOutcome,
    *,
    benchmark: str,
    settings_view: Mapping[str, Any],
    seed: int,
    labels: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The metrics.json `answer` block. `labels`: query id -> label (0/1) of the primary answers, read and
    checked from `answer.labels` (labels.py); they feed F's PPI block and agreement."""
    from experiments.answer.aggregates import upstream_aggregates

    modes = list(outcome.judged)
    primary = outcome.judged[modes[0]]
    window = [j.record.get("dropped", 0) for mode in modes for j in outcome.judged[mode]]
    usage = {
        name: int(sum(j.record.get(name) or 0 for mode in modes for j in outcome.judged[mode]))
        for name in ("prompt_tokens", "completion_tokens")
    }
    latency = [
        j.record["latency_ms"] for mode in modes for j in outcome.judged[mode] if "latency_ms" in j.record
    ]
    block: dict[str, Any] = {
        **settings_view,
        "contexts": modes,
        "n_judged": len(primary),
        "n_skipped_no_gold": len(outcome.skipped),
        "skipped_no_gold": outcome.skipped[:20],
        "window": {"queries_cut": int(sum(1 for d in window if d)), "memories_dropped": int(sum(window))},
        "usage": usage,
        "latency_ms_p50": float(np.percentile(latency, 50)) if latency else None,
        "latency_ms_p95": float(np.percentile(latency, 95)) if latency else None,
        "judges": {},
    }
    for mode in modes:
        for key in outcome.judge_columns:
            summary = judge_summary(outcome.judged[mode], key)
            block["judges"].setdefault(key, {})[mode] = summary
    differences: dict[str, Any] = {}
    for high, low in DIFFERENCES:
        if high in outcome.judged and low in outcome.judged:
            for key in outcome.judge_columns:
                found = _difference(outcome.judged[high], outcome.judged[low], key, seed)
                if found is not None:
                    differences.setdefault(f"{high}-{low}", {})[key] = found
    block["differences"] = differences
    items = answer_items(primary)
    block["upstream"] = upstream_aggregates(
        benchmark, items, {k: [j.verdicts[k] for j in primary] for k in outcome.judge_columns}
    )
    clusters = np.array([query_cluster(j.query) for j in primary], dtype=object)
    label_array = None
    if labels is not None:
        label_array = np.array([labels.get(j.query.id, np.nan) for j in primary], dtype=float)
    if len(outcome.judge_columns) >= 2:
        from experiments.answer.agreement import judge_agreement

        scores = {
            k: np.array([np.nan if j.verdicts[k].score is None else j.verdicts[k].score for j in primary])
            for k in outcome.judge_columns
        }
        block["agreement"] = judge_agreement(scores, clusters, label_array)
    if label_array is not None:
        from experiments.evaluate.ppi import ppi_block

        block["ppi"] = {}
        for key in outcome.judge_columns:
            judged = np.array(
                [np.nan if j.verdicts[key].score is None else j.verdicts[key].score for j in primary]
            )
            parsed = ~np.isnan(judged)
            mask = ~np.isnan(label_array) & parsed
            block["ppi"][key] = ppi_block(
                judged[parsed], mask[parsed], np.nan_to_num(label_array[parsed]), clusters[parsed]
            )
    return block


def mlflow_numbers(block: Mapping[str, Any]) -> tuple[dict[str, float], dict[str, list[float]]]:
    """`answer_acc_<judge>` (the first context's overall mean) for metrics.json's `overall`, and its
    interval for `overall_ci95`: what MLflow logs (with `_ci_lo` / `_ci_hi`) and a gate can name; under
    `official`, `answer_lafs_gain_<tier>_<judge>` beside them."""
    values: dict[str, float] = {}
    cis: dict[str, list[float]] = {}
    primary = block["contexts"][0]
    for key, by_mode in block["judges"].items():
        name = f"answer_acc_{key}".replace(".", "_")
        summary = by_mode[primary]
        if summary["mean"] is not None:
            values[name] = summary["mean"]
            if summary.get("ci95") is not None:
                cis[name] = summary["ci95"]
    for key, scored in block.get("lafs_lme_v2", {}).get("by_judge", {}).items():
        for tier, point in scored["tiers"].items():
            values[f"answer_lafs_gain_{tier}_{key}".replace(".", "_")] = point["lafs_gain"]
    return values, cis
