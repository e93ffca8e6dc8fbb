"""`memeval-gate` / `python -m experiments.gate`: the CI regression gate, a run against a committed baseline.

    python -m experiments.gate spark25 hybrid                  # run the suite + variant, then gate
    python -m experiments.gate beam100k hybrid --run-dir outputs/beam/hybrid/...   # gate a finished run
    python -m experiments.gate spark25 hybrid --refresh        # rewrite the baseline, on purpose

Sits after `experiments.run` in the data flow. The gate config (experiments/gates/<gate>.yaml) names the
gated metrics, their absolute floors, the largest tolerated drop of the mean, and the test's alpha.
The baseline (reports/baselines/<gate>-<variant>.json) holds the per-query values of the gated
metrics plus the suite hash, config and commit they came from. The gate fails (exit 1) when a mean
is under its floor, drops by more than the tolerance, or drops significantly (paired test from
`experiments.evaluate.statistics`, Holm across the gated metrics); it never writes its own baseline.
Exit 2: the gate cannot judge (baseline for another suite version, missing files, bad config).

The gate knows its power: for each gated metric it computes the minimum detectable effect (MDE) of the
paired test at the suite's size and clustering, alpha and `power` (80%), from the committed baseline's
per-query values, and refuses (exit 2) a tolerance smaller than that unless the gate config says
`allow_tolerance_below_mde: true` (or `--allow-tolerance-below-mde`). Its statistics resample whole
clusters (each query's conversation, the per-query table's `cluster`) wherever the suite has several
queries per cluster (`unit: auto|cluster|query`), and the verdict states the CI of the paired difference.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from experiments import PROJECT_ROOT
from experiments.answer.metric_names import is_answer_metric
from experiments.compare.render import code, md
from experiments.configure.compose import CONF_DIR, compose_config
from experiments.configure.nodes import target_defaults
from experiments.evaluate.metrics import over_own_queries, parse_metric
from experiments.evaluate.statistics import (
    UNITS,
    compare,
    holm,
    minimum_detectable_effect,
    resolve_unit,
    smallest_p,
)
from experiments.evaluate.table import query_cluster
from experiments.exit_codes import ArgumentParser, console_script
from experiments.gate_costs import CostCheck, CostRule, check_costs, cost_verdict_lines, parse_cost_rules
from experiments.track.finished_runs import RunError, RunRecord, higher_is_better, load_run_dir
from experiments.track.mlflow_tracker import flatten, git_commit
from retrieval.encoder import ModelNotFoundError

# The gate configs: read with yaml here (no Hydra config group), shipped beside this module.
GATES_DIR = Path(__file__).with_name("gates")
BASELINE_ENV = "MEMEVAL_BASELINE_DIR"
# Config keys that define what was measured; a baseline records them and the gate shows differences.
CONFIG_PREFIXES = ("suite.", "variant.", "stage.", "encoder.model", "depth")
# ...except where the suite sits on this machine (its content hash identifies it) and encoder settings
# that change speed or logging, not the vectors.
# `_target_` names where a class lives, not what it measures: a class moved to another module (a refactor)
# is no drift; a change of its code is the baseline's commit's business.
CONFIG_IGNORED_SUFFIXES = (
    "._target_",
    "suite.path",
    "encoder.cache_dir",
    "encoder.show_progress",
    "encoder.batch_size",
    "export_dir",
)
MAX_LISTED_QUERIES = 50


class GateError(RuntimeError):
    """The gate cannot judge this run (exit 2), as opposed to judging it a regression (exit 1)."""


@dataclass(frozen=True)
class GateConfig:
    name: str
    overrides: tuple[str, ...]  # Hydra overrides selecting the suite when the gate runs it itself
    metrics: tuple[str, ...]
    floors: Mapping[str, float]
    variant_floors: Mapping[str, Mapping[str, float]]  # stricter floors for stronger variants
    tolerance: Mapping[str, float]  # largest allowed drop of the mean, absolute, per metric
    alpha: float = 0.05
    test: str = "randomization"
    n_resamples: int = 10_000
    seed: int = 0
    unit: str = "auto"  # what the statistics resample: auto | cluster | query (evaluate.statistics)
    power: float = 0.8  # the power at which the minimum detectable effect is computed
    # A variant's per-query values are assumed to correlate this much with the baseline's when the MDE
    # is computed from the baseline alone (0.5: the paired difference varies as much as the values).
    mde_correlation: float = 0.5
    # A tolerance below the MDE claims more than the suite can show; allowed only when said so.
    allow_tolerance_below_mde: bool = False
    # Too few clusters for any significant cluster-level result: refused unless said so (judged then by
    # floors and tolerance alone).
    allow_few_clusters: bool = False
    cost_rules: tuple[CostRule, ...] = ()  # bounds on tokens returned and latency (experiments/gate_costs.py)

    def floor(self, metric: str, variant: str) -> float | None:
        return self.variant_floors.get(variant, {}).get(metric, self.floors.get(metric))

    @classmethod
    def load(cls, name_or_path: str) -> GateConfig:
        path = Path(name_or_path)
        if not path.suffix:
            path = GATES_DIR / f"{name_or_path}.yaml"
        if not path.is_file():
            known = sorted(p.stem for p in GATES_DIR.glob("*.yaml"))
            raise GateError(f"no gate config {path}; known gates: {', '.join(known)}")
        raw = yaml.safe_load(path.read_text()) or {}
        metrics = tuple(raw.get("metrics") or ())
        for metric in metrics:
            if not is_answer_metric(metric):  # an answer stage's judge column is gated as a metric too
                parse_metric(metric)
        tolerance = raw.get("tolerance", 0.0)
        if not isinstance(tolerance, Mapping):
            tolerance = {m: float(tolerance) for m in metrics}
        floors = dict(raw.get("floors") or {})
        variant_floors = {v: dict(f) for v, f in (raw.get("variant_floors") or {}).items()}
        named = set(floors) | set(tolerance) | {m for f in variant_floors.values() for m in f}
        unknown = named - set(metrics)
        if not metrics or unknown:
            raise GateError(f"{path}: gate needs `metrics`; floors/tolerance name ungated {sorted(unknown)}")
        unit = str(raw.get("unit", "auto"))
        if unit not in UNITS:
            raise GateError(f"{path}: `unit` must be one of {', '.join(UNITS)}, got {unit!r}")
        for key in ("allow_tolerance_below_mde", "allow_few_clusters"):
            if not isinstance(raw.get(key, False), bool):
                raise GateError(f"{path}: `{key}` must be true or false, got {raw[key]!r}")
        return cls(
            name=str(raw.get("name", path.stem)),
            overrides=tuple(raw.get("overrides") or ()),
            metrics=metrics,
            floors={m: float(v) for m, v in floors.items()},
            variant_floors={v: {m: float(x) for m, x in f.items()} for v, f in variant_floors.items()},
            tolerance={m: float(tolerance.get(m, 0.0)) for m in metrics},
            alpha=float(raw.get("alpha", 0.05)),
            test=str(raw.get("test", "randomization")),
            n_resamples=int(raw.get("n_resamples", 10_000)),
            seed=int(raw.get("seed", 0)),
            unit=unit,
            power=float(raw.get("power", 0.8)),
            mde_correlation=float(raw.get("mde_correlation", 0.5)),
            allow_tolerance_below_mde=raw.get("allow_tolerance_below_mde", False),
            allow_few_clusters=raw.get("allow_few_clusters", False),
            cost_rules=parse_cost_rules(raw.get("cost_rules"), str(path)),
        )


@dataclass(frozen=True)
class Baseline:
    """Per-query values of the gated metrics on one suite version, and what produced them."""

    gate: str
    variant: str
    suite: str
    suite_hash: str
    git_commit: str
    created: str
    command: str
    source: str
    config: Mapping[str, str]
    means: Mapping[str, float]
    per_query: Mapping[str, Mapping[str, float]]  # metric -> query id -> value
    # query id -> cluster (the per-query table's `cluster`); None for baselines recorded before it.
    clusters: Mapping[str, str] | None = None

    @classmethod
    def from_run(cls, run: RunRecord, gate: GateConfig, *, command: str) -> Baseline:
        frame = _gated_values(run, gate.metrics)
        clusters = (
            run.per_query["cluster"].reindex(frame.index) if "cluster" in run.per_query.columns else None
        )
        return cls(
            gate=gate.name,
            variant=run.variant,
            suite=run.suite_name,
            suite_hash=run.suite_hash,
            git_commit=run.tags.get("git_commit") or git_commit(),
            created=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            command=command,
            source=run.source,
            config=_measured_config(run.params),
            means={m: float(frame[m].mean()) for m in gate.metrics},
            per_query={m: {q: float(v) for q, v in frame[m].dropna().items()} for m in gate.metrics},
            clusters=None if clusters is None else {str(q): str(c) for q, c in clusters.items()},
        )

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1) + "\n")
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> Baseline:
        if not path.is_file():
            raise GateError(f"no baseline at {path}; create it on purpose with --refresh")
        return cls(**json.loads(path.read_text()))


@dataclass(frozen=True)
class MetricCheck:
    metric: str
    baseline: float
    run: float
    delta: float
    delta_ci: tuple[float, float]
    p_value: float
    p_holm: float
    floor: float | None
    tolerance: float
    wins: int
    ties: int
    losses: int
    failures: tuple[str, ...]
    mde: float = float("nan")  # minimum detectable effect at the gate's alpha and power (from the baseline)
    design_effect: float = 1.0  # of the paired differences (1 at query level)
    min_p: float = float("nan")  # the smallest p-value the test can give on these differences
    rules: tuple[str, ...] = ()  # the rules that failed, in `failures`' order: floor, tolerance, test


@dataclass(frozen=True)
class GateResult:
    gate: GateConfig
    baseline: Baseline
    baseline_path: Path
    run: RunRecord
    checks: tuple[MetricCheck, ...]
    regressed: pd.DataFrame  # metric, query_id, label, baseline, run, delta (worst first)
    config_changes: Mapping[str, tuple[str | None, str | None]] = field(default_factory=dict)
    unit: str = "query"  # what the statistics resampled: cluster | query
    n_clusters: int = 0  # clusters among the gated queries (0: not known)
    warning: str | None = None  # too few clusters, or clusters not known
    costs: tuple[CostCheck, ...] = ()

    @property
    def passed(self) -> bool:
        return not any(c.failures for c in self.checks) and all(c.passed for c in self.costs)


def _gated_values(run: RunRecord, metrics: Sequence[str]) -> pd.DataFrame:
    missing = [m for m in metrics if m not in run.per_query.columns]
    if missing:
        raise GateError(f"run {run.source} has no per-query {', '.join(missing)}; add it to `metrics`")
    # Each metric over its own queries: the answerable ones, harm@k those with must-not judgements (NaN
    # elsewhere), so the frame is their union and a metric's values are its column without NaN.
    own = [m for m in metrics if over_own_queries(m)]
    frame = run.answerable()[[m for m in metrics if m not in own]].astype(float)
    if own:
        judged = run.per_query[own].astype(float).dropna(how="all")
        frame = frame.join(judged, how="outer") if len(frame.columns) else judged
        frame = frame.reindex(run.per_query.index[run.per_query.index.isin(frame.index)])
    return frame[list(metrics)]


def gated_clusters(run: RunRecord | None, baseline: Baseline, index: pd.Index) -> pd.Series | None:
    """Each gated query's cluster: the run's per-query `cluster`, else the baseline's; None when neither
    records it (runs and baselines made before clusters were recorded: the statistics are per query)."""
    if run is not None and "cluster" in run.per_query.columns:
        return run.per_query["cluster"].reindex(index)
    if baseline.clusters:
        return pd.Series(dict(baseline.clusters), dtype=object).reindex(index)
    return None


def detectable_effects(gate: GateConfig, baseline: Baseline, clusters: pd.Series | None) -> dict[str, float]:
    """The minimum detectable effect of each gated metric, from the baseline's per-query values at the
    gate's statistics unit, power and alpha / (number of gated metrics) (Holm's strictest step)."""
    out = {}
    for metric in gate.metrics:
        values = pd.Series(baseline.per_query[metric], dtype=float)
        groups = None if clusters is None else clusters.reindex(values.index).to_numpy()
        unit = resolve_unit(gate.unit, groups, len(values))
        out[metric] = minimum_detectable_effect(
            values.to_numpy(),
            groups if unit == "cluster" else None,
            alpha=gate.alpha / len(gate.metrics),
            power=gate.power,
            correlation=gate.mde_correlation,
        )
    return out


def refuse_undetectable_tolerance(gate: GateConfig, mdes: Mapping[str, float]) -> None:
    """Exit 2 (GateError) when a tolerance is below what the suite can detect, unless the gate allows it."""
    small = [m for m in gate.metrics if np.isfinite(mdes[m]) and gate.tolerance[m] < mdes[m]]
    if small and not gate.allow_tolerance_below_mde:
        listed = "; ".join(f"{m}: tolerance {gate.tolerance[m]:.4f} < MDE {mdes[m]:.4f}" for m in small)
        raise GateError(
            f"gate {gate.name!r} asks for a tolerance smaller than this suite can detect at "
            f"{gate.power:.0%} power and alpha {gate.alpha} ({listed}). Raise the tolerance to the MDE, or "
            "say `allow_tolerance_below_mde: true` in the gate config (or pass --allow-tolerance-below-mde) "
            "to fail on drops the suite cannot tell from noise."
        )


def refuse_untestable_clusters(gate: GateConfig, baseline: Baseline, clusters: pd.Series | None) -> None:
    """Exit 2 (GateError) when the statistics are by cluster and so few clusters carry them that no
    sign-flip p-value can pass Holm's strictest step (2 / 2**G >= alpha / metrics: G <= 5 at alpha
    0.05 with one metric): the gate cannot detect a regression by test, unless the gate allows it."""
    values = pd.Series(baseline.per_query[gate.metrics[0]], dtype=float)
    groups = None if clusters is None else clusters.reindex(values.index).to_numpy()
    if resolve_unit(gate.unit, groups, len(values)) != "cluster" or gate.allow_few_clusters:
        return
    n_clusters = len(set(groups))
    smallest, strictest = smallest_p(n_clusters, n_resamples=gate.n_resamples), gate.alpha / len(gate.metrics)
    if smallest >= strictest:
        raise GateError(
            f"gate {gate.name!r} cannot judge a regression by its test: its statistics are by cluster and "
            f"only {n_clusters} clusters carry them, so the smallest p-value the sign-flip test can give is "
            f"2/2^{n_clusters} = {smallest:.3g}, not below alpha / {len(gate.metrics)} metric(s) = "
            f"{strictest:.3g}: no regression can be significant. Add conversations, or say "
            "`allow_few_clusters: true` in the gate config (or pass --allow-few-clusters) to judge by the "
            "floors and tolerance alone."
        )


def check_run(run: RunRecord, baseline: Baseline, gate: GateConfig, baseline_path: Path) -> GateResult:
    """Judge `run` against `baseline`: floors, tolerated drop, and a significant drop after Holm."""
    if run.suite_hash != baseline.suite_hash:
        raise GateError(
            f"suite hash mismatch: baseline {baseline_path} was recorded on suite {baseline.suite!r} "
            f"hash {baseline.suite_hash[:12]}, this run is on {run.suite_name!r} hash {run.suite_hash[:12]}. "
            "The baseline is for another suite version: refresh it on purpose (--refresh) if the suite "
            "change is intended."
        )
    frame = _gated_values(run, gate.metrics)
    reference_index = pd.Index(
        list(dict.fromkeys(q for values in baseline.per_query.values() for q in values)), dtype=object
    )
    clusters = gated_clusters(run, baseline, reference_index)
    mdes = detectable_effects(gate, baseline, clusters)
    refuse_untestable_clusters(gate, baseline, clusters)
    refuse_undetectable_tolerance(gate, mdes)
    tables = {}
    for metric in gate.metrics:
        if metric not in baseline.per_query:
            raise GateError(f"baseline {baseline_path} has no {metric}; refresh it with --refresh")
        reference = pd.Series(baseline.per_query[metric], dtype=float)
        if set(reference.index) != set(frame[metric].dropna().index):
            raise GateError(
                f"{metric}: the run's queries differ from the baseline's despite equal suite hash"
            )
        pair = {"baseline": reference, "run": frame[metric].reindex(reference.index)}
        table = compare(
            pair, "baseline", test=gate.test, alpha=gate.alpha, n_resamples=gate.n_resamples,
            seed=gate.seed, clusters=None if clusters is None else clusters.reindex(reference.index),
            unit=gate.unit,
        )  # fmt: skip
        tables[metric] = table.loc["run"]
    unit, n_clusters, warning = table.attrs["unit"], int(table.attrs["n_clusters"]), table.attrs["warning"]
    if clusters is None:
        n_clusters, warning = 0, "the run and the baseline record no clusters: statistics are per query"
    p_holm = holm(np.array([tables[m]["p_value"] for m in gate.metrics]))
    checks = []
    for metric, adjusted in zip(gate.metrics, p_holm, strict=True):
        row = tables[metric]
        base_mean, run_mean = float(row["mean"] - row["delta"]), float(row["mean"])
        floor, tolerance = gate.floor(metric, run.variant), gate.tolerance[metric]
        failures, rules = [], []
        # For a lower-is-better metric (harm@k: must-not memories returned) a rise is the regression and
        # its floor is a ceiling.
        sign = 1.0 if higher_is_better(metric) else -1.0
        worse = "dropped" if sign > 0 else "rose"
        if floor is not None and sign * (run_mean - floor) < 0:
            side = "under the floor" if sign > 0 else "over the ceiling"
            failures.append(f"{metric} mean {run_mean:.4f} is {side} {floor:.4f}")
            rules.append("floor" if sign > 0 else "ceiling")
        if sign * (base_mean - run_mean) > tolerance + 1e-12:
            failures.append(
                f"{metric} mean {worse} by {abs(base_mean - run_mean):.4f} (tolerance {tolerance:.4f})"
            )
            rules.append("tolerance")
        # The paired test is two-sided; only a change for the worse fails (one-sided at alpha/2:
        # conservative for CI).
        if sign * row["delta"] < 0 and adjusted < gate.alpha:
            change = "drop" if sign > 0 else "rise"
            failures.append(
                f"{metric} {change} is significant: p = {adjusted:.4g} after Holm (alpha {gate.alpha})"
            )
            rules.append("significant")
        checks.append(
            MetricCheck(
                metric, base_mean, run_mean, float(row["delta"]),
                (float(row["delta_ci_low"]), float(row["delta_ci_high"])),
                float(row["p_value"]), float(adjusted), floor, tolerance,
                int(row["wins"]), int(row["ties"]), int(row["losses"]), tuple(failures),
                mdes[metric], float(row["design_effect"]), float(row["min_p"]), tuple(rules),
            )
        )  # fmt: skip
    return GateResult(
        gate, baseline, baseline_path, run, tuple(checks), _regressed(run, baseline, frame, gate.metrics),
        _config_changes(baseline.config, run.params), unit, n_clusters, warning,
        check_costs(gate.cost_rules, run.summary.get("overall") or {}, run.source),
    )  # fmt: skip


def _regressed(
    run: RunRecord, baseline: Baseline, frame: pd.DataFrame, metrics: Sequence[str]
) -> pd.DataFrame:
    labels = [c for c in run.per_query.columns if c.startswith("label.")]
    rows = []
    for metric in metrics:
        before = pd.Series(baseline.per_query[metric], dtype=float)
        after = frame[metric].reindex(before.index)
        sign = 1.0 if higher_is_better(metric) else -1.0
        worse = before.index[sign * (after - before) < -1e-12]
        for qid in worse:
            label = " / ".join(str(run.per_query.at[qid, c]) for c in labels[:1])
            rows.append((metric, qid, label, before[qid], after[qid], after[qid] - before[qid]))
    columns = ["metric", "query_id", "label", "baseline", "run", "delta"]
    return pd.DataFrame(rows, columns=columns).sort_values(["metric", "delta", "query_id"], ignore_index=True)


def _measured_config(params: Mapping[str, str]) -> dict[str, str]:
    return {
        k: v
        for k, v in params.items()
        if k.startswith(CONFIG_PREFIXES) and not k.endswith(CONFIG_IGNORED_SUFFIXES)
    }


def _config_changes(before: Mapping[str, str], params: Mapping[str, str]) -> dict:
    """Settings that differ from the baseline's. A key the baseline lacks whose value here is its class's
    default is no change: a field added to a stage after the baseline was recorded, which the baseline's
    run computed with all the same (issue 41: `stage.bm25.channel: (absent) → bm25`)."""
    after = _measured_config(params)
    before = _measured_config(before)
    return {
        k: (before.get(k), after.get(k))
        for k in sorted(set(before) | set(after))
        if before.get(k) != after.get(k)
        and not (k not in before and after.get(k) == _class_default(params, k))
    }


def _class_default(params: Mapping[str, str], key: str) -> str | None:
    """The default of `key`'s field, as the run's params write it, in the class the nearest `_target_` above
    it names (`stage.bm25.channel` -> BM25Retriever.channel); None when no class there declares one."""
    parts = key.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        prefix = ".".join(parts[:cut])
        target = params.get(f"{prefix}._target_")
        if target is None:
            continue
        try:
            defaults = target_defaults(target)
        except (ImportError, AttributeError, ValueError):  # a class the code no longer has
            return None
        return flatten(defaults, f"{prefix}.").get(key)
    return None


def _literal(value: object) -> str:
    """Data (a name, id, label, path, config value) as Markdown that renders exactly as the text: the
    report's code span (experiments.compare.render.code: nothing inside is emphasis, a link or HTML), or,
    for text holding a backtick, its escaped text with `_` and `~` escaped too; `|` escaped, because GitHub
    splits a table row on it even inside a code span. Every piece of data in the summary goes through it."""
    text = code(value)
    if not text.startswith("`"):
        text = _EMPHASIS.sub(r"\\\1", text)
    return text.replace("|", "\\|")


_EMPHASIS = re.compile(r"([_~])")


def summary_markdown(result: GateResult) -> str:
    """The verdict as Markdown: for the console, a file, and the CI step summary. Names, ids, labels and
    config values come from suites, configs and the command line: each is shown literally (`_literal`)."""
    gate, base = result.gate, result.baseline
    verdict = "PASS" if result.passed else "FAIL"
    n = len(next(iter(base.per_query.values())))
    lines = [
        f"## memeval gate {_literal(gate.name)} · variant {_literal(result.run.variant)}: **{verdict}**",
        "",
        f"Baseline {_literal(result.baseline_path)}: variant {_literal(base.variant)}, "
        f"commit {_literal(base.git_commit[:10])}, suite {_literal(base.suite)} "
        f"hash {_literal(base.suite_hash[:12])}, {n} answerable queries, recorded {_literal(base.created)}.",
        f"Run: {_literal(result.run.source)}.",
        "",
        f"| metric | baseline | run | Δ | 95% CI of Δ | p ({gate.test}) | p Holm | floor | tolerance "
        f"| MDE ({gate.power:.0%} power) | design effect | W/T/L | |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in result.checks:
        floor = "–" if c.floor is None else f"{c.floor:.3f}"
        lines.append(
            f"| {_literal(c.metric)} | {c.baseline:.4f} | {c.run:.4f} | {c.delta:+.4f} | "
            f"[{c.delta_ci[0]:+.4f}, {c.delta_ci[1]:+.4f}] | {_p(c.p_value)} | {_p(c.p_holm)} | {floor} | "
            f"{c.tolerance:.3f} | {_p(c.mde)} | {_p(round(c.design_effect, 2))} "
            f"| {c.wins}/{c.ties}/{c.losses} | {'fail' if c.failures else 'ok'} |"
        )
    lines += ["", *verdict_lines(result), *cost_verdict_lines(result.costs, result.run.summary)]
    failures = [f for c in result.checks for f in c.failures]
    if failures:
        lines += ["", "Failures:", *[f"- {md(f)}" for f in failures]]
    lines += ["", f"W/T/L: queries where the run is better / equal / worse than the baseline. Test: paired "
              f"{gate.test}, two-sided, seed {gate.seed}; Holm across the {len(gate.metrics)} gated "
              "metric(s); "
              f"a significant result fails only when the mean dropped. {_unit_note(result)} MDE: the "
              f"smallest true drop the paired test detects with {gate.power:.0%} power at alpha "
              f"{gate.alpha}/{len(gate.metrics)}, from the baseline's per-query values (a variant assumed "
              f"to correlate {gate.mde_correlation} with it per query)."]  # fmt: skip
    regressed = result.regressed
    if len(regressed):
        lines += ["", f"Queries that regressed ({len(regressed)}, worst first):", "",
                  "| metric | query | label | baseline | run | Δ |", "|---|---|---|---|---|---|"]  # fmt: skip
        for r in regressed.head(MAX_LISTED_QUERIES).itertuples():
            label = _literal(r.label) if r.label else ""
            lines.append(
                f"| {_literal(r.metric)} | {_literal(r.query_id)} | {label} | {r.baseline:.3f} | {r.run:.3f} "
                f"| {r.delta:+.3f} |"
            )
        if len(regressed) > MAX_LISTED_QUERIES:
            lines.append(f"| … {len(regressed) - MAX_LISTED_QUERIES} more | | | | | |")
    else:
        lines += ["", "No query regressed."]
    if result.run.variant != base.variant:
        lines += [
            "",
            f"Note: variant {_literal(result.run.variant)} is gated against a baseline of "
            f"{_literal(base.variant)}.",
        ]
    if result.config_changes:
        lines += ["", "Config differs from the baseline's (not a failure by itself):"]
        lines += [
            f"- {_literal(k)}: {'(absent)' if a is None else _literal(a)} → "
            f"{'(absent)' if b is None else _literal(b)}"
            for k, (a, b) in result.config_changes.items()
        ]
    return "\n".join(lines) + "\n"


def verdict_lines(result: GateResult) -> list[str]:
    """One sentence per gated metric: the verdict and, when it fails, the rule that failed (a drop the suite
    cannot tell from noise still fails the tolerance or the floor), then the change with the CI of the
    paired difference against what the suite can detect and the tolerance."""
    out = []
    for c in result.checks:
        low, high = c.delta_ci
        if not np.isfinite(c.mde):
            detectable = "detectable effect unknown"
        elif abs(c.delta) < c.mde:
            detectable = "smaller than the suite can detect"
        else:
            detectable = "at least the detectable effect"
        verdict = f"FAIL by {_rules_text(c)}" if c.failures else "pass"
        out.append(
            f"- **{c.metric}: {verdict}**: Δ {c.delta:+.4f} "
            f"(95% CI [{low:+.4f}, {high:+.4f}], {_unit_short(result)}), {detectable} "
            f"(MDE {_p(c.mde)}); tolerance {c.tolerance:.3f}; p {_p(c.p_value)}, the smallest attainable "
            f"p {_p(c.min_p)}"
            + (
                f" (at or above alpha {result.gate.alpha}: the test cannot flag this metric)."
                if c.min_p >= result.gate.alpha
                else "."
            )
        )
    return out


_RULE_TEXT = {
    "floor": "the floor (the mean is under it)",
    "ceiling": "the ceiling (the mean is over it)",
    "tolerance": "the tolerance (the mean moved the wrong way by more than it allows)",
    "significant": "the test (a significant change for the worse)",
}


def _rules_text(check: MetricCheck) -> str:
    """Which of the gate's rules failed, in words; a drop under the MDE fails only by floor or tolerance."""
    return " and ".join(_RULE_TEXT[r] for r in check.rules) or "its rules"


