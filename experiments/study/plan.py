"""A study plan: the YAML that says which runs a study compares and how (conf/study/*.yaml).

First step of a study: the plan is read and checked here, before anything runs, and turned into
rows (one run config each: the suite, the base variant, the plan's overrides, the row's overrides).
`experiments.study.experiment.Experiment` runs the rows; the report is built from their runs.

    name: boost_beam100k
    suite: {name: beam, path: ../shared/beam/100K}
    variant: exp05
    sweep: {stage.instruction_boost.weight: "range(0, 0.41, 0.1)"}
    baseline: stage.instruction_boost.weight=0
    baselines: [stage.instruction_boost.weight=0.2]   # optional: more references, one Holm family
    metrics: [R@10, nDCG@10]
    stats: {unit: cluster}   # optional, only what differs: randomization, 0.05, holm, seed 0, auto

A bad plan is a `PlanError` naming the field (`study.baseline: ...`), raised before any run.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from experiments.compare.drilldown import DrilldownOptions
from experiments.evaluate.metrics import parse_metric
from experiments.evaluate.statistics import TEST_NAMES, UNITS
from experiments.names import name_problem
from experiments.track.finished_runs import LOWER_IS_BETTER

ROW_NAME = re.compile(r"[A-Za-z0-9_.+\-]+")
PLAN_KEYS = frozenset(
    {
        "name",
        "title",
        "description",
        "suite",
        "suites",
        "variant",
        "overrides",
        "rows",
        "sweep",
        "baseline",
        "baselines",
        "metrics",
        "primary",
        "label",
        "stats",
        "sections",
        "drilldown",
        "measure_latency",
    }
)
STATS_KEYS = frozenset({"test", "alpha", "correction", "seed", "unit"})
CORRECTIONS = ("holm",)  # the report corrects across all its comparisons; Holm is what it implements


class PlanError(ValueError):
    """A study plan that cannot run: the message names the field (`study.rows[2].overrides`)."""


@dataclass(frozen=True)
class Row:
    """One run of a study: a name (its label in tables) and the overrides that make it differ."""

    name: str
    overrides: tuple[str, ...] = ()
    swept: tuple[tuple[str, str], ...] = ()  # (key, value) pairs a sweep set, empty for a listed row
    suites: tuple[str, ...] = ()  # in a plan with `suites:`, the ids it runs on (empty: every suite)


@dataclass(frozen=True)
class Stats:
    test: str = "randomization"
    alpha: float = 0.05
    correction: str = "holm"
    seed: int = 0
    unit: str = "auto"  # what the statistics resample: auto | cluster | query (evaluate.statistics)


@dataclass(frozen=True)
class Section:
    """A named report section (a plug-in from experiments.study.sections) and its options."""

    name: str
    options: Mapping[str, Any] = field(default_factory=dict)
    suites: tuple[str, ...] = ()  # in a plan with `suites:`, the suite reports it goes in (empty: all)


@dataclass(frozen=True)
class SuiteRef:
    """One suite of a plan with `suites:`: its id (report sub-folder) and its config overrides."""

    id: str
    overrides: tuple[str, ...]


@dataclass(frozen=True)
class StudyPlan:
    name: str
    suite: tuple[str, ...]  # overrides: ("suite=beam", "suite.path=...")
    variant: str
    rows: tuple[Row, ...]
    baseline: str  # a row name
    metrics: tuple[str, ...]
    primary: str | None  # None: the suite's (its suite config's `primary`), else the first metric
    label: str | None = None
    overrides: tuple[str, ...] = ()  # for every row, before the row's own
    stats: Stats = Stats()
    sections: tuple[Section, ...] = ()
    title: str = ""
    description: str = ""
    drilldown: DrilldownOptions = DrilldownOptions()
    suites: tuple[SuiteRef, ...] = ()  # several suites: one paired comparison (and report) per suite
    baselines: tuple[str, ...] = ()  # more references (row names) every row is compared against
    # Every row's latency measured: each row runs on its own (no process memo, no candidate cache; its
    # embeddings still from their cache), so no row's latency is unmeasured for work an earlier row did.
    measure_latency: bool = False

    @property
    def references(self) -> tuple[str, ...]:
        """The baseline, then the other references: the Holm family covers every row against each."""
        return (self.baseline, *(b for b in self.baselines if b != self.baseline))

    def row_overrides(self, row: Row) -> list[str]:
        """The full override list of a row's run config (later keys replace earlier ones)."""
        return merge_overrides([*self.suite, f"variant={self.variant}", *self.overrides, *row.overrides])

    def for_suite(self, suite_id: str) -> StudyPlan:
        """The single-suite plan of one of `suites`: its rows and sections, named `<name>.<id>`."""
        ref = next(s for s in self.suites if s.id == suite_id)
        return replace(
            self,
            name=f"{self.name}.{ref.id}",
            title=f"{self.title}: {ref.id}",
            suite=ref.overrides,
            rows=tuple(r for r in self.rows if not r.suites or ref.id in r.suites),
            sections=tuple(s for s in self.sections if not s.suites or ref.id in s.suites),
            suites=(),
        )


