"""One validation pass over a run's resolved config, before any data is read or any index is built.

    problems = config_problems(cfg)   # every problem, one a line; [] for a config that can run

It checks the top-level run settings (depth, metrics, objective, seed, resume, cache_dir, progress), the
suite's loader arguments (suite.path present and of the right kind, no unknown or mistyped argument),
the variant's stage list, tracking and a live system's config. The stages check their own fields when
the run builds them (experiments.configure.build.pipeline_from_config: types against annotations, ranges on
construction); the run lists their problems after these (experiments.run.app.checked_pipeline). All
problems come back at once, one a line, named by their config key (`depth`, `metrics`, `suite.path`,
`stage.bm25.k1`), so the runner can print them and exit 2 with nothing written and no MLflow run.

The suite's *files* are checked by the suite loaders (experiments.suites), not here.
"""

from __future__ import annotations

import importlib
import inspect
import re
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hydra.utils import get_method
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from experiments.configure.nodes import PROTOCOL_METHODS
from experiments.evaluate.cost import budget_problems
from experiments.evaluate.metrics import parse_metric
from experiments.names import name_problem
from experiments.suites.load import SUITE_REPORT_KEYS
from experiments.track.mlflow_tracker import MAX_EXPERIMENT_NAME_CHARS, MAX_KEY_CHARS, flatten
from retrieval.field_types import value_problems
from retrieval.stage import MAX_CUTOFF

RESUME_CHOICES = ("auto", True, False)
# Keys of a suite config node that are not loader arguments.
SUITE_META_KEYS = frozenset(
    {"_target_", "_convert_", "_recursive_", "_partial_", "_args_", *SUITE_REPORT_KEYS}
)
_CUTOFF = re.compile(r"(?P<family>\w+?)@(?P<k>[+-]?\d+)")


class ConfigError(ValueError):
    """A run config with problems; `problems` lists each one as `<config key>: <problem>`."""

    def __init__(self, problems: Sequence[str]):
        self.problems = list(problems)
        count = f"{len(self.problems)} problem{'s' if len(self.problems) != 1 else ''}"
        super().__init__(f"invalid config ({count}):\n" + "\n".join(f"  {p}" for p in self.problems))


def _get(node: Any, key: str, prefix: str = "") -> tuple[Any, str | None]:
    """(value, None), or (None, problem) when the key is missing (`???`) or does not resolve."""
    name = f"{prefix}{key}"
    try:
        if OmegaConf.is_missing(node, key):
            return None, f"{name}: missing (set it on the command line: {name}=...)"
        value = node[key]
    except OmegaConfBaseException as err:
        return None, f"{name}: {type(err).__name__}: {str(err).splitlines()[0]}"
    if isinstance(value, (DictConfig, ListConfig)):
        value = OmegaConf.to_container(value, resolve=True)
    return value, None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def metric_problems(key: str, names: Any) -> list[str]:
    """Problems with a list of metric names (each must parse; a cutoff must be an integer >= 1)."""
    if isinstance(names, str) or not isinstance(names, Sequence):
        return [f"{key}: expected a list of metric names such as [P@5, nDCG@10], got {names!r}"]
    if not names:
        return [f"{key}: empty; name at least one metric such as P@5"]
    out = []
    for name in names:
        cutoff = _CUTOFF.fullmatch(name) if isinstance(name, str) else None
        if cutoff is not None and not 1 <= int(cutoff["k"]) <= MAX_CUTOFF:
            out.append(f"{key}: {name!r}: the cutoff after @ must be an integer >= 1 and <= {MAX_CUTOFF:,}")
            continue
        try:
            parse_metric(name)
        except ValueError as err:
            out.append(f"{key}: {err}")
    return out