def _unit_short(result: GateResult) -> str:
    if result.unit == "cluster":
        return f"{result.n_clusters} clusters, inverted sign-flip test"
    return "queries resampled"


def _unit_note(result: GateResult) -> str:
    if result.unit == "cluster":
        text = (
            f"Statistics by cluster: the test sign-flips whole clusters ({result.n_clusters} clusters, each "
            "query's conversation), not single queries, and the CI of Δ is the set of shifts it does not "
            "reject (calibrated for few clusters, docs/metrics.md)."
        )
    else:
        text = "Statistics by query: each query resampled and sign-flipped on its own."
    return text + (f" Warning: {result.warning}." if result.warning else "")


def _p(value: float) -> str:
    return "–" if value != value else f"{value:.3g}"


def run_variant(gate: GateConfig, variant: str, overrides: Sequence[str], out_dir: Path) -> RunRecord:
    """Run the gate's suite with `variant` through `experiments.run` (no tracking) into `out_dir`.

    Always measured fresh: no candidate or rerank-score cache (`cache_dir` off) and no finished run
    answering for this one (`resume` off), whatever the overrides say. The embedding cache stays where
    it was: its key is complete (KEY_RULES["embeddings"]: every file of the model folder, library
    versions, backend, code, role, prompt, text), so no entry of another model state can answer; an
    ONNX/OpenVINO export is checked against fp32 when loaded (retrieval/backends.py).
    """
    from experiments.run.app import run_experiment  # the run machinery: ~60 ms of --help's CPU if at the top

    fixed = [*gate.overrides, f"variant={variant}", "tracking=none", "progress=false"]
    cfg = compose_config([*fixed, *overrides])
    cfg.encoder.cache_dir = cfg.encoder.cache_dir  # resolved now, before `cache_dir` goes
    cfg.cache_dir = None
    cfg.resume = False
    run_experiment(cfg, out_dir)
    return load_run_dir(out_dir)


