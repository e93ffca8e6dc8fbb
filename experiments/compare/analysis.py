"""The numbers of a comparison report, computed from per-query values of finished runs.

Runs come in as `RunRecord`s (run directories or MLflow runs); this module names them, finds the
numeric parameter a sweep varied, picks the baseline, and computes every table the report shows:
means with significance marks (paired test from `experiments.evaluate.statistics`, Holm across all the
comparisons of the report), per-label deltas, per-query wins and losses, latency and provenance.
Plots and rendering live in `plots.py` and `render.py`.

Statistics resample whole clusters (each query's conversation: the per-query table's `cluster`)
wherever the suite has several queries per cluster (`unit`, see
`experiments.evaluate.statistics.resolve_unit`);
the query-level verdicts are kept beside them so a report can say which survive clustering. A study
may compare every row against several references; the Holm family then covers all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.evaluate.statistics import (
    bootstrap_ci,
    cluster_mean_ci,
    compare,
    holm,
    paired_randomization_test,
    resolve_unit,
    unit_choice,
    unit_warning,
)
from experiments.track.finished_runs import RunError, RunRecord

# Params that say where or how a run was executed, not what was measured.
_IGNORED_PARAM_PREFIXES = (
    "tracking.", "hydra", "cache_dir", "progress", "resume", "metrics", "objective", "report_label",
    "suite.report_label", "suite.primary",
)  # fmt: skip
# Encoder settings that change speed or logging, not the vectors (wherever the encoder is interpolated).
_IGNORED_PARAM_SUFFIXES = ("encoder.cache_dir", "encoder.show_progress", "encoder.batch_size")
BASELINE_VARIANTS = ("baseline", "hybrid")


@dataclass(frozen=True)
class Comparison:
    """Runs of one suite, named and aligned on the baseline's answerable queries."""

    runs: tuple[RunRecord, ...]
    labels: tuple[str, ...]  # display name per run, unique
    baseline: str
    sweep_param: str | None  # the one numeric param the runs vary, if any
    sweep_values: tuple[float, ...]  # per run, NaN when there is no sweep param
    metrics: tuple[str, ...]
    label_column: str | None  # e.g. label.ability
    values: dict[str, pd.DataFrame]  # metric -> (queries x run labels) per-query values
    primary: str = ""  # the metric the report leads with (see `primary_metric`)
    # Each compared query's cluster (the baseline run's per-query `cluster`), None for runs made before it.
    clusters: pd.Series | None = None

    @property
    def run_by_label(self) -> dict[str, RunRecord]:
        return dict(zip(self.labels, self.runs, strict=True))


def _relevant_params(run: RunRecord) -> dict[str, str]:
    return {
        k: v
        for k, v in run.params.items()
        if not k.startswith(_IGNORED_PARAM_PREFIXES) and not k.endswith(_IGNORED_PARAM_SUFFIXES)
    }


def _is_number(text: str) -> bool:
    try:
        return np.isfinite(float(text))
    except (TypeError, ValueError):
        return False


def _show(value: str) -> str:
    """A param value for a label: numbers without float noise (range() gives 0.07500000000000001)."""
    return f"{float(value):.10g}" if _is_number(value) else value


def _short(key: str) -> str:
    return ".".join(key.split(".")[-2:]) if key.startswith("stage.") else key


def varying_params(runs: Sequence[RunRecord]) -> list[str]:
    params = [_relevant_params(r) for r in runs]
    keys = sorted(set().union(*params))
    # A key only some runs have (a field added to a stage since, with its default) does not tell runs apart.
    return [k for k in keys if len({p[k] for p in params if k in p}) > 1]


