"""A new MLflow SQLite store, copied from an empty one MLflow made before, instead of migrated afresh.

MLflow makes a SQLite store by running all its schema migrations: ~5 s of CPU (2 cores, avx2), paid by
the first run in every new folder, and by every test that starts a store. The stores one MLflow makes
are the same file but for the Default experiment's artifact folder and times. So the first store made
is kept as a template, named by what made it (MLflow's and SQLAlchemy's versions and the schema head),
in `$XDG_CACHE_HOME/memeval/mlflow-stores/` (default `~/.cache`). Later stores copy it and set those
three values as MLflow sets them: `<working directory>/mlruns/0` and the time now.

A cache, not a source of truth: a template that is not one complete, empty store at this MLflow's
schema head is ignored and made again. Where MLflow would write something else (a server's artifact
root in the environment, workspaces enabled, a working directory whose path a URI parser would read
differently), MLflow makes the store itself.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from experiments.track.sqlite_run import at_head, schema_head

# What makes MLflow write another Default experiment than `<cwd>/mlruns/0` (mlflow.tracking's
# _get_sqlalchemy_store): a server's artifact root, or workspace-aware stores.
_OTHER_DEFAULTS = ("_MLFLOW_SERVER_ARTIFACT_ROOT", "MLFLOW_ENABLE_WORKSPACES")
_PLAIN_PATH = re.compile(r"[\w./+-]+")  # no character a URI parser reads as a query, fragment or escape


def default_artifact_root() -> str | None:
    """The artifact root MlflowClient gives a local SQLite store in this process (`<cwd>/mlruns`, a
    posix path): the Default experiment's is `<root>/0`, a new experiment's `<root>/<id>`. None where
    MLflow would use another root, or a URI parser would read the path differently."""
    if any(os.environ.get(name) for name in _OTHER_DEFAULTS) or not _PLAIN_PATH.fullmatch(str(Path.cwd())):
        return None
    return (Path.cwd() / "mlruns").as_posix()


def template_path() -> Path | None:
    """Where this MLflow's template store is kept; None when no template may stand in for MLflow."""
    if default_artifact_root() is None:
        return None
    try:
        made_by = f"mlflow-{version('mlflow')}-sqlalchemy-{version('sqlalchemy')}-{schema_head()}"
    except (PackageNotFoundError, RuntimeError):
        return None
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "memeval" / "mlflow-stores" / f"{made_by}.db"


def is_empty_store(path: Path) -> bool:
    """Whether `path` is one complete MLflow store at this schema head holding only the Default
    experiment and no run."""
    if not at_head(path):
        return False
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            experiments = [r[0] for r in con.execute("select experiment_id from experiments")]
            runs = con.execute("select count(*) from runs").fetchone()[0]
            check = con.execute("pragma quick_check").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return False
    return experiments == [0] and runs == 0 and check == "ok"


def copy_template(dest: Path) -> bool:
    """Write a new store at `dest` from the template, as MLflow would make it here; False (nothing
    written) when there is no usable template."""
    template = template_path()
    if template is None or not template.is_file() or not is_empty_store(template):
        return False
    shutil.copyfile(template, dest)
    now = int(time.time() * 1000)
    con = sqlite3.connect(dest)
    try:
        with con:
            con.execute(
                "update experiments set artifact_location = ?, creation_time = ?, last_update_time = ?"
                " where experiment_id = 0",
                (f"{default_artifact_root()}/0", now, now),
            )
    finally:
        con.close()
    return True


def keep_template(made: Path) -> None:
    """Keep the store MLflow just made at `made` as the template (the first one kept wins; a template
    that cannot be written costs only the next store's migrations)."""
    template = template_path()
    if template is None or (template.is_file() and is_empty_store(template)) or not is_empty_store(made):
        return
    partial = template.with_name(f".{template.name}.{os.getpid()}.partial")
    try:
        template.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(made, partial)
        os.replace(partial, template)  # whole or absent, whoever else is writing one
    except OSError:
        partial.unlink(missing_ok=True)