def refuse_partial(run: RunRecord) -> None:
    """Exit 2 (GateError) for a partial merge (memeval-merge --allow-partial): its statistics cover some
    shards' queries under the whole suite's hash; it is neither judged nor ever written as a baseline."""
    if run.partial is not None:
        raise GateError(
            f"{run.source} is a partial run ({run.partial_text}): the gate judges and records whole runs "
            "only. Merge every shard (memeval-merge without --allow-partial), or gate an unsharded run"
        )


def known_variants() -> list[str]:
    """The variants `variant=<name>` can name (conf/variant/)."""
    return sorted(p.stem for p in (CONF_DIR / "variant").glob("*.yaml"))


def check_variant(variant: str) -> None:
    """Exit 2 (GateError) for a variant no config defines, naming the closest ones, before a baseline is
    looked for (whose absence would suggest writing one for a variant that does not exist)."""
    known = known_variants()
    if variant in known:
        return
    close = difflib.get_close_matches(variant, known, n=3)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    raise GateError(
        f"unknown variant {variant!r} (no conf/variant/{variant}.yaml): {hint}known: {', '.join(known)}"
    )


def baseline_dir() -> Path:
    """Where committed baselines live: $MEMEVAL_BASELINE_DIR, else the project's reports/baselines
    (found from the package, so the gate works from any directory), else ./reports/baselines."""
    if os.environ.get(BASELINE_ENV):
        return Path(os.environ[BASELINE_ENV])
    project = PROJECT_ROOT / "reports" / "baselines"
    return project if project.is_dir() else Path("reports/baselines")