def name_runs(runs: Sequence[RunRecord]) -> tuple[list[str], str | None]:
    """A unique label per run (variant, plus the params that tell same-variant runs apart), and the
    sweep parameter: the only numeric param that varies among runs of one variant."""
    labels = [r.variant for r in runs]
    numeric: set[str] = set()
    for variant in dict.fromkeys(labels):
        group = [i for i, r in enumerate(runs) if r.variant == variant]
        if len(group) < 2:
            continue
        keys = varying_params([runs[i] for i in group])
        numeric |= {k for k in keys if all(_is_number(runs[i].params.get(k, "")) for i in group)}
        for i in group:
            parts = [f"{_short(k)}={_show(runs[i].params.get(k, '–'))}" for k in keys]
            labels[i] = f"{runs[i].variant}[{', '.join(parts)}]" if parts else runs[i].variant
    seen: dict[str, int] = {}
    for i, label in enumerate(labels):  # identical configs (repeats) still need distinct names
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            labels[i] = f"{label} #{seen[label]}"
    labels = [
        f"{lab} (partial)" if r.partial is not None else lab for lab, r in zip(labels, runs, strict=True)
    ]
    return labels, (numeric.pop() if len(numeric) == 1 else None)


def drop_repeats(runs: Sequence[RunRecord]) -> tuple[list[RunRecord], list[RunRecord]]:
    """Keep the latest of runs with the same suite, code commit and measured config (a re-run replaces
    its earlier copy, as a re-run sweep would); returns (kept, dropped), in the given order. A whole run
    is kept over any partial merge (memeval-merge --allow-partial) of its config, however late.

    Within one variant only the config keys every run of it has are compared, like `name_runs`. A run
    with no recorded commit (a run directory) is never a repeat: the same config on other code is not.
    """
    params = [_relevant_params(r) for r in runs]
    latest: dict[tuple, int] = {}
    for variant in dict.fromkeys(r.variant for r in runs):
        group = [i for i, r in enumerate(runs) if r.variant == variant]
        shared = set.intersection(*(set(params[i]) for i in group))
        for i in group:
            commit = runs[i].tags.get("git_commit") or runs[i].source
            key = (variant, runs[i].suite_hash, commit, tuple(sorted((k, params[i][k]) for k in shared)))
            if key not in latest or _later(runs[i], runs[latest[key]]):
                latest[key] = i
    keep = set(latest.values())
    return [r for i, r in enumerate(runs) if i in keep], [r for i, r in enumerate(runs) if i not in keep]


def _later(run: RunRecord, kept: RunRecord) -> bool:
    """Whether `run` replaces `kept` as the one of their config: whole before partial, then the later."""
    whole, kept_whole = run.partial is None, kept.partial is None
    return whole > kept_whole or (whole == kept_whole and run.finished_at >= kept.finished_at)


def build_comparison(
    runs: Sequence[RunRecord],
    *,
    baseline: str | None = None,
    metrics: Sequence[str] | None = None,
    label: str | None = None,
    primary: str | None = None,
) -> Comparison:
    if not runs:
        raise RunError("no runs to compare")
    hashes = {r.suite_hash for r in runs}
    if len(hashes) > 1:
        found = ", ".join(f"{r.source}: {r.suite_hash[:12]}" for r in runs)
        raise RunError(f"runs are on different suite versions; a paired comparison needs one: {found}")
    labels, sweep = name_runs(runs)
    values = [
        float(r.params[sweep]) if sweep and _is_number(r.params.get(sweep, "")) else np.nan for r in runs
    ]
    if sweep:  # a sweep reads in the order of its parameter
        order = sorted(range(len(runs)), key=lambda i: (runs[i].variant, values[i]))
        runs, labels, values = (
            [runs[i] for i in order],
            [labels[i] for i in order],
            [values[i] for i in order],
        )
    chosen = _pick_baseline(runs, labels, values, baseline)
    common = [m for m in runs[0].metrics if all(m in r.per_query.columns for r in runs)]
    metrics = tuple(metrics or common)
    missing = [m for m in metrics if m not in common]
    if missing:
        raise RunError(f"metrics {missing} are not in every run's per-query table (have {common})")
    reference = runs[labels.index(chosen)].answerable().index
    frames = {}
    for metric in metrics:
        columns = {}
        for lab, run in zip(labels, runs, strict=True):
            series = run.answerable()[metric].astype(float)
            if set(series.index) != set(reference):
                raise RunError(f"run {lab} was scored on other queries than the baseline {chosen}")
            columns[lab] = series.reindex(reference)
        frames[metric] = pd.DataFrame(columns)
    label_columns = [c for c in runs[0].per_query.columns if c.startswith("label.")]
    wanted = label or runs[0].params.get("report_label") or runs[0].params.get("suite.report_label")
    label_column = f"label.{wanted}" if wanted and f"label.{wanted}" in label_columns else None
    if label_column is None and label_columns:
        label_column = label_columns[0]
    primary = primary_metric(runs[labels.index(chosen)], metrics, primary)
    base_table = runs[labels.index(chosen)].per_query
    clusters = base_table["cluster"].reindex(reference) if "cluster" in base_table.columns else None
    return Comparison(
        tuple(runs), tuple(labels), chosen, sweep, tuple(values), metrics, label_column, frames, primary,
        clusters,
    )  # fmt: skip


