"""Bad suite input, end to end through the CLI: every case in tests/data/bad_suites/ fails before any work.

Each case folder holds a broken suite (canonical JSONL, or a BEAM conversation folder when the name
starts with `beam_`) and `expected.txt`, the substring of the error that names the file, line and
field. The loaders' unit tests (test_suite_format.py, test_beam_loader.py) check messages in process;
this corpus checks what a user sees: `memeval-run suite=jsonl|beam suite.path=CASE` exits with code 2,
prints that message (no traceback), writes no metrics.json and logs no FINISHED MLflow run. The
huge-text case is completed here (a 1,000,001-character line is too big to commit); in
`path_is_a_file`, suite.path names the case's file `suite.jsonl` where a directory belongs.

Every case runs through the console script's own function (`memeval-run`'s `main`: Hydra, the config
check, the loader, the exit code), many cases to a Python process: a fresh process per case costs ~2.5 s
of CPU in imports alone. That the process itself ends the same way (its exit status, its stderr) is
checked on one case of each kind run as its own `python -m experiments.run` process (PROCESS_CASES).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.support import REPO

CORPUS = REPO / "tests" / "data" / "bad_suites"
CASES = sorted(p.name for p in CORPUS.iterdir() if (p / "expected.txt").is_file())
HUGE = 1_000_001
# Run as their own process too: a JSONL case, a BEAM case, suite.path naming a file, the generated huge text.
PROCESS_CASES = ("duplicate_memory_id", "beam_unknown_ability", "path_is_a_file", "huge_text")
pytestmark = pytest.mark.slow

# Runs each case given as JSON {case: [overrides...]} through memeval-run's `main`, as the console script
# does, and prints {case: {returncode, stdout, stderr}} as JSON.
RUNNER = """
import contextlib, io, json, sys, traceback
from hydra.core.global_hydra import GlobalHydra
from experiments.run.app import main

done = {}
for case, overrides in json.loads(sys.argv[1]).items():
    out, err, code = io.StringIO(), io.StringIO(), 0
    sys.argv = ["memeval-run", *overrides]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main()
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else 1
        except BaseException:
            traceback.print_exc()
            code = 1
    GlobalHydra.instance().clear()
    done[case] = {"returncode": code, "stdout": out.getvalue(), "stderr": err.getvalue()}
