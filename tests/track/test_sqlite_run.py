"""A run written straight into a warm local SQLite store (experiments/track/sqlite_run.py) reads back
through MlflowClient exactly as the same run written through MlflowClient, but for its id and times,
and writing it imports no MLflow (issue 41: tracking's added cost per run).

A real SQLite store, created once for the module through `ensure_store` (~5-10 s: those tests are slow).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from experiments.track import sqlite_run
from experiments.track.mlflow_tracker import (
    MlflowTracker,
    SuiteDataset,
    _experiment_id,
    ensure_store,
)

pytestmark = pytest.mark.slow  # a new SQLite store takes ~10 s to create


def test_the_schema_head_read_as_text_is_mlflows_own():
    from mlflow.store.db.utils import _get_latest_schema_revision

    assert sqlite_run.schema_head() == _get_latest_schema_revision()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    folder = tmp_path_factory.mktemp("store")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    ensure_store(uri)
    experiment = _experiment_id("direct", uri)  # a new experiment is MlflowClient's, once
    return folder, uri, experiment


def _log(tracker: MlflowTracker, run_dir: Path) -> str:
    return tracker.log(
        run_name="spark25-bm25",
        params={"variant.name": "bm25", "stage.bm25.k1": "1.2"},
        metrics={"nDCG_at_10": 0.5, "P_at_5": float("nan"), "wall_s": float("inf"), "scope_leaks": 0.0},
        metric_names={"nDCG_at_10": "nDCG@10", "P_at_5": "P@5"},
        tags={"git_commit": "abc", "suite_hash": "s" * 8, "memeval.config_hash": "c" * 8},
        run_dir=run_dir,
        config_text="variant:\n  name: bm25\n",
        started_ms=1_000_000,
        dataset=SuiteDataset("spark25", "d" * 64, "/suites/spark25.json", {"queries": 24, "memories": 5}),
    )


def _view(client, run_id: str) -> dict:
    """Everything MlflowClient shows of a run, with its id taken out and its times left out."""
    run = client.get_run(run_id)
    info = run.info
    root = client.get_experiment(info.experiment_id).artifact_location
    artifacts = {}
    pending = [None]
    while pending:
        for item in client.list_artifacts(run_id, pending.pop()):
            if item.is_dir:
                pending.append(item.path)
            else:
                local = Path(
                    client.download_artifacts(run_id, item.path, str(Path(root).parent / "dl" / run_id))
                )
                artifacts[item.path] = (item.file_size, local.read_bytes())
    # repr: NaN equals NaN
    history = {
        k: [(repr(m.value), m.step) for m in client.get_metric_history(run_id, k)] for k in run.data.metrics
    }
    return {
        "info": (info.status, info.lifecycle_stage, info.user_id, info.run_name, info.experiment_id),
        "artifact_uri": info.artifact_uri.replace(run_id, "<id>"),
        "started": info.start_time,
        "params": run.data.params,
        "metrics": {k: repr(v) for k, v in run.data.metrics.items()},
        "history": history,
        "tags": run.data.tags,
        "artifacts": artifacts,
        "inputs": [
            (d.dataset.name, d.dataset.digest, d.dataset.source_type, d.dataset.source, d.dataset.profile,
             d.dataset.schema, sorted((t.key, t.value) for t in d.tags))
            for d in run.inputs.dataset_inputs
        ],
    }  # fmt: skip


def test_a_run_written_directly_reads_back_as_the_clients_and_is_listed(store, monkeypatch):
    import mlflow

    folder, uri, experiment = store
    monkeypatch.chdir(folder)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run_dir = folder / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / "metrics.json").write_text('{"overall": {}}')
    (run_dir / "run.trec").write_text("".join(f"q1 Q0 m{i} {i} 1.0 bm25\n" for i in range(60)))
    (run_dir / "run.log").write_text("")  # empty: left out both ways
    (run_dir / ".hydra" / "overrides.yaml").write_text("- variant=bm25\n")
    tracker = MlflowTracker(experiment="direct", uri=uri)

    written = []
    real_write = sqlite_run.write_run
    monkeypatch.setattr(
        sqlite_run, "write_run", lambda *a, **k: written.append(real_write(*a, **k)) or written[-1]
    )
    direct_id = _log(tracker, run_dir)
    assert written == [direct_id]  # the direct writer wrote it
    monkeypatch.setattr(MlflowTracker, "_log_direct", lambda *a, **k: None)
    client_id = _log(tracker, run_dir)
    assert written == [direct_id]  # and MlflowClient this one

    client = mlflow.MlflowClient(tracking_uri=uri)
    direct, through_client = _view(client, direct_id), _view(client, client_id)
    assert direct == through_client
    assert direct["info"][:2] == ("FINISHED", "active") and direct["started"] == 1_000_000
    assert direct["tags"]["mlflow.runName"] == "spark25-bm25" and float(direct["metrics"]["wall_s"]) > 1e300
    assert {"config.yaml", "metric_names.json", "run.trec.head.txt", ".hydra/overrides.yaml"} <= set(
        direct["artifacts"]
    )
    assert client.get_run(direct_id).info.end_time >= client.get_run(direct_id).info.start_time
    # the UI's listing of the experiment, and a search by tag as resume's lookup asks
    listed = client.search_runs([experiment], order_by=["attributes.start_time DESC"])
    assert {r.info.run_id for r in listed} == {direct_id, client_id}
    found = client.search_runs(
        [experiment], "tags.`memeval.config_hash` = 'cccccccc' and attributes.status = 'FINISHED'"
    )
    assert {r.info.run_id for r in found} == {direct_id, client_id}
    # one dataset row for the experiment, linked to both runs (as log_inputs reuses it)
    con = sqlite_run.connect(folder / "mlflow.db")
    assert con.execute(
        "select count(*) from datasets where experiment_id = ?", (int(experiment),)
    ).fetchone() == (1,)
    con.close()  # fmt: skip


def test_a_run_into_a_new_or_marked_experiment_imports_no_mlflow_and_an_unmarked_one_uses_the_client(
    store, tmp_path
):
    folder, uri, _ = store
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.json").write_text("{}")
    con = sqlite_run.connect(folder / "mlflow.db")
    con.execute(  # an experiment without memeval's kind tag (made by hand, or by an older memeval)
        "insert into experiments (name, lifecycle_stage, artifact_location) values ('by-hand', 'active', ?)",
        (f"{folder}/mlruns/by-hand",),
    )
    con.close()
    code = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from experiments.track.mlflow_tracker import MlflowTracker
        for experiment in ("direct", "brand-new", "brand-new", "by-hand"):
            MlflowTracker(experiment=experiment, uri={uri!r}).log(
                run_name="r", params={{}}, metrics={{"m": 1.0}}, tags={{}}, run_dir=Path({str(run_dir)!r}),
                config_text="", started_ms=None)
            print(experiment, "mlflow" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=folder, check=True)
    imported = out.stdout.split("\n")[:4]
    assert imported == ["direct False", "brand-new False", "brand-new False", "by-hand True"]
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=uri)
    for name in ("brand-new", "by-hand"):
        experiment = client.get_experiment_by_name(name)
        assert experiment.tags["mlflow.experimentKind"] == "custom_model_development", name
        runs = client.search_runs([experiment.experiment_id])
        assert [r.data.metrics for r in runs] == [{"m": 1.0}] * (2 if name == "brand-new" else 1), name
    new = client.get_experiment_by_name("brand-new")
    assert new.artifact_location == f"{folder}/mlruns/{new.experiment_id}"


def test_several_processes_writing_at_once_all_arrive_with_one_dataset_row(store, tmp_path):
    folder, uri, experiment = store
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.json").write_text("{}")
    code = textwrap.dedent(f"""
        from pathlib import Path
        from experiments.track.mlflow_tracker import MlflowTracker, SuiteDataset
        for i in range(5):
            MlflowTracker(experiment="direct", uri={uri!r}).log(
                run_name="parallel", params={{"i": str(i)}}, metrics={{"m": float(i)}}, tags={{}},
                run_dir=Path({str(run_dir)!r}), config_text="", started_ms=None,
                dataset=SuiteDataset("parallel-suite", "e" * 64, "/x", {{}}))
    """)
    workers = [
        subprocess.Popen([sys.executable, "-c", code], cwd=folder, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    errors = [w.communicate()[1] for w in workers]
    assert [w.returncode for w in workers] == [0] * 4, errors
    con = sqlite_run.connect(folder / "mlflow.db")
    try:
        runs = con.execute("select count(*) from runs where name = 'parallel'").fetchone()[0]
        datasets = con.execute("select count(*) from datasets where name = 'parallel-suite'").fetchone()[0]
        links = con.execute(
            "select count(*) from inputs i join datasets d on d.dataset_uuid = i.source_id"
            " where d.name = 'parallel-suite'"
        ).fetchone()[0]
    finally:
        con.close()
    assert (runs, datasets, links) == (20, 1, 20)


def test_the_finished_run_lookup_reads_a_warm_store_as_mlflowclient_does(store, monkeypatch):
    from experiments.run.resume import CODE_VERSION_TAG, finished_in_mlflow
    from experiments.run_folder import PARTIAL_TAG

    folder, uri, experiment = store
    monkeypatch.chdir(folder)
    run_dir = folder / "lookup"
    run_dir.mkdir()
    (run_dir / "metrics.json").write_text('{"config_hash": "h1", "suite": {"content_hash": "s1"}}')
    tracker = MlflowTracker(experiment="direct", uri=uri)

    def log(code: str, extra: dict[str, str]) -> str:
        return tracker.log(
            run_name="lookup",
            params={},
            metrics={"nDCG_at_10": 0.25, "R_at_10": float("nan")},
            metric_names={"nDCG_at_10": "nDCG@10", "R_at_10": "R@10"},
            tags={"memeval.config_hash": "h1", "suite_hash": "s1", CODE_VERSION_TAG: code, **extra},
            run_dir=run_dir,
            config_text="",
        )

    older = log("v1", {})
    log("v1", {PARTIAL_TAG: "1 of 2 shards"})  # newer, but a partial merge answers for no job
    log("v2", {})  # another code version

    def lookup(experiment_id):
        return finished_in_mlflow(uri, "direct", experiment_id, "h1", "s1", ["nDCG@10", "R@10"], "v1")

    direct = [lookup(experiment), lookup(None)]
    assert sqlite_run.at_head(folder / "mlflow.db")
    monkeypatch.setattr(sqlite_run, "at_head", lambda path: False)  # MlflowClient's answer
    through_client = [lookup(experiment), lookup(None)]
    assert [(f.mlflow_run_id, f.run_dir, repr(f.overall)) for f in direct] == [
        (f.mlflow_run_id, f.run_dir, repr(f.overall)) for f in through_client
    ]
    assert direct[0].mlflow_run_id == older and direct[0].run_dir == str(run_dir)
    assert direct[0].overall["nDCG@10"] == 0.25
    assert finished_in_mlflow(uri, "no-such-experiment", None, "h1", "s1", ["nDCG@10"], "v1") is None