def primary_metric(baseline: RunRecord, metrics: Sequence[str], wanted: str | None = None) -> str:
    """The metric a report leads with: the one asked for; else the suite's own (`primary` in its
    suite config, e.g. nDCG@10 for BEAM) when the report has it; else the report's first metric."""
    if wanted:
        if wanted not in metrics:
            raise RunError(f"primary metric {wanted!r} is not among the report's metrics {list(metrics)}")
        return wanted
    suites = baseline.params.get("suite.primary")
    return suites if suites in metrics else metrics[0]


def _pick_baseline(runs, labels, values, wanted: str | None) -> str:
    if wanted:
        if wanted in labels:
            return wanted
        matches = [lab for lab, r in zip(labels, runs, strict=True) if r.variant == wanted]
        if matches:
            return matches[0]
        raise RunError(f"baseline {wanted!r} is none of the runs: {labels}")
    if any(np.isfinite(values)):  # a sweep: its lowest setting (e.g. boost weight 0 = the stage's off)
        return labels[int(np.nanargmin(values))]
    for variant in BASELINE_VARIANTS:
        for lab, run in zip(labels, runs, strict=True):
            if run.variant == variant:
                return lab
    return labels[0]


def comparisons(
    comp: Comparison,
    references: Sequence[str] = (),
    *,
    test: str = "randomization",
    alpha: float = 0.05,
    seed: int = 0,
    unit: str = "auto",
) -> pd.DataFrame:
    """Every run against each reference (the baseline first, then `references`) on every metric: one row
    per (reference, metric, run), Holm across every comparison in the table (a reference against itself
    is no comparison).

    Columns from `statistics.compare` (mean, CI, delta with CI, p_value, wins/ties/losses, n_clusters,
    design_effect) plus `reference`; p_holm and significant over the whole family. When the statistics
    are by cluster, p_query / p_holm_query / significant_query hold the query-level verdicts of the
    same family, so a report can say which differences survive clustering. `.attrs`: test, alpha,
    unit, n_clusters, warning, comparisons (the family's size) and family (what it covers).
    """
    refs = list(dict.fromkeys([comp.baseline, *references]))
    unknown = [r for r in refs if r not in comp.labels]
    if unknown:
        raise RunError(f"references {unknown} are not among the runs {list(comp.labels)}")
    clusters = comp.clusters
    n = len(comp.values[comp.metrics[0]])
    labels = None if clusters is None else clusters.to_numpy()
    chosen, reason = unit_choice(unit, labels, n)
    parts = []
    for reference in refs:
        for metric in comp.metrics:
            table = compare(
                comp.values[metric], reference, test=test, alpha=alpha, seed=seed,  # type: ignore[arg-type]
                clusters=clusters, unit=chosen,
            )  # fmt: skip
            part = table.reset_index().assign(metric=metric, reference=reference)
            if chosen == "cluster":
                by_query = compare(comp.values[metric], reference, test=test, alpha=alpha, seed=seed)  # type: ignore[arg-type]
                part["p_query"] = by_query["p_value"].to_numpy()
            parts.append(part)
    table = pd.concat(parts, ignore_index=True)
    rows = table["run"] != table["reference"]
    table.loc[rows, "p_holm"] = holm(table.loc[rows, "p_value"].to_numpy())
    table["significant"] = rows & (table["p_holm"] < alpha)
    if chosen == "cluster":
        table["p_holm_query"] = np.nan
        table.loc[rows, "p_holm_query"] = holm(table.loc[rows, "p_query"].to_numpy())
        table["significant_query"] = rows & (table["p_holm_query"] < alpha)
    n_clusters = int(table["n_clusters"].iloc[0])
    family = (
        f"{int(rows.sum())} comparisons: every run against "
        + (f"each of {len(refs)} references ({', '.join(refs)})" if len(refs) > 1 else f"{refs[0]}")
        + f" on {len(comp.metrics)} metric(s)"
    )
    table.attrs.update(
        test=test, alpha=alpha, correction="holm", comparisons=int(rows.sum()), family=family,
        references=refs, unit=chosen, unit_reason=reason,
        n_clusters=n_clusters if clusters is not None else 0,
        warning=unit_warning(chosen, labels, n),
    )  # fmt: skip
    return table