print(json.dumps(done))
"""


def _prepare(case: str, tmp: Path) -> Path:
    """The folder to load: the committed case, or a copy completed with generated content."""
    if case == "path_is_a_file":
        return CORPUS / case / "suite.jsonl"  # suite.path names a file where a directory belongs
    if case != "huge_text":
        return CORPUS / case
    folder = tmp / "cases" / case
    if folder.is_dir():  # completed for the in-process run already
        return folder
    shutil.copytree(CORPUS / case, folder)
    with open(folder / "memories.jsonl", "a", encoding="utf-8") as fh:
        fh.write('{"id": "m2", "text": "%s", "scope": {"user": "u1"}}\n' % ("x" * HUGE))
    return folder


def _overrides(case: str, tmp: Path, runs: str = "runs") -> list[str]:
    kind = "beam" if case.startswith("beam_") else "jsonl"
    return [
        f"suite={kind}",
        f"suite.path={_prepare(case, tmp)}",
        "variant=bm25",
        "tracking=mlflow",
        "tracking.tracker.experiment=bad_input",
        f"hydra.run.dir={tmp / runs / case}",
        f"cache_dir={tmp / 'cache'}",
        "progress=false",
    ]


def _env(uri: str) -> dict[str, str]:
    return {**os.environ, "MLFLOW_TRACKING_URI": uri}


def _run_in_one_process(cases: list[str], tmp: Path, uri: str) -> dict[str, dict]:
    given = json.dumps({case: _overrides(case, tmp) for case in cases})
    command = [sys.executable, "-c", RUNNER, given]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900, env=_env(uri))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory, worker_id) -> tuple[dict[str, SimpleNamespace], Path, str]:
    """Every case run once per test session, in two processes at once (each case through memeval-run's
    `main`). Under pytest-xdist the first worker to get here runs them and the others read its results,
    under a lock: the session's own temporary folder holds both."""
    session = tmp_path_factory.getbasetemp()
    tmp = (session if worker_id == "master" else session.parent) / "bad_input"
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    tmp.mkdir(exist_ok=True)
    with open(tmp / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = tmp / "outcomes.json"
        if not record.exists():
            halves = [CASES[0::2], CASES[1::2]]
            with ThreadPoolExecutor(max_workers=2) as pool:
                fields = {
                    k: v
                    for half in pool.map(lambda c: _run_in_one_process(c, tmp, uri), halves)
                    for k, v in half.items()
                }
            record.with_suffix(".part").write_text(json.dumps(fields))
            record.with_suffix(".part").replace(record)
    results = json.loads(record.read_text())
    return {case: SimpleNamespace(**fields) for case, fields in results.items()}, tmp, uri


def test_the_corpus_covers_every_kind_of_bad_input():
    kinds = {
        "malformed_json_line",
        "missing_memory_text",
        "mistyped_confidence",
        "duplicate_memory_id",
        "qrels_unknown_query",
        "qrels_unknown_memory",
        "empty_memory_text",
        "huge_text",
        "non_utf8_bytes",
        "beam_missing_evidence_id",
        "beam_unknown_ability",
        "beam_malformed_chat_json",
        # ids, numbers and text that corrupt outputs; suite.yaml; paths
        "id_with_space",
        "query_id_with_newline",
        "id_not_nfc",
        "infinite_strength",
        "nan_confidence",
        "lone_surrogate",
        "qrels_fullwidth_grade",
        "qrels_bad_iteration",
        "suite_yaml_bad_k",
        "suite_yaml_undeclared_label",
        "suite_yaml_alias_bomb",
        "path_is_a_file",
        "beam_content_null",
        "beam_evidence_float_id",
    }
    assert kinds <= set(CASES), kinds - set(CASES)


@pytest.mark.parametrize("case", CASES)
def test_bad_suite_exits_2_naming_file_line_and_field_and_finishes_no_run(outcomes, case):
    done, tmp, uri = outcomes
    proc = done[case]
    expected = (CORPUS / case / "expected.txt").read_text().strip()
    assert proc.returncode == 2, f"exit {proc.returncode}\n{proc.stderr[-2000:]}"
    assert expected in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr  # a clear message, not a crash
    assert not list((tmp / "runs" / case).rglob("metrics.json"))
    written = {p.name for p in (tmp / "runs" / case).glob("*")}  # Hydra's own .hydra/ and run.log aside
    assert not written & {"per_query.csv", "run.trec", "qrels.tsv", "config.yaml", "tags.json"}, written


def test_no_bad_suite_left_a_finished_mlflow_run(outcomes):
    done, tmp, uri = outcomes
    assert all(p.returncode == 2 for p in done.values())
    if not (tmp / "mlflow.db").exists():
        return  # validation failed before the store was even opened: nothing can be logged
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=uri)
    experiments = client.search_experiments()
    runs = client.search_runs([e.experiment_id for e in experiments]) if experiments else []
    assert [r for r in runs if r.info.status == "FINISHED"] == []


@pytest.mark.parametrize("case", PROCESS_CASES)
def test_a_case_run_as_its_own_process_ends_as_it_did_through_main(outcomes, case, tmp_path):
    """The process boundary: `python -m experiments.run` with the case's overrides exits 2 with the error
    lines the in-process run printed."""
    done, tmp, uri = outcomes
    command = [sys.executable, "-m", "experiments.run", *_overrides(case, tmp, runs="process_runs")]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300, env=_env(uri))
    errors = [line for line in proc.stderr.splitlines() if not line.startswith(("[", "WARNING"))]
    assert proc.returncode == done[case].returncode == 2, proc.stderr[-2000:]
    assert errors == [
        line for line in done[case].stderr.splitlines() if not line.startswith(("[", "WARNING"))
    ]
    assert not list((tmp / "process_runs" / case).rglob("metrics.json"))