def run_problems(cfg: DictConfig) -> list[str]:
    """Problems with the top-level run settings (not the suite, not the stages)."""
    out: list[str] = []
    depth, missing = _get(cfg, "depth")
    if missing:
        out.append(missing)
    elif not _is_int(depth) or not 1 <= depth <= MAX_CUTOFF:
        out.append(
            f"depth: expected an integer >= 1 and <= {MAX_CUTOFF:,} (ranked list length per query), "
            f"got {depth!r:.60}"
        )

    metrics, missing = _get(cfg, "metrics")
    metrics_bad = [missing] if missing else metric_problems("metrics", metrics)
    out += metrics_bad
    objective, missing = _get(cfg, "objective")
    if missing:
        out.append(missing)
    else:
        found = metric_problems("objective", [objective])
        if found:
            out += found
        elif not metrics_bad and objective not in metrics:
            out.append(
                f"objective: {objective!r} is not one of the metrics {list(metrics)}; add it to metrics"
            )

    seed, missing = _get(cfg, "seed")
    if missing:
        out.append(missing)
    elif not _is_int(seed) or seed < 0:
        out.append(f"seed: expected an integer >= 0, got {seed!r}")
    resume, missing = _get(cfg, "resume")
    if missing:
        out.append(missing)
    elif not (isinstance(resume, bool) or (isinstance(resume, str) and resume.lower() == "auto")):
        out.append(f"resume: expected auto, true or false, got {resume!r}")
    progress, missing = _get(cfg, "progress")
    if missing:
        out.append(missing)
    elif not isinstance(progress, bool):
        out.append(f"progress: expected true or false, got {progress!r}")
    cache_dir, missing = _get(cfg, "cache_dir")
    if missing:
        out.append(missing)
    elif cache_dir is not None and not isinstance(cache_dir, str):
        out.append(f"cache_dir: expected a folder path or null (no caching), got {cache_dir!r}")
    # A cache_dir that cannot be written (a file in the way, no permission) is not an error: the caches
    # warn once and the run goes on without them (retrieval/cache_io.py).
    return out


def _path_problems(key: str, path: Any, wants_directory: bool) -> list[str]:
    if isinstance(path, list) and path:
        return [
            p for i, item in enumerate(path) for p in _path_problems(f"{key}[{i}]", item, wants_directory)
        ]
    if not isinstance(path, str) or not path:
        return [f"{key}: expected a path, got {path!r}"]
    where = Path(path)
    if not where.exists():
        return [f"{key}: {path} does not exist"]
    if wants_directory and not where.is_dir():
        return [f"{key}: {path}: is not a directory (a suite is a directory: give the folder that holds it)"]
    return []


def suite_problems(cfg: DictConfig) -> list[str]:
    """Problems with the suite's loader arguments: unknown or mistyped ones, a missing or wrong path."""
    suite = cfg.get("suite")
    if not isinstance(suite, DictConfig):
        return [f"suite: expected a suite config (suite=spark25|beam|jsonl|...), got {suite!r}"]
    target = suite.get("_target_")
    try:
        loader = get_method(target)
        params = inspect.signature(loader).parameters
    except Exception as err:  # not importable, or not a callable: name it
        return [f"suite._target_: cannot use {target!r} as a suite loader ({err})"]
    try:
        hints = typing.get_type_hints(loader)
    except Exception:
        hints = {}
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    out = []
    if suite.get("primary") is not None:  # the report's default primary metric for this suite
        out += metric_problems("suite.primary", [suite.primary])
    if "path" in params:
        out += _path_problems_of(suite, getattr(loader, "reads_folder", False))  # suites/files.py
    for key in suite:
        if key in SUITE_META_KEYS or (key == "path" and key in params):
            continue
        if key not in params and not takes_any:
            out.append(f"suite.{key}: not an argument of {target} (it takes: {', '.join(params) or 'none'})")
            continue
        value, missing = _get(suite, key, "suite.")
        if missing:
            out.append(missing)
            continue
        hint = hints.get(key, Any)
        out += [f"suite.{key}{sub}: {problem}" for sub, problem in value_problems(value, hint)]
    return out


def _path_problems_of(suite: DictConfig, wants_directory: bool) -> list[str]:
    path, missing = _get(suite, "path", "suite.")
    if missing:
        return [missing]
    if path is None:
        return ["suite.path: null, but this suite reads its data from disk: give suite.path=DIR"]
    return _path_problems("suite.path", path, wants_directory)


def variant_problems(cfg: DictConfig) -> list[str]:
    variant = cfg.get("variant")
    order, missing = _get(variant, "stages", "variant.") if isinstance(variant, DictConfig) else (None, None)
    if missing:
        return [missing]
    if not isinstance(order, list) or not order or not all(isinstance(s, str) for s in order):
        return [f"variant.stages: expected a list of stage names, got {order!r}"]
    if not isinstance(cfg.get("stage"), DictConfig):
        return ["stage: expected a mapping of stage name to stage config"]
    name, missing = _get(variant, "name", "variant.")
    if missing:
        return [missing]
    problem = name_problem("variant", name)
    return [] if problem is None else [f"variant.name: {problem}"]