def baseline_path(gate: GateConfig, variant: str, folder: Path | None = None) -> Path:
    return (folder or baseline_dir()) / f"{gate.name}-{variant}.json"


def check_baseline_before_running(
    gate: GateConfig, variant: str, overrides: Sequence[str], path: Path
) -> None:
    """Fail fast (exit 2) when there is nothing to compare with: no baseline, or one made on another
    version of the suite. Loading the suite costs little next to running it."""
    if not path.is_file():
        raise GateError(
            f"no baseline {path} for gate {gate.name!r} and variant {variant!r}; write one on purpose with "
            f"`memeval-gate {gate.name} {variant} --refresh`, or name one with --baseline"
        )
    from experiments.configure.settings import load_suite_from_config  # as above

    baseline = Baseline.load(path)
    expected = baseline.suite_hash
    cfg = compose_config([*gate.overrides, f"variant={variant}", "tracking=none", *overrides])
    suite = load_suite_from_config(cfg, memoise=True)
    if suite.content_hash != expected:
        raise GateError(
            f"suite hash mismatch: baseline {path} was made on suite {expected[:12]}, but the suite is now "
            f"{suite.content_hash[:12]}: the suite changed, so the gate cannot judge; refresh the baseline "
            "on purpose (--refresh) once the change is intended"
        )
    # A tolerance the suite cannot detect is refused before the suite is run, too.
    clusters = pd.Series({q.id: query_cluster(q, suite.cluster) for q in suite.queries}, dtype=object)
    index = pd.Index(list(dict.fromkeys(q for values in baseline.per_query.values() for q in values)))
    refuse_untestable_clusters(gate, baseline, clusters.reindex(index))
    refuse_undetectable_tolerance(gate, detectable_effects(gate, baseline, clusters.reindex(index)))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = ArgumentParser(prog="memeval-gate", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "gate", help="gate config: experiments/gates/<name>.yaml (e.g. spark25, beam100k) or a path"
    )
    parser.add_argument("variant", help="variant to gate (conf/variant/<name>.yaml)")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides when the gate runs the suite")
    parser.add_argument("--run-dir", type=Path, help="gate this finished run directory instead of running")
    parser.add_argument(
        "--baseline", type=Path, help="baseline file (default <baseline dir>/<gate>-<variant>.json)"
    )
    parser.add_argument(
        "--baseline-dir",
        type=Path,
        help=f"folder of baselines (default ${BASELINE_ENV}, else the project's reports/baselines)",
    )
    parser.add_argument(
        "--out", type=Path, help="where a run made by the gate goes (default outputs/gate/...)"
    )
    parser.add_argument("--summary", type=Path, help="write the Markdown verdict here too")
    parser.add_argument("--refresh", action="store_true", help="write the baseline from this run, on purpose")
    parser.add_argument(
        "--allow-few-clusters",
        action="store_true",
        help="judge even when too few clusters leave the test unable to reach alpha (as the config key)",
    )
    parser.add_argument(
        "--allow-tolerance-below-mde",
        action="store_true",
        help="judge even when a tolerance is below the minimum detectable effect (as the config key)",
    )
    return parser.parse_intermixed_args(argv)  # Hydra overrides may follow the options


