"""A user's Python class (`system=python`) cannot hang a run, end it quietly or hand back what is not a
ranking (issue 41, part 2; experiments/systems/python_adapter.py).

Real `memeval-run` processes on a tiny suite, with a class of the test's own on PYTHONPATH whose constructor
argument `fault` picks what goes wrong: a search that hangs is stopped by `system.call_timeout_s`;
`sys.exit(0)`, any other exception and a malformed answer each end the run with exit 2 naming the call and
the query, and no metrics.json; `close()` is called once at the end of a live run, and a close that raises
is a warning, the run's results kept. In process, every malformed answer (None, a dict, strings, a
generator, `Hit(id=None)`) through the real pipeline is a LiveSystemError naming the query.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.suites.jsonl import save_suite
from experiments.systems.protocol import LiveSystemError
from experiments.systems.retriever import SystemRetriever
from retrieval.pipeline import Pipeline
from tests.support import REPO, tiny_suite

FAULTY = """
import os, sys, time
from experiments.systems.protocol import Hit


class Faulty:
    def __init__(self, fault: str = "none"):
        self.fault, self.held = fault, {}

    def reset(self, scope):
        self.held.pop(tuple(sorted(scope.items())), None)

    def ingest(self, scope, memories):
        self.held[tuple(sorted(scope.items()))] = [m.id for m in memories]

    def wait_until_searchable(self, scope, memories):
        return 0.0

    def search(self, request):
        if getattr(self, "closed", False):
            raise RuntimeError("searched after close()")
        ids = self.held[tuple(sorted(request.scope.items()))]
        answers = {
            "hang": lambda: time.sleep(3600),
            "exit": lambda: sys.exit(0),
            "raise": lambda: {}["no such key"],
            "none": lambda: [Hit(i, 1.0 / (r + 1)) for r, i in enumerate(ids)],
            "answer_none": lambda: None,
            "answer_dict": lambda: {"results": ids},
            "answer_strings": lambda: list(ids),
            "answer_generator": lambda: (Hit(i) for i in ids),
            "answer_id_none": lambda: [Hit(None)],
        }
        return answers.get(self.fault, answers["none"])()

    def close(self):
        self.closed = True
        with open(os.environ["FAULTY_CLOSED"], "a") as out:  # not in the config: a stage key names files
            out.write("closed\\n")
        if self.fault == "close_raises":
            raise OSError("the store's file is gone")
"""

MALFORMED = ["answer_none", "answer_dict", "answer_strings", "answer_generator", "answer_id_none"]


@pytest.fixture()
def faulty(tmp_path: Path, monkeypatch) -> Path:
    folder = tmp_path / "pkg"
    folder.mkdir()
    (folder / "faulty_store.py").write_text(FAULTY)
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    sys.modules.pop("faulty_store", None)


def run(
    faulty: Path, tmp_path: Path, fault: str, *extra: str, sweep: bool = False
) -> tuple[subprocess.CompletedProcess, Path]:
    suite = save_suite(tiny_suite(), tmp_path / "suite")
    run_dir = tmp_path / f"run-{fault}"
    marker = tmp_path / f"closed-{fault}"
    folder = f"hydra.sweep.dir={run_dir}" if sweep else f"hydra.run.dir={run_dir}"
    args = [sys.executable, "-m", "experiments.run", *(["-m"] if sweep else []), "suite=jsonl",
            f"suite.path={suite}", "variant=system", "system=python",
            "system.adapter._target_=faulty_store.Faulty", f"+system.adapter.fault={fault}",
            "tracking=none", "progress=false", folder,
            *extra]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(faulty), str(REPO)])}
    env["FAULTY_CLOSED"] = str(marker)
    done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    return done, marker


def test_a_search_that_hangs_is_stopped_by_the_call_bound_with_exit_2(faulty, tmp_path):
    started = time.monotonic()
    done, _ = run(faulty, tmp_path, "hang", "system.call_timeout_s=2")
    assert time.monotonic() - started < 120  # not the hour the search sleeps
    assert done.returncode == 2, done.stderr[-3000:]
    assert "faulty_store.Faulty: search (query c" in done.stderr, done.stderr[-2000:]
    assert "no answer within 2 s (system.call_timeout_s)" in done.stderr
    assert not (tmp_path / "run-hang" / "metrics.json").exists()


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        ("exit", "raised SystemExit: 0"),
        ("raise", "raised KeyError: 'no such key'"),
        ("answer_none", "returned None, not a list of Hit"),
    ],
)
def test_sys_exit_an_exception_or_a_malformed_answer_is_exit_2_naming_call_and_query(
    faulty, tmp_path, fault, said
):
    done, marker = run(faulty, tmp_path, fault)
    assert done.returncode == 2, (done.returncode, done.stderr[-3000:])
    line = next(x for x in done.stderr.splitlines() if x.startswith("error:"))
    assert "faulty_store.Faulty" in line and "search (query c" in line and said in line, line
    assert "Traceback" not in done.stderr
    assert not (tmp_path / f"run-{fault}" / "metrics.json").exists()
    assert marker.read_text() == "closed\n"  # close() once, in a finally, though the run failed


def test_close_is_called_once_at_the_end_and_its_failure_is_a_warning(faulty, tmp_path):
    done, marker = run(faulty, tmp_path, "none")
    assert done.returncode == 0, done.stderr[-3000:]
    assert marker.read_text() == "closed\n"
    done, marker = run(faulty, tmp_path, "close_raises")
    assert done.returncode == 0, done.stderr[-3000:]
    assert marker.read_text() == "closed\n"
    assert "close" in done.stderr and "the store's file is gone" in done.stderr, done.stderr[-2000:]
    assert (tmp_path / "run-close_raises" / "metrics.json").is_file()


@pytest.mark.parametrize("fault", MALFORMED)
def test_every_malformed_answer_is_refused_naming_the_query(faulty, fault):
    from faulty_store import Faulty

    suite = tiny_suite()
    pipeline = Pipeline((SystemRetriever(system=Faulty(fault)),), depth=10)
    with pytest.raises(LiveSystemError, match=r"Faulty: search \(query c[12]:q[01]\)") as caught:
        pipeline.run(suite.memories, suite.queries, progress=False)
    assert "result 0" in str(caught.value) or "not a list of Hit" in str(caught.value)


def test_each_job_of_a_sweep_gets_an_adapter_of_its_own_never_one_closed(faulty, tmp_path):
    # `seed` leaves the system stage's config as it was: a memoised stage would hand job 2 the adapter
    # job 1 closed
    done, marker = run(faulty, tmp_path, "none", "seed=0,1", sweep=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert marker.read_text() == "closed\n" * 2
    assert len(list((tmp_path / "run-none").glob("*/metrics.json"))) == 2
