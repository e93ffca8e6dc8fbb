"""A benchmark report as another machine reads it: committed, so no absolute path of this one.

text = portable(text, work=scratch)   # `$WORK/...`, `../shared/beam/100K`, `…/beam10M`
path = report_file(args.out, "live_system.md")   # `--out <a folder>` writes that name inside it
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from experiments import PROJECT_ROOT

_ABSOLUTE = re.compile(r"(?<![\w.~$-])/[^\s`'\"|,)]+")


def portable(text: str, work: Path | None = None) -> str:
    """`text` with each absolute path rewritten: the scratch folder `work` as `$WORK`, a path beside the
    checkout relative to it (`../shared/beam/100K`), any other by its name (`…/scale.md`)."""
    work = work.resolve() if work is not None else None

    def relative(match: re.Match) -> str:
        path = Path(match[0])
        if work is not None and (path == work or work in path.parents):
            return "$WORK/" + path.relative_to(work).as_posix() if path != work else "$WORK"
        if PROJECT_ROOT.parent.resolve() in path.parents:
            return os.path.relpath(path, PROJECT_ROOT)
        return f"…/{path.name}"

    return _ABSOLUTE.sub(relative, text)


def report_file(out: str | Path, name: str) -> Path:
    """Where a benchmark writes its report, decided before any measurement: `out` itself, or `out/name`
    when `out` is a folder (one that exists, or written with a trailing `/`); its folder is made."""
    path = Path(out)
    if path.is_dir() or str(out).endswith(("/", os.sep)):
        path = path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return path