def override_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def merge_overrides(overrides: Sequence[str]) -> list[str]:
    """One override per key, the last one winning, in first-seen order (Hydra rejects a key given twice)."""
    merged: dict[str, str] = {}
    for override in overrides:
        merged.pop(override_key(override), None)
        merged[override_key(override)] = override
    return list(merged.values())


def _fail(where: str, message: str) -> PlanError:
    return PlanError(f"study.{where}: {message}")


def _folder_name(kind: str, value: Any, where: str) -> str:
    """A plan, row or suite id name, which names a folder: experiments.names' rules, then the plan's own
    narrower alphabet (it is also a label in tables and a Hydra override value)."""
    name = str(value)
    problem = name_problem(kind, name)
    if problem is None and not ROW_NAME.fullmatch(name):
        problem = f"{name!r} names a folder: letters, digits and _ . + - only"
    if problem is not None:
        raise _fail(where, problem)
    return name


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise _fail(where, f"must be a list of strings, got {value!r}")
    for i, item in enumerate(value):
        if not isinstance(item, str | int | float):
            raise _fail(f"{where}[{i}]", f"must be a string, got {item!r}")
    return tuple(str(v) for v in value)


def _overrides(value: Any, where: str) -> tuple[str, ...]:
    items = _strings(value, where)
    for i, item in enumerate(items):
        if "=" not in item:
            raise _fail(f"{where}[{i}]", f"{item!r} is not an override (key=value)")
    return items


def _short(key: str) -> str:
    """How the report names a swept key (experiments.compare.analysis labels runs the same way)."""
    return ".".join(key.split(".")[-2:]) if key.startswith("stage.") else key


def _show(value: str) -> str:
    try:
        return f"{float(value):.10g}"
    except ValueError:
        return value