def significance(
    comp: Comparison,
    *,
    test: str = "randomization",
    alpha: float = 0.05,
    seed: int = 0,
    unit: str = "auto",
    references: Sequence[str] = (),
) -> pd.DataFrame:
    """Every run against the baseline on every metric, one row per (metric, run), Holm across all rows
    (and across the comparisons with the other `references`, when there are any: see `comparisons`).

    Columns from `statistics.compare` (mean, CI, delta with CI, p_value, wins/ties/losses), with
    p_holm and significant recomputed over the whole report's family of comparisons.
    """
    family = comparisons(comp, references, test=test, alpha=alpha, seed=seed, unit=unit)
    table = family[family["reference"] == comp.baseline].drop(columns="reference").reset_index(drop=True)
    table.attrs.update(family.attrs)
    return table


def by_label(
    comp: Comparison, metric: str, *, alpha: float = 0.05, seed: int = 0, unit: str = "auto"
) -> pd.DataFrame:
    """Mean, CI and delta vs the baseline of `metric` per label value per run (long format), with a
    paired randomization test per cell and Holm across every (label, run) cell of the table. Within a
    label value, whole clusters are resampled and sign-flipped where `unit` resolves to clusters there
    (n_clusters: how many carry the cell)."""
    frame = comp.values[metric]
    if comp.label_column is None:
        groups = {"all": frame.index}
    else:
        labels = comp.run_by_label[comp.baseline].per_query[comp.label_column].reindex(frame.index)
        groups = {str(k): idx for k, idx in frame.groupby(labels.astype(str)).groups.items()}
    rows = []
    for value, index in sorted(groups.items()):
        part = frame.loc[index]
        clusters = None if comp.clusters is None else comp.clusters.reindex(part.index).to_numpy()
        clustered = resolve_unit(unit, clusters, len(part)) == "cluster"
        groups_of = clusters if clustered else None
        n_clusters = len(set(clusters)) if clustered else len(part)
        for lab in comp.labels:
            values_of = part[lab].to_numpy()  # a mean's CI: calibrated for few clusters at cluster level
            low, high = (
                cluster_mean_ci(values_of, groups_of) if clustered else bootstrap_ci(values_of, seed=seed)
            )
            delta = float(part[lab].mean() - part[comp.baseline].mean())
            values, base = part[lab].to_numpy(), part[comp.baseline].to_numpy()
            p_value = (
                np.nan
                if lab == comp.baseline
                else paired_randomization_test(values, base, seed=seed, clusters=groups_of)
            )
            rows.append(dict(label=value, run=lab, n=len(part), mean=float(part[lab].mean()),
                             ci_low=low, ci_high=high, delta=delta, p_value=p_value,
                             n_clusters=n_clusters))  # fmt: skip
    table = pd.DataFrame(rows)
    tested = table["run"] != comp.baseline
    table["p_holm"] = np.nan
    if tested.any():
        table.loc[tested, "p_holm"] = holm(table.loc[tested, "p_value"].to_numpy())
    table["significant"] = tested & (table["p_holm"] < alpha)
    return table


