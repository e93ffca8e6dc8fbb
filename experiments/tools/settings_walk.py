"""Follow a run's settings through the code: which files receive them whole, in the order a run does.

    python -m experiments.tools.settings_walk suite=spark25 variant=hybrid
    python -m experiments.tools.settings_walk --json -- -m suite=spark25 stage.bm25.k1=1.2,1.5  # a sweep

Runs `memeval-run` in this process with the given overrides (a real run: its folder goes to a temporary
directory unless `hydra.run.dir` is given) and records every call into the project's code (experiments/,
retrieval/, hydra_plugins/) that is handed the run's settings whole: the composed config (a root
DictConfig), the record made from it once (configure/settings.py `RunSettings`), or that record's resolved
config (`RunSettings.config`). A field taken out of them (a path, a metric name, the stage nodes) is the
callee's own value, not the settings, and is not followed. Prints each stay (a file entered, until a call
enters another file) and the totals: files, stays, the most stays of one file. tests/project/
test_settings_walk.py holds a run to the bound #42 set (at most 12 files, no file stayed in more than twice).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

REPO = Path(__file__).resolve().parents[2]
ROOTS = tuple(str(REPO / top) + "/" for top in ("experiments", "retrieval", "hydra_plugins"))
HERE = str(Path(__file__).resolve())
# What a run imports when it gets there (evaluation, MLflow, the tracker's store): imported first.
WARM_IMPORTS = ("pandas", "scipy.stats", "mlflow", "sqlalchemy", "alembic", "experiments.evaluate.table")


@dataclass(frozen=True)
class Call:
    """One call handed the settings: the callee's file (relative to the repository), function, the
    parameters that received them and what each received: `config` (the composed DictConfig), `record`
    (RunSettings) or `resolved` (the config resolved to a mapping)."""

    file: str
    function: str
    params: tuple[str, ...]
    kinds: tuple[str, ...]


@dataclass(frozen=True)
class Walk:
    calls: tuple[Call, ...]

    @property
    def stays(self) -> list[tuple[str, list[Call]]]:
        """The calls grouped into stays: consecutive calls into one file are one stay."""
        out: list[tuple[str, list[Call]]] = []
        for call in self.calls:
            if out and out[-1][0] == call.file:
                out[-1][1].append(call)
            else:
                out.append((call.file, [call]))
        return out

    @property
    def files(self) -> list[str]:
        return list(dict.fromkeys(c.file for c in self.calls))

    def visits(self) -> Counter[str]:
        return Counter(file for file, _ in self.stays)


class _Recorder:
    """A profile function: at each call into the project's code, the parameters whose value is the
    settings (by identity, so a copy or a field is not the settings)."""

    def __init__(self) -> None:
        from experiments.configure.settings import RunSettings

        self._record = RunSettings
        self._configs: dict[int, Any] = {}  # id -> the config resolved to a mapping (kept alive)
        self._handed: dict[int, bool] = {}  # frame of a call handed the settings -> handed the config itself
        self.calls: list[Call] = []

    def _kind(self, value: Any) -> str | None:
        if isinstance(value, self._record):
            self._configs[id(value.config)] = value.config
            return "record"
        if type(value).__name__ == "DictConfig":  # the composed config itself, not one of its nodes
            return "config" if value._get_parent() is None else None
        return "resolved" if isinstance(value, Mapping) and self._configs.get(id(value)) is value else None

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "return" and id(frame) in self._handed:
            # A record made, or the composed config resolved to a mapping (OmegaConf.to_container), is
            # the settings too: its later calls are followed.
            if isinstance(arg, self._record):
                self._configs[id(arg.config)] = arg.config
            elif self._handed.pop(id(frame)) and isinstance(arg, dict) and arg:
                self._configs[id(arg)] = arg
            return
        if event != "call":
            return
        code = frame.f_code
        if not code.co_filename.startswith(ROOTS) or code.co_filename == HERE:
            return
        count = code.co_argcount + code.co_kwonlyargcount
        names = code.co_varnames[:count]
        local = frame.f_locals
        handed = [(n, kind) for n in names if n in local and (kind := self._kind(local[n])) is not None]
        if handed:
            self._handed[id(frame)] = any(kind == "config" for _, kind in handed)
            file = code.co_filename[len(str(REPO)) + 1 :]
            self.calls.append(Call(file, code.co_qualname, *map(tuple, zip(*handed, strict=True))))


def walk(overrides: Sequence[str], entry: Callable[[], Any] | None = None) -> Walk:
    """The walk of one `memeval-run` with `overrides`, run in this process (`entry`: the console script's
    function, experiments/run/app.py `main` by default). A run that fails raises SystemExit."""
    import importlib

    from experiments.run.app import main

    for module in WARM_IMPORTS:  # imported before the profile is on: an import hands no settings on, and
        importlib.import_module(module)  # its module-level calls would only slow the walk down
    recorder = _Recorder()
    argv = sys.argv
    sys.argv = ["memeval-run", *overrides]
    sys.setprofile(recorder)
    threading.setprofile(recorder)
    try:
        (entry or main)()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
        sys.argv = argv
    return Walk(tuple(recorder.calls))


def render(walk: Walk) -> str:
    lines = []
    for i, (file, calls) in enumerate(walk.stays, 1):
        functions = list(dict.fromkeys(f"{c.function}({', '.join(c.params)})" for c in calls))
        shown = ", ".join(functions[:4]) + (f", and {len(functions) - 4} more" if len(functions) > 4 else "")
        lines.append(f"{i:3d}. {file}: {shown}")
    visits = walk.visits()
    most = max(visits.values(), default=0)
    lines.append(
        f"{len(walk.files)} files, {len(walk.stays)} stays, {len(walk.calls)} calls; the most stays in one "
        f"file: {most} ({', '.join(f for f, n in visits.items() if n == most)})"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*", help="memeval-run's overrides (suite=..., variant=...)")
    parser.add_argument("--json", action="store_true", help="print the calls as JSON lines, not the stays")
    args = parser.parse_args(argv)
    overrides = list(args.overrides)
    with tempfile.TemporaryDirectory(prefix="memeval-settings-walk-") as tmp:
        if not any(o.startswith("hydra.run.dir=") for o in overrides):
            overrides.append(f"hydra.run.dir={tmp}/run")
        result = walk(overrides)
    if args.json:
        print("\n".join(json.dumps(dataclasses.asdict(call)) for call in result.calls))
    else:
        print(render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