def expand_sweep(sweep: Mapping[str, Any], variant: str, where: str = "sweep") -> list[Row]:
    """Rows for every combination of the swept values; Hydra's sweep syntax (range(), a,b,c, lists).

    Each row is named `<variant>[<key>=<value>, ...]` over the keys with more than one value, sorted,
    which is the label the comparison report gives the same run.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    if not isinstance(sweep, Mapping) or not sweep:
        raise _fail(where, f"must map config keys to values to sweep, got {sweep!r}")
    parser = OverridesParser.create()
    values: dict[str, list[str]] = {}
    for key, expression in sweep.items():
        if isinstance(expression, Sequence) and not isinstance(expression, str):
            expression = ",".join(str(v) for v in expression)
        try:
            parsed = parser.parse_override(f"{key}={expression}")
            found = list(parsed.sweep_string_iterator()) if parsed.is_sweep_override() else [str(expression)]
        except HydraException as err:
            raise _fail(f"{where}.{key}", f"cannot expand {expression!r}: {err}") from None
        if not found:
            raise _fail(f"{where}.{key}", f"{expression!r} expands to no value")
        values[str(key)] = found
    varying = sorted(k for k, v in values.items() if len(v) > 1)
    rows = []
    for combo in itertools.product(*values.values()):
        pairs = tuple(zip(values, combo, strict=True))
        parts = [f"{_short(k)}={_show(v)}" for k, v in sorted(pairs) if k in varying]
        name = f"{variant}[{', '.join(parts)}]" if parts else variant
        rows.append(Row(name, tuple(f"{k}={v}" for k, v in pairs), pairs))
    return rows


def _rows(raw: Any) -> list[Row]:
    if raw is None:
        return []
    if not isinstance(raw, Sequence) or isinstance(raw, str):
        raise _fail("rows", f"must be a list of {{name, overrides}}, got {raw!r}")
    rows = []
    for i, item in enumerate(raw):
        if not isinstance(item, Mapping) or "name" not in item:
            raise _fail(f"rows[{i}]", f"must be a mapping with a name (and overrides), got {item!r}")
        unknown = set(item) - {"name", "overrides", "suites"}
        if unknown:
            raise _fail(f"rows[{i}]", f"unknown keys {sorted(unknown)} (a row has name, overrides, suites)")
        name = _folder_name("row", item["name"], f"rows[{i}].name")
        overrides = _overrides(item.get("overrides"), f"rows[{i}].overrides")
        # A listed row is its own variant in the report: its name labels it there and in MLflow.
        if not any(override_key(o) == "variant.name" for o in overrides):
            overrides = (*overrides, f"variant.name={name}")
        rows.append(Row(name, overrides, suites=_strings(item.get("suites"), f"rows[{i}].suites")))
    return rows


def _suite(raw: Any, where: str = "suite") -> tuple[str, ...]:
    if isinstance(raw, str):
        return (f"suite={raw}",)
    if isinstance(raw, Mapping) and "name" in raw:
        # A key the suite config lacks is added as in Hydra: `+topics: true` -> `+suite.topics=true`.
        return (
            f"suite={raw['name']}",
            *(
                f"{'+' * k.startswith('+')}suite.{k.lstrip('+')}={_value(v)}"
                for k, v in raw.items()
                if k != "name"
            ),
        )
    raise _fail(where, f"must name a suite config (spark25) or be {{name: beam, path: ...}}, got {raw!r}")


def _value(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _suites(raw: Any) -> tuple[SuiteRef, ...]:
    """`suites: [spark25, {id: beam100k, name: beam, path: ...}]`; its id (default: name) names a report."""
    if not isinstance(raw, Sequence) or isinstance(raw, str) or not raw:
        raise _fail("suites", f"must be a non-empty list of suites, got {raw!r}")
    refs = []
    for i, item in enumerate(raw):
        where = f"suites[{i}]"
        entry = {k: v for k, v in item.items() if k != "id"} if isinstance(item, Mapping) else item
        overrides = _suite(entry, where)
        suite_id = str(item.get("id") or item.get("name")) if isinstance(item, Mapping) else str(item)
        _folder_name("suite id", suite_id, f"{where}.id")
        refs.append(SuiteRef(suite_id, overrides))
    ids = [r.id for r in refs]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise _fail("suites", f"suite ids must be unique: {duplicates} appear twice (give each an `id:`)")
    return tuple(refs)


def _check_suite_ids(plan: StudyPlan) -> None:
    """Rows and sections name only the plan's suites; the baseline runs on every suite."""
    ids = [s.id for s in plan.suites]
    named = [(f"rows[{i}].suites", r.suites) for i, r in enumerate(plan.rows)]
    named += [(f"sections[{i}].suites", s.suites) for i, s in enumerate(plan.sections)]
    for where, chosen in named:
        if chosen and not plan.suites:
            raise _fail(where, "only a plan with `suites:` (several suites) can restrict to some of them")
        unknown = [c for c in chosen if c not in ids]
        if unknown:
            raise _fail(where, f"{unknown} are not among the plan's suite ids {ids}")
    base = next(r for r in plan.rows if r.name == plan.baseline)
    if base.suites and set(base.suites) != set(ids):
        raise _fail(
            "baseline", f"the baseline {base.name!r} must run on every suite {ids}, not {list(base.suites)}"
        )