def biggest_changes(comp: Comparison, metric: str, run: str, n: int = 10) -> pd.DataFrame:
    """The queries `run` gained most and lost most on vs the baseline, with their label."""
    frame = comp.values[metric]
    delta = (frame[run] - frame[comp.baseline]).rename("delta")
    table = pd.DataFrame({"baseline": frame[comp.baseline], "run": frame[run], "delta": delta})
    if comp.label_column:
        per_query = comp.run_by_label[comp.baseline].per_query
        table.insert(0, "label", per_query[comp.label_column].reindex(frame.index).astype(str))
    gains = table[table["delta"] > 0].sort_values("delta", ascending=False, kind="stable").head(n)
    losses = table[table["delta"] < 0].sort_values("delta", kind="stable").head(n)
    return pd.concat([gains, losses])


def latency(comp: Comparison) -> pd.DataFrame:
    """p50 / p95 of per-query latency per run, overall and per stage (ms.* columns)."""
    rows = {}
    for lab, run in zip(comp.labels, comp.runs, strict=True):
        frame = run.per_query
        row = {
            "p50 ms": _measured_percentile(frame["latency_ms"], 50),
            "p95 ms": _measured_percentile(frame["latency_ms"], 95),
        }
        for column in (c for c in frame.columns if c.startswith("ms.")):
            row[f"{column.removeprefix('ms.')} p50"] = _measured_percentile(frame[column], 50)
        hit = run.summary.get("prefix_cache_hit")
        row["prefix cache"] = "–" if hit is None else "hit" if hit else "miss"
        rows[lab] = row
    table = pd.DataFrame.from_dict(rows, orient="index")
    first = ["p50 ms", "p95 ms", "prefix cache"]
    return table[first + [c for c in table.columns if c not in first]]


def _measured_percentile(values: pd.Series, q: float) -> float:
    """The q-th percentile of the latencies measured in the run; NaN (shown "–") when none was: work
    reused from a cache is not timed (retrieval/pipeline.py), so a reused run's column is all NaN."""
    measured = values.to_numpy(dtype=float)
    measured = measured[~np.isnan(measured)]
    return float(np.percentile(measured, q)) if measured.size else float("nan")


# Folders a run directory sits under wherever it was written (Hydra's run and sweep roots, a study's runs).
_RUN_ROOTS = ("outputs", "multirun")


def portable_source(source: str, cwd: Path | None = None) -> str:
    """A run's source as a report prints it, with no absolute path of the machine that wrote it.

    Reports are committed and read elsewhere: a run directory is shown relative to the working directory
    when under it, else from its last `outputs/` or `multirun/` folder on (a run another checkout
    made and a study reused), else by its folder name. `mlflow:<id>` and relative paths are unchanged."""
    path = Path(source)
    if not path.is_absolute():
        return source
    try:
        return path.relative_to((cwd or Path.cwd()).resolve()).as_posix()
    except ValueError:
        pass
    roots = [i for i, part in enumerate(path.parts) if part in _RUN_ROOTS]
    return Path(*path.parts[roots[-1] :]).as_posix() if roots else f"…/{path.name}"


def provenance(comp: Comparison) -> pd.DataFrame:
    rows = {}
    for lab, run in zip(comp.labels, comp.runs, strict=True):
        rows[lab] = {
            "source": portable_source(run.source),
            "suite": run.suite_name,
            "suite hash": run.suite_hash[:12] or "not recorded",
            "model revisions": run.tags.get("model_revisions") or _model_from_params(run),
            "git commit": (run.tags.get("git_commit") or "not recorded")[:10],
            "memeval": run.tags.get("memeval_version", "not recorded"),
            "pipeline": run.tags.get("pipeline") or " -> ".join(_stages(run)),
        }
    return pd.DataFrame.from_dict(rows, orient="index")


def _model_from_params(run: RunRecord) -> str:
    uses_encoder = any(
        run.params.get(f"stage.{s}._target_", "").endswith("DenseRetriever") for s in _stages(run)
    )
    model = run.params.get("encoder.model")
    return f"{model} (revision not recorded)" if model and uses_encoder else "none"


def _stages(run: RunRecord) -> list[str]:
    text = run.params.get("variant.stages", "")
    return [s.strip(" '\"") for s in text.strip("[]").split(",") if s.strip()]
