"""A new store copied from the template is the store MLflow makes: every table's schema and rows equal
(the Default experiment's times apart), and MlflowClient reads it; a template that is not one empty,
complete store is ignored and made again."""

from __future__ import annotations

import sqlite3

import mlflow
import pytest

from experiments.track import store_template
from experiments.track.mlflow_tracker import _migrate_new_store, ensure_store


@pytest.fixture
def here(tmp_path, monkeypatch):
    """A working directory and a template cache of the test's own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    for name in store_template._OTHER_DEFAULTS:
        monkeypatch.delenv(name, raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def dump(path) -> dict[str, object]:
    """Every table's DDL and rows, the Default experiment's two times left out."""
    con = sqlite3.connect(path)
    try:
        # each DDL's lines as a set: MLflow's own stores differ in the order of a table's constraints
        tables = {
            name: sorted(line.strip(" ,") for line in (sql or "").splitlines())
            for name, sql in con.execute("select name, sql from sqlite_master")
        }
        rows = {}
        for (name,) in con.execute("select name from sqlite_master where type = 'table'"):
            cursor = con.execute(f'select * from "{name}"')
            columns = [c[0] for c in cursor.description]
            rows[name] = sorted(
                tuple(
                    v
                    for c, v in zip(columns, row, strict=True)
                    if not (name == "experiments" and c.endswith("_time"))
                )
                for row in cursor
            )
    finally:
        con.close()
    return {"schema": tables, "rows": rows}


def test_a_store_from_the_template_is_the_store_mlflow_makes(here):
    _migrate_new_store(here / "by_mlflow.db")
    assert store_template.template_path() is not None and not store_template.template_path().exists()

    ensure_store(f"sqlite:///{here / 'first.db'}")  # made by MLflow, and kept as the template
    assert store_template.template_path().is_file()
    ensure_store(f"sqlite:///{here / 'copied.db'}")  # copied from it

    expected = dump(here / "by_mlflow.db")
    assert dump(here / "copied.db") == expected and dump(here / "first.db") == expected
    assert expected["rows"]["experiments"][0][:3] == (0, "Default", f"{here}/mlruns/0")
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{here / 'copied.db'}")
    (default,) = client.search_experiments()
    assert default.name == "Default" and default.creation_time > 0
    run = client.create_run(client.create_experiment("x")).info.run_id
    client.log_metric(run, "P_at_5", 0.5)
    assert client.get_run(run).data.metrics == {"P_at_5": 0.5}


def test_an_experiment_made_without_mlflow_is_the_one_mlflow_makes(here):
    # the same store twice; in one MlflowClient makes the experiments, in the other sqlite_run does
    from experiments.track.mlflow_tracker import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG
    from experiments.track.sqlite_run import create_experiment

    tags = {EXPERIMENT_KIND_TAG: EXPERIMENT_KIND}
    for name in ("by_mlflow.db", "direct.db"):
        ensure_store(f"sqlite:///{here / name}")
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{here / 'by_mlflow.db'}")
    root = store_template.default_artifact_root()
    names = ["memeval", "a name with spaces, punctuation: & ü", "x" * 500]
    made = [client.create_experiment(n, tags=tags) for n in names]

    def direct(store: str, name: str) -> str | None:
        return create_experiment(here / store, name, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND, root)

    assert [direct("direct.db", n) for n in names] == made == ["1", "2", "3"]
    assert dump(here / "direct.db") == dump(here / "by_mlflow.db")
    reader = mlflow.MlflowClient(tracking_uri=f"sqlite:///{here / 'direct.db'}")
    made_direct = reader.get_experiment_by_name("memeval")
    assert made_direct.artifact_location == f"{here}/mlruns/1" and made_direct.tags == tags
    assert made_direct.creation_time > 0 and made_direct.creation_time == made_direct.last_update_time
    # made already, by another process: its id; names MLflow refuses, or a deleted one: MLflow decides
    assert direct("direct.db", "memeval") == "1"
    client.delete_experiment(made[0])
    assert direct("by_mlflow.db", "memeval") is None
    assert direct("direct.db", "") is None
    assert direct("direct.db", "x" * 501) is None


@pytest.mark.parametrize("damage", ["truncated", "holds a run", "not sqlite"])
def test_a_damaged_template_is_ignored_and_made_again(here, damage):
    ensure_store(f"sqlite:///{here / 'first.db'}")
    template = store_template.template_path()
    if damage == "truncated":
        template.write_bytes(template.read_bytes()[:50_000])
    elif damage == "holds a run":
        client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{template}")
        client.create_run("0")
        mlflow.store.tracking.sqlalchemy_store.SqlAlchemyStore._engine_map.clear()
    else:
        template.write_text("import os  # not a store\n")
    assert not store_template.is_empty_store(template)

    ensure_store(f"sqlite:///{here / 'next.db'}")  # MLflow makes it, and it replaces the template
    assert store_template.is_empty_store(here / "next.db") and store_template.is_empty_store(template)
    assert dump(here / "next.db") == dump(here / "first.db")


def test_where_mlflow_would_write_another_default_no_template_stands_in(here, monkeypatch, tmp_path):
    monkeypatch.setenv("_MLFLOW_SERVER_ARTIFACT_ROOT", "s3://bucket/artifacts")
    assert store_template.template_path() is None and store_template.default_artifact_root() is None
    monkeypatch.delenv("_MLFLOW_SERVER_ARTIFACT_ROOT")
    odd = tmp_path / "a folder#1"
    odd.mkdir()
    monkeypatch.chdir(odd)
    assert store_template.template_path() is None and store_template.default_artifact_root() is None