@console_script
def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        gate = GateConfig.load(args.gate)
        if args.allow_tolerance_below_mde:
            gate = replace(gate, allow_tolerance_below_mde=True)
        if args.allow_few_clusters:
            gate = replace(gate, allow_few_clusters=True)
        path = args.baseline or baseline_path(gate, args.variant, args.baseline_dir)
        if not args.run_dir and not any("searchpath" in o for o in args.overrides):
            check_variant(args.variant)  # the gate runs it, so it must exist (on a search path: Hydra says)
        if not args.refresh and not args.run_dir:
            check_baseline_before_running(gate, args.variant, args.overrides, path)
        if args.run_dir:
            run = load_run_dir(args.run_dir)
            if run.variant != args.variant and not args.baseline:
                raise GateError(f"{args.run_dir} is a run of variant {run.variant!r}, not {args.variant!r}")
        else:
            stamp = datetime.now(UTC).strftime("%Y-%m-%d_%H-%M-%S")
            out = args.out or Path("outputs/gate") / gate.name / args.variant / stamp
            run = run_variant(gate, args.variant, args.overrides, out)
        refuse_partial(run)
        if args.refresh:
            return _refresh(run, gate, path, argv)
        result = check_run(run, Baseline.load(path), gate, path)
    except (GateError, RunError, ValueError, ModelNotFoundError) as err:  # cannot judge, not a regression
        print(f"gate error: {err}", file=sys.stderr)
        return 2
    text = summary_markdown(result)
    print(text)
    if args.summary:
        args.summary.parent.mkdir(parents=True, exist_ok=True)
        args.summary.write_text(text)
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as fh:
            fh.write(text + "\n")
    return 0 if result.passed else 1


def _refresh(run: RunRecord, gate: GateConfig, path: Path, argv: Sequence[str] | None) -> int:
    command = "python -m experiments.gate " + shlex.join(sys.argv[1:] if argv is None else list(argv))
    new = Baseline.from_run(run, gate, command=command)
    if path.is_file():
        old: dict[str, Any] = json.loads(path.read_text())
        for metric, mean in new.means.items():
            before = old.get("means", {}).get(metric)
            change = "new" if before is None else f"{before:.4f} -> {mean:.4f}"
            print(f"baseline {metric}: {change}")
        if old.get("suite_hash") != new.suite_hash:
            print(f"baseline suite hash: {str(old.get('suite_hash'))[:12]} -> {new.suite_hash[:12]}")
    new.save(path)
    print(f"wrote baseline {path} ({', '.join(f'{m} {v:.4f}' for m, v in new.means.items())})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
