"""`memeval-gate` / `python -m experiments.gate`: the CI regression gate, a run against a committed baseline.

    python -m experiments.gate spark25 hybrid                  # run the suite + variant, then gate
    python -m experiments.gate beam100k hybrid --run-dir outputs/beam/hybrid/...   # gate a finished run
    python -m experiments.gate spark25 hybrid --refresh        # rewrite the baseline, on purpose

Sits after `experiments.run` in the data flow. The gate config (conf/gate/<gate>.yaml) names the
gated metrics, their absolute floors, the largest tolerated drop of the mean, and the test's alpha.
The baseline (reports/baselines/<gate>-<variant>.json) holds the per-query values of the gated
metrics plus the suite hash, config and commit they came from. The gate fails (exit 1) when a mean
is under its floor, drops by more than the tolerance, or drops significantly (paired test from
`experiments.evaluate.statistics`, Holm across the gated metrics); it never writes its own baseline.
Exit 2: the gate cannot judge (baseline for another suite version, missing files, bad config).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from experiments import PROJECT_ROOT
from experiments.evaluate.metrics import parse_metric
from experiments.evaluate.statistics import compare, holm
from experiments.run.compose import CONF_DIR, compose_config
from experiments.track.finished_runs import RunError, RunRecord, load_run_dir
from experiments.track.mlflow_tracker import git_commit
from retrieval.encoder import ModelNotFoundError

BASELINE_ENV = "MEMEVAL_BASELINE_DIR"
# Config keys that define what was measured; a baseline records them and the gate shows differences.
CONFIG_PREFIXES = ("suite.", "variant.", "stage.", "encoder.model", "depth")
# ...except where the suite sits on this machine (its content hash identifies it) and encoder settings
# that change speed or logging, not the vectors.
CONFIG_IGNORED_SUFFIXES = (
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

    def floor(self, metric: str, variant: str) -> float | None:
        return self.variant_floors.get(variant, {}).get(metric, self.floors.get(metric))

    @classmethod
    def load(cls, name_or_path: str) -> GateConfig:
        path = Path(name_or_path)
        if not path.suffix:
            path = CONF_DIR / "gate" / f"{name_or_path}.yaml"
        if not path.is_file():
            known = sorted(p.stem for p in (CONF_DIR / "gate").glob("*.yaml"))
            raise GateError(f"no gate config {path}; known gates: {', '.join(known)}")
        raw = yaml.safe_load(path.read_text()) or {}
        metrics = tuple(raw.get("metrics") or ())
        for metric in metrics:
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

    @classmethod
    def from_run(cls, run: RunRecord, gate: GateConfig, *, command: str) -> Baseline:
        frame = _gated_values(run, gate.metrics)
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
            per_query={m: {q: float(v) for q, v in frame[m].items()} for m in gate.metrics},
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


@dataclass(frozen=True)
class GateResult:
    gate: GateConfig
    baseline: Baseline
    baseline_path: Path
    run: RunRecord
    checks: tuple[MetricCheck, ...]
    regressed: pd.DataFrame  # metric, query_id, label, baseline, run, delta (worst first)
    config_changes: Mapping[str, tuple[str | None, str | None]] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not any(c.failures for c in self.checks)


def _gated_values(run: RunRecord, metrics: Sequence[str]) -> pd.DataFrame:
    missing = [m for m in metrics if m not in run.per_query.columns]
    if missing:
        raise GateError(f"run {run.source} has no per-query {', '.join(missing)}; add it to `metrics`")
    return run.answerable()[list(metrics)].astype(float)


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
    tables = {}
    for metric in gate.metrics:
        if metric not in baseline.per_query:
            raise GateError(f"baseline {baseline_path} has no {metric}; refresh it with --refresh")
        reference = pd.Series(baseline.per_query[metric], dtype=float)
        if set(reference.index) != set(frame.index):
            raise GateError(
                f"{metric}: the run's queries differ from the baseline's despite equal suite hash"
            )
        pair = {"baseline": reference, "run": frame[metric].reindex(reference.index)}
        tables[metric] = compare(
            pair, "baseline", test=gate.test, alpha=gate.alpha, n_resamples=gate.n_resamples, seed=gate.seed
        ).loc["run"]
    p_holm = holm(np.array([tables[m]["p_value"] for m in gate.metrics]))
    checks = []
    for metric, adjusted in zip(gate.metrics, p_holm, strict=True):
        row = tables[metric]
        base_mean, run_mean = float(row["mean"] - row["delta"]), float(row["mean"])
        floor, tolerance = gate.floor(metric, run.variant), gate.tolerance[metric]
        failures = []
        if floor is not None and run_mean < floor:
            failures.append(f"{metric} mean {run_mean:.4f} is under the floor {floor:.4f}")
        if base_mean - run_mean > tolerance + 1e-12:
            failures.append(
                f"{metric} mean dropped by {base_mean - run_mean:.4f} (tolerance {tolerance:.4f})"
            )
        # The paired test is two-sided; only a drop fails (one-sided at alpha/2: conservative for CI).
        if row["delta"] < 0 and adjusted < gate.alpha:
            failures.append(
                f"{metric} drop is significant: p = {adjusted:.4g} after Holm (alpha {gate.alpha})"
            )
        checks.append(
            MetricCheck(
                metric, base_mean, run_mean, float(row["delta"]),
                (float(row["delta_ci_low"]), float(row["delta_ci_high"])),
                float(row["p_value"]), float(adjusted), floor, tolerance,
                int(row["wins"]), int(row["ties"]), int(row["losses"]), tuple(failures),
            )
        )  # fmt: skip
    return GateResult(
        gate, baseline, baseline_path, run, tuple(checks), _regressed(run, baseline, frame, gate.metrics),
        _config_changes(baseline.config, run.params),
    )  # fmt: skip


def _regressed(
    run: RunRecord, baseline: Baseline, frame: pd.DataFrame, metrics: Sequence[str]
) -> pd.DataFrame:
    labels = [c for c in run.per_query.columns if c.startswith("label.")]
    rows = []
    for metric in metrics:
        before = pd.Series(baseline.per_query[metric], dtype=float)
        after = frame[metric].reindex(before.index)
        worse = before.index[(after - before) < -1e-12]
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
    after = _measured_config(params)
    before = _measured_config(before)
    return {
        k: (before.get(k), after.get(k))
        for k in sorted(set(before) | set(after))
        if before.get(k) != after.get(k)
    }


def summary_markdown(result: GateResult) -> str:
    """The verdict as Markdown: for the console, a file, and the CI step summary."""
    gate, base = result.gate, result.baseline
    verdict = "PASS" if result.passed else "FAIL"
    n = len(next(iter(base.per_query.values())))
    lines = [
        f"## memeval gate `{gate.name}` · variant `{result.run.variant}`: **{verdict}**",
        "",
        f"Baseline `{result.baseline_path}`: variant `{base.variant}`, commit `{base.git_commit[:10]}`, "
        f"suite `{base.suite}` hash `{base.suite_hash[:12]}`, {n} answerable queries, "
        f"recorded {base.created}.",
        f"Run: `{result.run.source}`.",
        "",
        f"| metric | baseline | run | Δ | 95% CI of Δ | p ({gate.test}) | p Holm | floor | tolerance "
        "| W/T/L | |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in result.checks:
        floor = "–" if c.floor is None else f"{c.floor:.3f}"
        lines.append(
            f"| {c.metric} | {c.baseline:.4f} | {c.run:.4f} | {c.delta:+.4f} | "
            f"[{c.delta_ci[0]:+.4f}, {c.delta_ci[1]:+.4f}] | {_p(c.p_value)} | {_p(c.p_holm)} | {floor} | "
            f"{c.tolerance:.3f} | {c.wins}/{c.ties}/{c.losses} | {'fail' if c.failures else 'ok'} |"
        )
    failures = [f for c in result.checks for f in c.failures]
    if failures:
        lines += ["", "Failures:", *[f"- {f}" for f in failures]]
    lines += ["", f"W/T/L: queries where the run is better / equal / worse than the baseline. Test: paired "
              f"{gate.test}, two-sided, seed {gate.seed}; Holm across the {len(gate.metrics)} gated "
              "metric(s); "
              f"a significant result fails only when the mean dropped."]  # fmt: skip
    regressed = result.regressed
    if len(regressed):
        lines += ["", f"Queries that regressed ({len(regressed)}, worst first):", "",
                  "| metric | query | label | baseline | run | Δ |", "|---|---|---|---|---|---|"]  # fmt: skip
        for r in regressed.head(MAX_LISTED_QUERIES).itertuples():
            lines.append(
                f"| {r.metric} | `{r.query_id}` | {r.label} | {r.baseline:.3f} | {r.run:.3f} "
                f"| {r.delta:+.3f} |"
            )
        if len(regressed) > MAX_LISTED_QUERIES:
            lines.append(f"| … {len(regressed) - MAX_LISTED_QUERIES} more | | | | | |")
    else:
        lines += ["", "No query regressed."]
    if result.run.variant != base.variant:
        lines += [
            "",
            f"Note: variant `{result.run.variant}` is gated against a baseline of `{base.variant}`.",
        ]
    if result.config_changes:
        lines += ["", "Config differs from the baseline's (not a failure by itself):"]
        lines += [
            f"- `{k}`: {'(absent)' if a is None else f'`{a}`'} → {'(absent)' if b is None else f'`{b}`'}"
            for k, (a, b) in result.config_changes.items()
        ]
    return "\n".join(lines) + "\n"


def _p(value: float) -> str:
    return "–" if value != value else f"{value:.3g}"


def run_variant(gate: GateConfig, variant: str, overrides: Sequence[str], out_dir: Path) -> RunRecord:
    """Run the gate's suite with `variant` through `experiments.run` (no tracking) into `out_dir`.

    Always measured fresh: no candidate or rerank-score cache (`cache_dir` off) and no finished run
    answering for this one (`resume` off), whatever the overrides say. The embedding cache stays where
    it was: its key is complete (model weights, library versions, code, role, prompt, text).
    """
    from experiments.run.app import run_experiment

    fixed = [*gate.overrides, f"variant={variant}", "tracking=none", "progress=false"]
    cfg = compose_config([*fixed, *overrides])
    cfg.encoder.cache_dir = cfg.encoder.cache_dir  # resolved now, before `cache_dir` goes
    cfg.cache_dir = None
    cfg.resume = False
    run_experiment(cfg, out_dir)
    return load_run_dir(out_dir)


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
    from experiments.run.app import load_suite_from_config

    expected = Baseline.load(path).suite_hash
    cfg = compose_config([*gate.overrides, f"variant={variant}", "tracking=none", *overrides])
    suite = load_suite_from_config(cfg, memoise=True)
    if suite.content_hash != expected:
        raise GateError(
            f"suite hash mismatch: baseline {path} was made on suite {expected[:12]}, but the suite is now "
            f"{suite.content_hash[:12]}: the suite changed, so the gate cannot judge; refresh the baseline "
            "on purpose (--refresh) once the change is intended"
        )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="memeval-gate", description=__doc__.split("\n\n")[0])
    parser.add_argument("gate", help="gate config: conf/gate/<name>.yaml (e.g. spark25, beam100k) or a path")
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
    return parser.parse_intermixed_args(argv)  # Hydra overrides may follow the options


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        gate = GateConfig.load(args.gate)
        path = args.baseline or baseline_path(gate, args.variant, args.baseline_dir)
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
