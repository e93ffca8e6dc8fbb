"""Every MLflow key memeval logs (metric or param) follows one rule, `safe_key`: a config key MLflow
refuses (a service's `$contains`) or that would meet another (`a.b` beside `a: {b}`) never fails or
thins a run; docs/sweeps.md shows the rule as the code prints it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from experiments.track.mlflow_tracker import MlflowTracker, key_table, mlflow_params
from tests.support import REPO

# Keys with `$`, `.`, `/` and spaces, as a live system's config holds them.
CONFIG = {
    "stage": {"bm25": {"k1": 1.2}},
    "system": {"adapter": {"body": {"where": {"$contains": "{text}"}, "user name": "u", "a/b": 1}}},
    "metadata": {"a.b": "literal", "a": {"b": "nested"}},
}


def test_the_key_table_in_the_docs_is_the_one_the_code_prints():
    printed = subprocess.run(
        [sys.executable, "-m", "experiments.track.mlflow_tracker"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert printed == key_table()
    page = (REPO / "docs" / "sweeps.md").read_text()
    start = page.index("<!-- key table: python -m experiments.track.mlflow_tracker -->\n")
    shown = page[page.index("\n", start) + 1 : page.index("\n<!-- end key table -->")]
    assert shown == printed


def test_keys_are_kept_unless_mlflow_refuses_them_or_they_meet():
    params = mlflow_params(CONFIG)
    assert params["stage.bm25.k1"] == "1.2"  # what MLflow accepts keeps its name
    assert params["system.adapter.body.where._contains"] == "{text}"
    assert params["system.adapter.body.user_name"] == "u" and params["system.adapter.body.a_b"] == "1"
    both = [v for k, v in params.items() if k.startswith("metadata.a.b")]
    assert sorted(both) == ["literal", "nested"]  # two keys that flatten alike are both kept
    assert len(params) == 6


@pytest.mark.slow  # a new SQLite store takes ~10 s to create
def test_a_config_with_keys_mlflow_refuses_logs_a_finished_run_with_every_param(tmp_path):
    # Before: `flatten` gave `...where.$contains`, log_batch refused it, and the run was left FAILED with no
    # params (and one of the two `metadata.a.b` values was silently dropped).
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.json").write_text("{}")
    run_id = MlflowTracker(uri=uri).log(
        run_name="keys",
        params=mlflow_params(CONFIG),
        metrics={"nDCG_at_10": 0.5},
        tags={},
        run_dir=run_dir,
        config_text="{}",
    )
    run = mlflow.MlflowClient(tracking_uri=uri).get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params == mlflow_params(CONFIG)
