"""What a run shows in MLflow's params and run name: each setting once, in one text form.

MLflow's "diff only" view and its compare page are only as useful as the params are clean, so:
- a setting that only refers to another (`stage.dense.encoder: ${encoder}`) is logged once, at its source;
- Hydra's wiring (`_target_`, `_partial_`...) is not a setting, and housekeeping (progress bars, resume,
  cache folders, the tracking store) changes no result: neither is a param (the store is a tag);
- every value has one spelling (`param_text`): the weight 0 of a sweep and 0.0 of a study are both `0`,
  lists are JSON, not Python reprs.

A sweep's or a study's child is named by what varies among its siblings (`exp05 weight=0.1`).
The full resolved config is still logged as `config.yaml`, and reports read a run's settings from it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser

from experiments.track.mlflow_tracker import safe_key

MAX_PARAM_CHARS = 500  # MLflow's param value limit is larger; the full config is an artifact

# Keys that wire Hydra's instantiate, not settings of the run.
HYDRA_WIRING = frozenset({"_target_", "_partial_", "_convert_", "_recursive_", "_args_"})
# Keys that change how a run is shown or where it is stored, never its numbers, wherever they sit: not
# params, and not part of a run's config hash (experiments/run/resume.py).
VOLATILE_KEYS = frozenset(
    {"hydra", "progress", "show_progress", "cache_dir", "export_dir", "tracking", "resume"}
)


def param_text(value: Any) -> str:
    """The one text form of a config value: numbers by value (`0` for 0 and 0.0, `0.35`), JSON for
    lists, mappings, null and booleans (`[0.1, 0.2]`, `null`, `true`), strings as they are."""
    if isinstance(value, str):
        return value
    return json.dumps(_canonical(value), ensure_ascii=False) if not _is_number(value) else _number(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _number(value: int | float) -> str:
    number = float(value)
    if math.isfinite(number) and number.is_integer() and abs(number) < 1e16:
        return str(int(number))
    return repr(number) if isinstance(value, float) else str(value)


def _canonical(value: Any) -> Any:
    """JSON-ready, numbers written as `param_text` writes them (json keeps ints and floats apart)."""
    if _is_number(value):
        return json.loads(_number(value)) if math.isfinite(float(value)) else _number(value)
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    return value


def run_params(resolved: Mapping[str, Any], references: AbstractSet[str] = frozenset()) -> dict[str, str]:
    """The run's settings as MLflow params: `resolved` (the resolved config) flattened, each setting
    once (`references`: the dotted keys that only refer to another, experiments/configure/settings.py),
    no wiring, no housekeeping."""
    out: dict[str, str] = {}
    _walk(resolved, references, "", out)
    safe: dict[str, str] = {}
    for key, text in out.items():  # a service's own keys (`$contains`) too: the rule of every MLflow key
        safe[safe_key(key, safe)] = text
    return safe


def _walk(values: Any, references: AbstractSet[str], prefix: str, out: dict[str, str]) -> None:
    for key, value in values.items():
        name = f"{prefix}{key}"
        if key in HYDRA_WIRING or key in VOLATILE_KEYS:
            continue
        if name in references:  # logged where it is defined
            continue
        if isinstance(value, Mapping):
            _walk(value, references, f"{name}.", out)
        else:
            text = param_text(value)
            out[name] = text if len(text) <= MAX_PARAM_CHARS else text[: MAX_PARAM_CHARS - 3] + "..."


def short_key(key: str) -> str:
    """A setting's name in a run name: the field (`weight` for `stage.instruction_boost.weight`)."""
    return key.rsplit(".", 1)[-1].lstrip("+~")


def child_run_name(variant: str, varying: Mapping[str, Any]) -> str:
    """`exp05 weight=0.1`: the variant, then each setting that tells this run from its siblings. Two
    settings with the same field name keep their full keys, so the name never hides which one varied."""
    shorts = [short_key(k) for k in varying]
    parts = [
        f"{short if shorts.count(short) == 1 else key.lstrip('+~')}={param_text(value)}"
        for (key, value), short in zip(varying.items(), shorts, strict=True)
        if key not in ("variant", "variant.name")
    ]
    return " ".join([variant, *parts])


def sweep_run_name(overrides: Sequence[str], axes: Mapping[str, str], variant: str | None) -> str:
    """A sweep parent's MLflow name: what it sweeps first (`sweep exp05 weight=0,0.1,0.2`), so a runs table
    that cuts names still tells sweeps apart; the settings every job shares are its params."""
    if "variant" in axes:  # the variants are what it sweeps: they lead (child_run_name names a variant apart)
        return child_run_name(f"sweep variant={axes['variant']}", dict(axes))
    label = override_values(overrides).get("variant") or variant
    return child_run_name(f"sweep {label}" if label else "sweep", dict(axes))


def live_run_name(suite: str, variant: str, system: str | None, mode: str | None) -> str:
    """A live run's MLflow name: the suite, the variant and which service in which mode
    (`spark25-system atomicmemory live`), so runs of different services or modes read apart."""
    return " ".join(x for x in (f"{suite}-{variant}", system, mode) if x)


def varying_overrides(overrides_per_run: Sequence[Sequence[str]]) -> list[str]:
    """The override keys whose value differs between runs (or that only some runs give), in first-seen
    order: what a sweep or a study varies."""
    parsed = [override_values(o) for o in overrides_per_run]
    keys = list(dict.fromkeys(k for p in parsed for k in p))
    return [k for k in keys if len({p.get(k) for p in parsed}) > 1]


def override_values(overrides: Sequence[str]) -> dict[str, str]:
    """`key=value` overrides as key -> value as given, `+key`/`~key` by their bare key (MLflow refuses
    `+` and `~` in a key)."""
    pairs = (o.split("=", 1) for o in overrides if "=" in o)
    return {key.lstrip("+~"): value for key, value in pairs}


def sweep_axes(overrides: Sequence[str]) -> dict[str, str]:
    """A multirun's sweeping overrides (`stage.instruction_boost.weight=0,0.2,0.35`): key -> its values as
    given. Read with Hydra's own override parser, so `choice(...)`, `range(...)` and globs count too."""
    parsed = OverridesParser.create().parse_overrides(list(overrides))
    return {
        o.key_or_group.lstrip("+~"): o.input_line.split("=", 1)[1] for o in parsed if o.is_sweep_override()
    }


def job_values(resolved: Mapping[str, Any], overrides: Sequence[str], keys: Sequence[str]) -> dict[str, Any]:
    """This run's value of each of `keys`: the value in `resolved` (the config resolved) where the key is a
    setting (so a sweep's `0` and a study's `0.0` read alike), else the override as given (a group choice,
    `variant=bm25`)."""
    given = override_values(overrides)
    out: dict[str, Any] = {}
    for key in keys:
        value = _select(resolved, key)
        if isinstance(value, Mapping | list) or value is None:
            value = given.get(key)
        if value is not None:
            out[key] = value
    return out


def _select(node: Any, key: str) -> Any:
    """The value at a dotted key (`stage.bm25.k1`, a list item by its index), None where there is none."""
    for part in key.split("."):
        if isinstance(node, Mapping):
            node = node.get(part)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node
