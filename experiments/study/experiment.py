"""`Experiment(...)`: run a study's rows and compare them, in one call (like `pt.Experiment`, ranx `compare`).

    from experiments.study import Experiment, Row
    result = Experiment(
        [Row("bm25", ("variant=bm25",)), Row("hybrid", ("variant=hybrid",))],
        suite="spark25", metrics=["P@5", "nDCG@10"], baseline="bm25", tracking=False,
    )
    result.table()                 # means per row x metric, † / ‡ = significantly better / worse
    result.per_query("P@5")        # queries x rows

Every row is an ordinary run of `experiments.run.app.run_experiment` (multirun mode), so a study goes
through the same caches, process memo and resume as `memeval-run`: a finished row is reused, not
re-run. With tracking on, the study is one MLflow parent run with a child per row. The CLI
(`python -m experiments.study study=<plan>`) is this function plus `write_report`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from experiments.compare import analysis
from experiments.configure.compose import Composer
from experiments.configure.settings import RunSettings
from experiments.configure.study_row import KEEP, StudyRow, study_composer, study_row
from experiments.names import under_root
from experiments.study.plan import Row, StudyPlan, load_plan
from experiments.track.finished_runs import (
    RunError,
    RunRecord,
    higher_is_better,
    load_mlflow_runs,
    load_run_dir,
)
from experiments.track.run_params import varying_overrides

STUDY_KEY_TAG = "memeval.study_key"
ROW_TAG = "memeval.row"  # on a study's child run: the row's name, as the study's report names it


@dataclass(frozen=True)
class StudyResult:
    """The rows, their finished runs (aligned), and the comparison against the baseline."""

    plan: StudyPlan
    runs: tuple[RunRecord, ...]
    labels: tuple[str, ...]  # each row's label in the comparison (its name)
    comparison: analysis.Comparison
    significance: pd.DataFrame  # one row per (metric, run), Holm across all of them
    run_dirs: tuple[Path, ...]
    parent_run_id: str | None = None

    @property
    def baseline(self) -> str:
        return self.comparison.baseline

    def per_query(self, metric: str | None = None) -> pd.DataFrame:
        """Per-query values of one metric (default: the primary), queries x rows."""
        return self.comparison.values[metric or self.primary]

    @property
    def primary(self) -> str:
        """The plan's primary metric, else the suite's (its suite config's `primary`), else the first."""
        return self.comparison.primary

    def table(self) -> pd.DataFrame:
        """Mean per row and metric, with † (significantly better) / ‡ (worse) than the baseline."""
        sig = self.significance
        out = pd.DataFrame(index=list(self.comparison.labels))
        for metric in self.comparison.metrics:
            part = sig[sig["metric"] == metric].set_index("run").loc[out.index]
            marks = [
                "" if not s else "†" if (d > 0) == higher_is_better(metric) else "‡"
                for s, d in zip(part["significant"], part["delta"], strict=True)
            ]
            out[metric] = [f"{m:.4f}{mark}" for m, mark in zip(part["mean"], marks, strict=True)]
        out.index.name = "run"
        return out

    def row_settings(self, row_name: str, extra: Sequence[str] = ()) -> RunSettings:
        """The run settings of a row (its name in the plan), plus `extra` overrides, tracking off: what a
        report section re-runs in-process (experiments/study/live.py)."""
        rows = {r.name: r for r in self.plan.rows}
        if row_name not in rows:
            raise KeyError(f"no row {row_name!r} in study {self.plan.name} (rows: {list(rows)})")
        row = rows[row_name]
        return row_config(self.plan, Row(row.name, (*row.overrides, *extra)), tracking=False).settings()

    def __str__(self) -> str:
        return (
            f"{self.plan.title}: {len(self.runs)} rows, baseline {self.baseline}; † / ‡ significantly "
            f"better / worse ({self.plan.stats.test}, Holm, alpha {self.plan.stats.alpha})\n"
            + self.table().to_string()
        )


@dataclass(frozen=True)
class SuiteResults:
    """A study of several suites (`suites:` in the plan): one compared StudyResult per suite id."""

    plan: StudyPlan
    results: tuple[tuple[str, StudyResult], ...]  # (suite id, its result), in the plan's order

    def __getitem__(self, suite_id: str) -> StudyResult:
        return dict(self.results)[suite_id]

    def __str__(self) -> str:
        return "\n\n".join(f"[{suite_id}] {result}" for suite_id, result in self.results)


def Experiment(  # noqa: N802 - named like pt.Experiment: one call from rows to a compared table
    rows: Sequence[Row | Mapping[str, Any]] | None,
    suite: str | Mapping[str, Any],
    metrics: Sequence[str],
    *,
    baseline: str | None = None,
    variant: str = "hybrid",
    sweep: Mapping[str, Any] | None = None,
    overrides: Sequence[str] = (),
    primary: str | None = None,
    label: str | None = None,
    test: str = "randomization",
    alpha: float = 0.05,
    seed: int = 0,
    name: str = "experiment",
    runs_dir: str | Path | None = None,
    tracking: bool | Mapping[str, Any] = False,
    cache_dir: Any = KEEP,
    progress: bool = False,
) -> StudyResult:
    """Run the rows (listed, and/or expanded from `sweep`) on `suite` and compare them to `baseline`.

    `rows`: `Row(name, overrides)` or `{"name": ..., "overrides": [...]}`. `suite`: a suite config name
    or `{"name": "beam", "path": ...}`. `tracking`: False (no MLflow), True (the run config's), or a
    `tracking` node as a mapping (`{"enabled": True, "tracker": {...}}`). Run directories go to `runs_dir`
    (default outputs/studies/<name>).
    """
    raw_rows = [
        {"name": r.name, "overrides": list(r.overrides)} if isinstance(r, Row) else r for r in rows or ()
    ]
    plan = load_plan(
        {
            "name": name,
            "suite": suite,
            "variant": variant,
            "rows": raw_rows or None,
            "sweep": sweep,
            "overrides": list(overrides),
            "baseline": baseline,
            "metrics": list(metrics),
            "primary": primary,
            "label": label,
            "stats": {"test": test, "alpha": alpha, "seed": seed},
        }
    )
    return run_plan(plan, runs_dir=runs_dir, tracking=tracking, cache_dir=cache_dir, progress=progress)


def row_config(
    plan: StudyPlan,
    row: Row,
    *,
    tracking: bool | Mapping[str, Any] = KEEP,
    cache_dir: Any = KEEP,
    progress: bool = False,
    alone: bool = False,
    composer: Composer | None = None,
) -> StudyRow:
    """The run config of one row: what `memeval-run <its overrides>` would see, with the study's settings
    (experiments/configure/study_row.py): the plan's metrics, `tracking`, `cache_dir`, `progress`, resumed,
    or measured `alone` (a plan's `measure_latency`)."""
    return study_row(
        plan.row_overrides(row), metrics=plan.metrics, tracking=tracking, cache_dir=cache_dir,
        progress=progress, alone=alone, composer=composer,
    )  # fmt: skip


def _slug(name: str) -> str:
    return re.sub(r"[^\w.+=-]+", "_", name).strip("_") or "row"


def study_key(plan: StudyPlan) -> str:
    """Identity of a study: its name and every row's overrides."""
    text = json.dumps([plan.name, [plan.row_overrides(r) for r in plan.rows]])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_plan(
    plan: StudyPlan,
    *,
    runs_dir: str | Path | None = None,
    tracking: bool | Mapping[str, Any] = KEEP,
    cache_dir: Any = KEEP,
    progress: bool = False,
) -> StudyResult | SuiteResults:
    """Compose every row's config, run each (finished rows are reused), load the runs, compare them.
    `tracking`: False (no MLflow), a `tracking` node as a mapping, else (the default) the run config's.

    A plan with several suites runs each as its own study (`plan.for_suite`), runs in <runs_dir>/<id>/.
    """
    from experiments.run.app import run_experiment

    root = Path(runs_dir) if runs_dir is not None else Path("outputs") / "studies" / plan.name
    if plan.suites:
        kwargs = dict(tracking=tracking, cache_dir=cache_dir, progress=progress)
        return SuiteResults(
            plan,
            tuple(
                (s.id, run_plan(plan.for_suite(s.id), runs_dir=under_root(root, s.id), **kwargs))
                for s in plan.suites
            ),
        )
    composer = study_composer()
    edits = dict(tracking=tracking, cache_dir=cache_dir, progress=progress, alone=plan.measure_latency)
    configs = [row_config(plan, r, composer=composer, **edits) for r in plan.rows]
    first = configs[0].tracking
    parent = _start_parent(plan, first.tracker) if first.enabled else {}
    varying = varying_overrides([plan.row_overrides(r) for r in plan.rows])
    dirs = []
    for i, (row, cfg) in enumerate(zip(plan.rows, configs, strict=True), 1):
        overrides = plan.row_overrides(row)
        print(f"[{i}/{len(plan.rows)}] {row.name}: {' '.join(overrides)}")
        run_dir = under_root(root, _slug(row.name))  # names are checked by plan.py: a last defence
        run_experiment(
            cfg.config,
            run_dir,
            multirun=True,
            share_memo=not plan.measure_latency,
            parent=parent or None,
            varying=(overrides, varying),
            run_tags={ROW_TAG: row.name, "memeval.study": plan.name},
        )
        dirs.append(run_dir)
    runs = [_load_row(d, cfg) for d, cfg in zip(dirs, configs, strict=True)]
    result = compare_rows(plan, runs, dirs, parent.get("parent_run_id"))
    if parent:
        _finish_parent(parent, plan, result)
    return result


def compare_rows(
    plan: StudyPlan,
    runs: Sequence[RunRecord],
    run_dirs: Sequence[Path] = (),
    parent_run_id: str | None = None,
) -> StudyResult:
    """The comparison of a plan's finished runs (aligned with its rows) against its baseline row."""
    labels, _ = analysis.name_runs(runs)
    renamed = [lab for lab, row in zip(labels, plan.rows, strict=True) if lab != row.name]
    if renamed:
        print(f"note: the report labels some rows differently from the plan: {renamed}")
    baseline = labels[[r.name for r in plan.rows].index(plan.baseline)]
    comp = analysis.build_comparison(
        runs, baseline=baseline, metrics=plan.metrics, label=plan.label, primary=plan.primary
    )
    stats = plan.stats
    names = [r.name for r in plan.rows]  # a reference that does not run on this suite is left out
    references = [labels[names.index(b)] for b in plan.references if b in names]
    sig = analysis.significance(
        comp, test=stats.test, alpha=stats.alpha, seed=stats.seed, unit=stats.unit, references=references
    )
    return StudyResult(plan, tuple(runs), tuple(labels), comp, sig, tuple(run_dirs), parent_run_id)


def _load_row(run_dir: Path, row: StudyRow) -> RunRecord:
    """A row's run: its own directory, or the finished run a skipped row reused (on disk, else MLflow)."""
    skipped = run_dir / "skipped.json"
    if (run_dir / "metrics.json").is_file() and not skipped.is_file():
        return load_run_dir(run_dir)
    note = json.loads(skipped.read_text()) if skipped.is_file() else {}
    if note.get("run_dir") and (Path(note["run_dir"]) / "metrics.json").is_file():
        return load_run_dir(note["run_dir"])
    if (run_dir / "metrics.json").is_file():  # the row ran here before: the same config, or stale
        record = load_run_dir(run_dir)
        if record.summary.get("config_hash") == note.get("config_hash"):
            return record
    if note.get("mlflow_run_id"):
        from experiments.run.resume import CONFIG_HASH_TAG

        found = load_mlflow_runs(tags={CONFIG_HASH_TAG: note["config_hash"]}, uri=_uri(row.tracking.tracker))
        match = [r for r in found if r.source == f"mlflow:{note['mlflow_run_id']}"]
        if match:
            return match[0]
    raise RunError(f"{run_dir} holds no finished run and names none that can be read")


def _uri(tracker: Mapping[str, Any]) -> str:
    from experiments.track.mlflow_tracker import resolve_uri

    return resolve_uri(tracker.get("uri"))


def _start_parent(plan: StudyPlan, tracker: Mapping[str, Any]) -> dict[str, str]:
    """One MLflow parent run for the study (reopened on a re-run), as a sweep has; the plan's title and
    description are its note."""
    from hydra.utils import instantiate

    from experiments.track.mlflow_tracker import open_parent_run

    info = open_parent_run(
        instantiate(tracker),
        key_tag=STUDY_KEY_TAG,
        key=study_key(plan),
        run_name=f"study {plan.name}",
        tags={"memeval.study": plan.name},
        params={
            "study": plan.name,
            "rows": str(len(plan.rows)),
            "baseline": plan.baseline,
            "metrics": ",".join(plan.metrics),
            "primary": plan.primary or "the suite's",
            "test": plan.stats.test,
            "statistics_unit": plan.stats.unit,  # auto: by conversation where each has several queries
            "references": ",".join(plan.references),
        },
        source="memeval-study",
        description="\n\n".join(t for t in (f"**{plan.title}**" if plan.title else "", plan.description) if t)
        or f"Study {plan.name}: {len(plan.rows)} rows against {plan.baseline}.",
    )
    parent, experiment = info["parent_run_id"], info["experiment_id"]
    print(f"MLflow parent run {parent} (experiment {experiment}) for study {plan.name}")
    return info


def _finish_parent(parent: Mapping[str, str], plan: StudyPlan, result: StudyResult) -> None:
    """The study's parent ends with its summary: the best row by the primary metric and the headline of
    the Holm-corrected comparison against the baseline."""
    from experiments.track.mlflow_tracker import finish_parent

    finish_parent(
        parent["uri"], parent["parent_run_id"], status="FINISHED", objective=result.primary,
        summary=holm_headline(result),
    )  # fmt: skip


def holm_headline(result: StudyResult) -> str:
    """One sentence: which rows differ from the baseline on the primary metric after Holm's correction."""
    sig = result.significance
    rows = sig[(sig["metric"] == result.primary) & (sig["run"] != result.baseline)]
    if not len(rows):
        return ""
    hits = rows[rows["significant"].astype(bool)]
    if not len(hits):
        return (
            f"No row differs from {result.baseline} on {result.primary} after Holm's correction "
            f"({len(rows)} comparison(s) on this metric, {len(sig)} in the family)."
        )
    parts = [f"{r.run} {r.delta:+.4f} (p_holm {r.p_holm:.3g})" for r in hits.itertuples()]
    return f"Against {result.baseline} on {result.primary}, after Holm's correction: {'; '.join(parts)}."