def _baseline(raw: Any, rows: Sequence[Row]) -> str:
    names = [r.name for r in rows]
    if raw is None:
        return names[0]
    text = str(raw)
    if text in names:
        return text
    if "=" in text:  # a selector: the one row whose overrides include exactly this one
        key, value = text.split("=", 1)
        matches = [
            r.name
            for r in rows
            if any(
                k == key and _show(v) == _show(value) for k, _, v in (o.partition("=") for o in r.overrides)
            )
        ]
        if len(matches) == 1:
            return matches[0]
        raise _fail("baseline", f"{text!r} selects {len(matches)} rows ({matches}); it must select one")
    raise _fail("baseline", f"{text!r} is no row name ({names}) and no key=value selector")


def _metrics(raw: Any) -> tuple[str, ...]:
    metrics = _strings(raw, "metrics")
    if not metrics:
        raise _fail("metrics", "name at least one metric, e.g. [nDCG@10, R@10]")
    for i, metric in enumerate(metrics):
        if LOWER_IS_BETTER.fullmatch(metric):
            continue
        try:
            parse_metric(metric)
        except ValueError as err:
            raise _fail(f"metrics[{i}]", str(err)) from None
    return metrics


def _stats(raw: Any) -> Stats:
    raw = raw or {}
    if not isinstance(raw, Mapping):
        raise _fail("stats", f"must be a mapping (test, alpha, correction, seed), got {raw!r}")
    unknown = set(raw) - STATS_KEYS
    if unknown:
        raise _fail("stats", f"unknown keys {sorted(unknown)}; known: {sorted(STATS_KEYS)}")
    stats = Stats(**{k: raw[k] for k in STATS_KEYS if raw.get(k) is not None})
    if stats.test not in TEST_NAMES:
        raise _fail("stats.test", f"{stats.test!r} is not one of {sorted(TEST_NAMES)}")
    if not isinstance(stats.alpha, int | float) or not 0 < float(stats.alpha) < 1:
        raise _fail("stats.alpha", f"must be a number in (0, 1), got {stats.alpha!r}")
    if stats.correction not in CORRECTIONS:
        raise _fail("stats.correction", f"{stats.correction!r} is not one of {list(CORRECTIONS)}")
    if not isinstance(stats.seed, int) or isinstance(stats.seed, bool):
        raise _fail("stats.seed", f"must be an integer, got {stats.seed!r}")
    if stats.unit not in UNITS:
        raise _fail("stats.unit", f"{stats.unit!r} is not one of {list(UNITS)}")
    return Stats(stats.test, float(stats.alpha), stats.correction, stats.seed, stats.unit)


def _baselines(raw: Any, rows: Sequence[Row]) -> tuple[str, ...]:
    """More references: a list of row names or key=value selectors, each selecting one row."""
    if raw is None:
        return ()
    if isinstance(raw, str) or not isinstance(raw, Sequence):
        raise _fail("baselines", f"must be a list of row names or key=value selectors, got {raw!r}")
    chosen = []
    for i, item in enumerate(raw):
        try:
            chosen.append(_baseline(item, rows))
        except PlanError as err:
            raise _fail(f"baselines[{i}]", str(err).split(": ", 1)[-1]) from None
    return tuple(dict.fromkeys(chosen))


def _sections(raw: Any) -> tuple[Section, ...]:
    from experiments.study.sections import resolve_section

    if raw is None:
        return ()
    if not isinstance(raw, Sequence) or isinstance(raw, str):
        raise _fail("sections", f"must be a list of section names, got {raw!r}")
    out = []
    for i, item in enumerate(raw):
        if isinstance(item, Mapping) and "name" in item:
            options = {k: v for k, v in item.items() if k not in ("name", "suites")}
            section = Section(
                str(item["name"]), options, _strings(item.get("suites"), f"sections[{i}].suites")
            )
        elif isinstance(item, str):
            section = Section(item)
        else:
            raise _fail(f"sections[{i}]", f"must be a name or {{name: ..., options}}, got {item!r}")
        try:
            resolve_section(section.name)
        except KeyError as err:
            raise _fail(f"sections[{i}]", str(err.args[0])) from None
        out.append(section)
    return tuple(out)