def tracking_problems(cfg: DictConfig, resolved: Mapping[str, Any] | None) -> list[str]:
    """MLflow's length limits, checked before the run rather than met after it: the experiment name, and
    every config key, each of which becomes a param key (param values are truncated, the full config is
    an artifact). Suite and variant names are bounded by experiments.names."""
    tracking = cfg.get("tracking")
    if not isinstance(tracking, DictConfig) or not tracking.get("enabled"):
        return []
    out = []
    tracker = tracking.get("tracker")
    experiment, missing = (
        _get(tracker, "experiment", "tracking.tracker.")
        if isinstance(tracker, DictConfig) and "experiment" in tracker
        else (None, None)
    )
    if missing:
        out.append(missing)
    elif isinstance(experiment, str) and not 0 < len(experiment) <= MAX_EXPERIMENT_NAME_CHARS:
        out.append(
            f"tracking.tracker.experiment: MLflow takes an experiment name of 1 to "
            f"{MAX_EXPERIMENT_NAME_CHARS} characters, got {len(experiment):,}"
        )
    for key in flatten(resolved) if resolved is not None else ():
        if len(key) > MAX_KEY_CHARS:
            out.append(
                f"{key[:60]}...: a config key of {len(key):,} characters, MLflow's limit is {MAX_KEY_CHARS}"
            )
    return out


def system_problems(cfg: DictConfig) -> list[str]:
    """The live system's adapter (`system.adapter`, variant=system): its class is named (system=python leaves
    that to the command line), imports, and takes every key given. Another system file's keys (variant=system
    defaults to system=memeval_serve, an HTTP adapter) reaching a user's class would otherwise be a
    TypeError naming only the first of them."""
    adapter = OmegaConf.select(cfg, "system.adapter") if "system" in (cfg.get("stage") or {}) else None
    if not isinstance(adapter, DictConfig):
        return []
    target, missing = _get(adapter, "_target_", "system.adapter.")
    if missing:
        return [f"{missing}, e.g. system.adapter._target_=my_store.FtsStore (docs/live_systems.md)"]
    module, _, name = str(target).rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as err:  # ValueError: no module part at all
        return [
            f"system.adapter._target_: cannot import {target} ({type(err).__name__}: {err}); put its "
            "package on PYTHONPATH or install it into this venv"
        ]
    out = []
    lacking = [m for m in PROTOCOL_METHODS if not callable(getattr(cls, m, None))]
    if lacking:
        out.append(
            f"system.adapter._target_: {target} has no {', '.join(lacking)} (the protocol of "
            "experiments/systems/protocol.py: reset, ingest, wait_until_searchable, search, close)"
        )
    parameters = inspect.signature(cls).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return out
    unknown = sorted(set(adapter) - {p.name for p in parameters} - set(SUITE_META_KEYS))
    if unknown:
        out.append(
            f"system.adapter: {target} takes no {', '.join(unknown)}: these come from the system file "
            "the run composed (variant=system's default is system=memeval_serve, an HTTP adapter). A Python "
            "class starts from system=python: "
            f"memeval-run variant=system system=python system.adapter._target_={target}"
        )
    return out


def config_problems(cfg: DictConfig, resolved: Mapping[str, Any] | None = None) -> list[str]:
    """Every problem of a run config that shows without building its stages (`resolved`: the config
    already resolved to a container, when it resolves). The stages' own problems come from building
    them, once, in the run (experiments/configure/build.py: `checked_pipeline`), listed after these."""
    problems = run_problems(cfg) + budget_problems(cfg.get("budget")) + suite_problems(cfg)
    problems += variant_problems(cfg)
    return problems + tracking_problems(cfg, resolved) + system_problems(cfg)


def stages_checkable(problems: Sequence[str]) -> bool:
    """Whether building the stages can tell their problems: the variant's stage list, the `stage` mapping
    and a live system's adapter are sound."""
    return not any(p.startswith(("variant.stages", "variant:", "stage:", "system.adapter")) for p in problems)


def buildable_depth(cfg: DictConfig) -> int:
    """The depth to build the stages at: a bad depth is already a problem, and the stages are still built
    (at any valid depth) so that theirs are listed with it."""
    return cfg.depth if _is_int(cfg.get("depth")) else 1
