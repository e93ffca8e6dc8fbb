"""Tracking that cannot lose a run: MLflow-safe metric keys for any label (with the reverse mapping
logged beside them and used to read metrics back), and a half-made SQLite store named in a clear error.

A real SQLite store, created once for the module through `ensure_store` (~5-10 s: those tests are slow).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

import mlflow
import pytest
from mlflow.utils.validation import _validate_metric_name

from experiments.run.resume import CODE_VERSION_TAG, CONFIG_HASH_TAG, finished_in_mlflow
from experiments.track.mlflow_tracker import (
    METRIC_NAMES_FILE,
    MlflowTracker,
    TrackingError,
    ensure_store,
    mlflow_metric_names,
    mlflow_metrics,
    original_metrics,
)

NASTY = ["C++ & tools (v2), 'x'", "a b", "a_b", "../etc", "ünï/cødé", ".", "x" * 300]


def summary() -> dict:
    stats = {"n_queries": 3, "P@5": 0.4, "nDCG@10": 0.5, "latency_ms_p50": 1.5}
    return {
        "overall": {"n_queries": 9, "P@5": 0.3, "nDCG@10": 0.6, "R_all@10": 0.7, "wall_s": 2.0},
        "by_label": {"category": {v: dict(stats) for v in NASTY}, "odd label (1)": {"v+1": dict(stats)}},
        "scope_leaks": 0,
    }


def test_every_key_is_a_valid_mlflow_name_and_maps_back_one_to_one():
    metrics, names = mlflow_metrics(summary()), mlflow_metric_names(summary())
    assert list(metrics) == list(names)  # the same keys, in the same order
    for key in metrics:
        _validate_metric_name(key)  # raises on a name MLflow rejects
    originals = list(names.values())
    assert len(set(originals)) == len(originals) == len(metrics)
    assert "category.C++ & tools (v2), 'x'.P@5" in originals and "odd label (1).v+1.nDCG@10" in originals
    assert names["nDCG_at_10"] == "nDCG@10"
    assert {names[k] for k in metrics if k.startswith("category.a_b.P_at_5")} == {
        "category.a b.P@5",
        "category.a_b.P@5",
    }  # two labels that meet once sanitised keep two keys
    # the relevance metrics keep the keys earlier runs were logged with
    assert {"P_at_5", "nDCG_at_10", "R_all_at_10", "wall_s", "scope_leaks"} <= set(metrics)


# A new store costs ~5-10 s of migrations on this machine: the tests that need one are slow.
@pytest.fixture(scope="module")
def store(tmp_path_factory):
    folder = tmp_path_factory.mktemp("store")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    ensure_store(uri)
    return folder, uri


@pytest.mark.slow
def test_a_run_with_nasty_labels_is_logged_and_read_back_under_its_original_names(store, monkeypatch):
    folder, uri = store
    monkeypatch.chdir(folder)  # artifacts go to ./mlruns
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run_dir = folder / "run"
    run_dir.mkdir()
    (run_dir / "metrics.json").write_text("{}")
    data = summary()
    tracker = MlflowTracker(experiment="names", uri=uri)
    run_id = tracker.log(
        run_name="nasty",
        params={"variant.name": "bm25"},
        metrics=mlflow_metrics(data),
        tags={CONFIG_HASH_TAG: "cafe", "suite_hash": "beef", CODE_VERSION_TAG: "c0de"},
        run_dir=run_dir,
        config_text="{}",
        metric_names=mlflow_metric_names(data),
    )
    client = mlflow.MlflowClient(uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert METRIC_NAMES_FILE in {a.path for a in client.list_artifacts(run_id)}
    back = original_metrics(client, run)
    assert back["category.C++ & tools (v2), 'x'.P@5"] == 0.4 and back["odd label (1).v+1.nDCG@10"] == 0.5
    assert back["nDCG@10"] == 0.6
    names = ["nDCG@10", "R_all@10", "P@5"]
    found = finished_in_mlflow(uri, "names", None, "cafe", "beef", names, code="c0de")
    assert found is not None and found.mlflow_run_id == run_id
    assert found.overall == {"nDCG@10": 0.6, "R_all@10": 0.7, "P@5": 0.3}


@pytest.mark.slow
@pytest.mark.parametrize("on_disk", ["same", "other", "none"])
def test_every_param_and_metric_is_logged_past_the_batch_limits_and_config_yaml_is_the_configs(
    store, monkeypatch, on_disk
):
    """150 params and 2,500 metrics (past MLflow's 100 params and 1,000 entities a batch) all land, in one
    call that MLflow's client splits; the config.yaml artifact is the config text, unless the run folder
    holds a config.yaml of its own (logged with the run's files, after the text)."""
    folder, uri = store
    monkeypatch.chdir(folder)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run_dir = folder / f"run-{on_disk}"
    run_dir.mkdir()
    config_text = "seed: 0\nname: ünï\n"
    if on_disk != "none":
        (run_dir / "config.yaml").write_text(config_text if on_disk == "same" else "seed: 1\n", "utf-8")
    params = {f"p{i}": str(i) for i in range(150)}
    metrics = {f"m{i}": i / 7 for i in range(2500)}
    run_id = MlflowTracker(experiment="limits", uri=uri).log(
        run_name="limits", params=params, metrics=metrics, tags={}, run_dir=run_dir, config_text=config_text
    )
    client = mlflow.MlflowClient(uri)
    run = client.get_run(run_id)
    assert run.data.params == params
    assert run.data.metrics == metrics
    config = client.download_artifacts(run_id, "config.yaml", str(folder / f"down-{on_disk}"))
    expected = config_text if on_disk != "other" else "seed: 1\n"  # the run folder's own file, as logged
    assert open(config, encoding="utf-8").read() == expected


@pytest.mark.slow
def test_an_existing_complete_store_is_accepted_quickly(store):
    ensure_store(store[1])  # no error, nothing recreated
    assert not list(store[0].glob(".mlflow.db.*.creating"))


@pytest.mark.parametrize(
    "make",
    [
        ["create table experiments (id integer)"],  # killed before the migrations recorded anything
        [
            "create table alembic_version (version_num varchar(32))",
            "insert into alembic_version values ('1')",
        ],
    ],
    ids=["no-alembic-version", "partial-schema"],
)
def test_a_half_made_store_is_a_clear_error_naming_the_file_and_the_fix(tmp_path, make):
    path = tmp_path / "mlflow.db"
    con = sqlite3.connect(path)
    for statement in make:
        con.execute(statement)
    con.commit()
    con.close()
    with pytest.raises(TrackingError) as err:
        ensure_store(f"sqlite:///{path}")
    text = str(err.value)
    assert str(path) in text and "half-made" in text and f"Delete {path}" in text


def test_other_stores_are_left_alone(tmp_path):
    ensure_store("http://127.0.0.1:9")  # a server: nothing to create, no connection attempted
    ensure_store("sqlite:///:memory:")
    assert list(tmp_path.iterdir()) == []


def test_a_store_that_cannot_be_created_is_a_tracking_error_naming_it(tmp_path):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file where the store's folder should be")
    with pytest.raises(TrackingError, match="cannot create the MLflow store .*not_a_folder"):
        ensure_store(f"sqlite:///{blocker / 'mlflow.db'}")


def test_reading_runs_never_creates_a_store(tmp_path):
    from experiments.track.finished_runs import RunError, load_mlflow_runs

    with pytest.raises(RunError, match="no MLflow store"):
        load_mlflow_runs(experiment="x", uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.slow
def test_a_worker_that_loses_the_race_to_insert_the_suite_dataset_retries_and_links_it(store):
    """Parallel first runs of one suite: another worker inserted the dataset row between this worker's
    lookup and its insert, so the store refuses the insert (UNIQUE); the retry links the existing row."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    from experiments.track.mlflow_tracker import SuiteDataset, log_dataset

    client = MlflowClient(store[1])
    experiment = client.create_experiment("dataset_race")
    dataset = SuiteDataset("tiny", "d" * 64, "/suites/tiny", {"queries": 4}).as_input()
    winner, loser = (client.create_run(experiment).info.run_id for _ in range(2))
    client.log_inputs(winner, datasets=[dataset])  # the other worker got there first

    class LostRace:  # the store's answer to this worker's first insert, then the real store
        calls = 0

        def log_inputs(self, run_id, datasets):
            LostRace.calls += 1
            if LostRace.calls == 1:
                raise MlflowException(
                    "BAD_REQUEST: (sqlite3.IntegrityError) UNIQUE constraint failed: "
                    "datasets.experiment_id, datasets.name, datasets.digest"
                )
            return client.log_inputs(run_id, datasets=datasets)

    log_dataset(LostRace(), loser, dataset)
    assert LostRace.calls == 2
    linked = client.get_run(loser).inputs.dataset_inputs
    assert [d.dataset.digest for d in linked] == ["d" * 8]  # MLflow's own width (DATASET_DIGEST_CHARS)

    class Refused:  # any other refusal is not retried
        def log_inputs(self, run_id, datasets):
            raise MlflowException("something else")

    with pytest.raises(MlflowException, match="something else"):
        log_dataset(Refused(), loser, dataset)


# MLflow's own list of variables that mean "CI or a test": a child process without them behaves as a
# user's shell would.
_CI_VARIABLES = (
    "PYTEST_CURRENT_TEST", "GITHUB_ACTIONS", "CI", "CIRCLECI", "GITLAB_CI", "JENKINS_URL", "TRAVIS",
    "TF_BUILD", "BITBUCKET_BUILD_NUMBER", "CODEBUILD_BUILD_ARN", "BUILDKITE", "DO_NOT_TRACK",
    "MLFLOW_DISABLE_TELEMETRY",
)  # fmt: skip


def _user_shell_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _CI_VARIABLES}
    return {**env, **extra}


@pytest.mark.slow  # MLflow's import: ~8 s of CPU here
def test_mlflow_telemetry_is_off_in_every_memeval_process():
    code = (
        "import os, experiments, mlflow\n"
        "from mlflow.telemetry import get_telemetry_client\n"
        "from mlflow.telemetry.utils import is_telemetry_disabled\n"
        "print(os.environ['MLFLOW_DISABLE_TELEMETRY'], is_telemetry_disabled(), get_telemetry_client())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_user_shell_env(), timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["true", "True", "None"]


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        (None, None, "true"),  # memeval's default: off
        ("MLFLOW_DISABLE_TELEMETRY", "false", "false"),  # a user's own choice is kept
        ("DO_NOT_TRACK", "false", "unset"),  # ... in either of the variables MLflow reads
    ],
)
def test_telemetry_is_off_by_default_and_a_users_own_setting_is_kept(name, value, expected):
    code = "import os, experiments; print(os.environ.get('MLFLOW_DISABLE_TELEMETRY', 'unset'))"
    env = _user_shell_env(**({name: value} if name else {}))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.stdout.strip() == expected, done.stderr[-2000:]