def _drilldown(raw: Any) -> DrilldownOptions:
    """`drilldown: {n: 3, queries: [id, ...]}`: the report's per-query drill-down (n: 0 with no queries
    leaves it out)."""
    if raw is None:
        return DrilldownOptions()
    if not isinstance(raw, Mapping):
        raise _fail("drilldown", f"must be a mapping {{n: 3, queries: [id, ...]}}, got {raw!r}")
    unknown = set(raw) - {"n", "queries"}
    if unknown:
        raise _fail("drilldown", f"unknown keys {sorted(unknown)}; known: ['n', 'queries']")
    n = raw.get("n", DrilldownOptions.n)
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise _fail("drilldown.n", f"must be an integer >= 0, got {n!r}")
    return DrilldownOptions(n, _strings(raw.get("queries"), "drilldown.queries"))


def _flag(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise _fail(key, f"must be true or false, got {value!r}")
    return value


def load_plan(raw: Mapping[str, Any], name: str | None = None) -> StudyPlan:
    """Check a plan (a mapping, e.g. `cfg.study` as a container) and expand its sweep into rows.
    `name`: the plan's file name (`study=<name>`), its name unless the plan states another."""
    if not isinstance(raw, Mapping):
        raise PlanError(f"study: a plan is a mapping, got {type(raw).__name__}")
    if name is not None and raw.get("name") in (None, ""):
        raw = {**raw, "name": name}
    unknown = set(raw) - PLAN_KEYS
    if unknown:
        raise PlanError(f"study: unknown keys {sorted(unknown)}; a plan has {sorted(PLAN_KEYS)}")
    if raw.get("suite") not in (None, "", "???") and raw.get("suites") is not None:
        raise _fail("suites", "give `suite` (one) or `suites` (several), not both")
    suites = _suites(raw["suites"]) if raw.get("suites") is not None else ()
    for key in ("name", "variant", "metrics") if suites else ("name", "suite", "variant", "metrics"):
        if raw.get(key) in (None, "", "???"):
            raise _fail(key, "is required")
    name = _folder_name("plan", raw["name"], "name")
    variant = str(raw["variant"])
    rows = _rows(raw.get("rows"))
    if raw.get("sweep") is not None:
        rows += expand_sweep(raw["sweep"], variant)
    if not rows:
        raise _fail("rows", "a study needs rows (name + overrides) and/or a sweep")
    seen = [r.name for r in rows]
    duplicates = sorted({n for n in seen if seen.count(n) > 1})
    if duplicates:
        raise _fail("rows", f"row names must be unique: {duplicates} appear twice")
    metrics = _metrics(raw["metrics"])
    primary = None if raw.get("primary") is None else str(raw["primary"])
    if primary is not None and primary not in metrics:
        raise _fail("primary", f"{primary!r} is not among the metrics {list(metrics)}")
    label = raw.get("label")
    plan = StudyPlan(
        name=name,
        suite=suites[0].overrides if suites else _suite(raw["suite"]),
        variant=variant,
        rows=tuple(rows),
        baseline=_baseline(raw.get("baseline"), rows),
        metrics=metrics,
        primary=primary,
        label=None if label is None else str(label),
        overrides=_overrides(raw.get("overrides"), "overrides"),
        stats=_stats(raw.get("stats")),
        sections=_sections(raw.get("sections")),
        title=str(raw.get("title") or name),
        description=str(raw.get("description") or ""),
        drilldown=_drilldown(raw.get("drilldown")),
        suites=suites,
        baselines=_baselines(raw.get("baselines"), rows),
        measure_latency=_flag(raw.get("measure_latency", False), "measure_latency"),
    )
    _check_suite_ids(plan)
    return plan
