"""memeval-conform's contract outside any one service: the checks are found by a scan and named by their
class; a replay judges again with no service and gives the same conformance.json (timings aside); exit 2
when it cannot judge (service down, no cassette, a replay the cassette cannot answer, an unknown check);
an MLflow run of the verdict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.conform.check import GROUPS, check_classes
from experiments.conform.probe import ReplayMiss
from experiments.conform.runner import CannotJudge, verdict_only
from tests.broken_memory_service import Breaks, BrokenMemoryService
from tests.conform.conform_support import conform_run, statuses
from tests.live_services import free_port

BIN = Path(sys.executable).parent
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "MLFLOW_TRACKING_URI": ""}


def test_the_checks_are_found_by_a_scan_and_named_by_their_class():
    checks = check_classes()
    assert len(checks) >= 20 and len({c.id for c in checks}) == len(checks)
    assert {c.group for c in checks} == set(GROUPS)  # every group has a check
    for cls in checks:
        assert cls.id.startswith(f"{cls.group}.") and cls.__module__ == f"experiments.conform.{cls.group}"
        assert cls.asks(), f"{cls.__name__} states no question (its docstring)"
    assert "isolation.look_alike_values" in {c.id for c in checks}  # IsolationLookAlikeValues


def test_a_replay_with_no_service_gives_the_same_verdict_and_labels_its_timings(tmp_path):
    with BrokenMemoryService(Breaks(ignore_reset=True)) as service:
        code, recorded = conform_run(tmp_path / "rec", f"system.base_url={service.url}")
    cassette = tmp_path / "rec" / "cassette.jsonl"
    replay_code, replayed = conform_run(
        tmp_path / "replay",
        "system.mode=replay",
        f"system.cassette={cassette}",
        "system.base_url=http://127.0.0.1:9",
    )
    assert (code, replay_code) == (1, 1) and statuses(recorded, "fail") == {"lifecycle.reset_empties_scope"}
    assert verdict_only(replayed) == verdict_only(recorded)
    assert (
        replayed["run"]["timings"] == "replayed from the cassette"
        and recorded["run"]["timings"] == "measured"
    )
    labels = {e["timing"] for c in replayed["checks"] for e in c["evidence"]}
    assert labels == {"replayed"}
    # another seed asks other questions: the cassette cannot answer them, and says so
    with pytest.raises(ReplayMiss, match="replay miss: .* is not in cassette"):
        conform_run(tmp_path / "miss", "system.mode=replay", f"system.cassette={cassette}", "conform.seed=1")


def test_cannot_judge_without_a_cassette_to_replay_or_with_an_unknown_check(tmp_path):
    with pytest.raises(CannotJudge, match="system.cassette=PATH"):
        conform_run(tmp_path / "a", "system.mode=replay")
    with pytest.raises(
        CannotJudge, match=r"unknown check\(s\) \['isolation.nope'\]; known: isolation.single_key"
    ):
        conform_run(
            tmp_path / "b", "system.mode=replay", "system.cassette=x.jsonl", "conform.checks=[isolation.nope]"
        )


def _conform(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "memeval-conform"), *args], cwd=cwd, env=ENV, capture_output=True, text=True
    )


def test_a_service_down_exits_2_naming_it_and_writes_no_verdict(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    done = _conform(f"system.base_url={url}", "tracking=none", "hydra.run.dir=run", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "cannot judge" in done.stderr and url in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "run" / "conformance.json").exists()


def test_a_mistyped_system_exits_2(tmp_path):
    done = _conform("system=no_such_system", "tracking=none", cwd=tmp_path)
    assert done.returncode == 2 and "no_such_system" in done.stderr and "Traceback" not in done.stderr


def test_the_console_script_writes_the_folder_and_an_mlflow_run(tmp_path):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    checks = "conform.checks=[lifecycle.reingest_no_duplicates,ranking.k_honoured]"
    with BrokenMemoryService(Breaks(over_k=True)) as service:
        done = _conform(
            f"system.base_url={service.url}",
            f"tracking.tracker.uri={store}",
            checks,
            "hydra.run.dir=run",
            cwd=tmp_path,
        )
    assert done.returncode == 1, done.stdout + done.stderr
    run = tmp_path / "run"
    report = json.loads((run / "conformance.json").read_text())
    assert [c["id"] for c in report["checks"]] == ["lifecycle.reingest_no_duplicates", "ranking.k_honoured"]
    assert "| `ranking.k_honoured` | **FAIL** |" in (run / "conformance.md").read_text()
    assert (run / "cassette.jsonl").stat().st_size > 0

    import mlflow

    (found,) = mlflow.MlflowClient(tracking_uri=store).search_runs(
        [mlflow.MlflowClient(tracking_uri=store).get_experiment_by_name("memeval").experiment_id]
    )
    assert found.data.metrics["conform.fail"] == 1 and found.data.metrics["check.ranking.k_honoured"] == 0
    assert found.data.metrics["check.lifecycle.reingest_no_duplicates"] == 1
    assert found.data.tags["memeval.conform.verdict"] == "fail"


def test_every_check_is_stated_in_the_docs():
    from tests.support import REPO

    text = (REPO / "docs" / "conformance.md").read_text()
    assert [c.id for c in check_classes() if f"`{c.id}`" not in text] == []
