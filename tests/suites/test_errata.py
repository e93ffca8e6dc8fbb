"""Errata: corrections to an answer key, applied by the loader (`suite.errata=FILE`) with provenance.

Specification: applying an errata file changes exactly the judgements (and texts, labels) it names,
refuses an entry whose old value does not match the data, and a run and its report say which errata
were applied.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.compare import build_report
from experiments.suites.beam import load_beam
from experiments.suites.locomo import load_locomo
from experiments.suites.suite import SuiteError
from experiments.track.finished_runs import load_run_dir
from tests.suites.test_granularity import beam_conversation
from tests.support import DATA

FIXTURE = DATA / "locomo" / "locomo_fixture.json"
ISSUE = "https://github.com/snap-research/locomo/issues/34"
ERRATA = f"""\
# two corrections to the LoCoMo fixture
- question: conv-t1:q1
  field: evidence
  old: [conv-t1:D2:1]
  new: [conv-t1:D2:1, conv-t1:D2:3]
  source: {ISSUE}
- question: conv-t1:q4
  field: text
  old: How long did the marathon take?
  new: How long did Ben's marathon take?
  source: a reader's report
"""


def errata_file(tmp_path: Path, text: str = ERRATA) -> Path:
    path = tmp_path / "errata.yaml"
    path.write_text(text)
    return path


def test_applying_errata_changes_exactly_the_named_judgements(tmp_path):
    before = load_locomo(FIXTURE, protocol="memeval")
    after = load_locomo(FIXTURE, protocol="memeval", errata=str(errata_file(tmp_path)))
    changed = {q for q in before.qrels if before.qrels[q] != after.qrels[q]}
    assert changed == {"conv-t1:q1"}
    assert after.qrels["conv-t1:q1"] == {"conv-t1:D2:1": 1, "conv-t1:D2:3": 1}
    texts = {q.id: q.text for q in after.queries}
    assert {q.id for q in before.queries if q.text != texts[q.id]} == {"conv-t1:q4"}
    applied = json.loads(after.tags["errata_applied"])
    assert [(e["question"], e["field"], e["source"]) for e in applied] == [
        ("conv-t1:q1", "evidence", ISSUE),
        ("conv-t1:q4", "text", "a reader's report"),
    ]
    assert after.tags["errata"].startswith("errata.yaml (sha256 ") and after.tags["errata"].endswith(
        "2 applied"
    )
    assert sum(n.startswith("erratum applied (errata.yaml:") for n in after.notes) == 2


def test_errata_apply_before_granularity_so_corrected_evidence_maps_up(tmp_path):
    session = load_locomo(
        FIXTURE, protocol="memeval", granularity="session", errata=str(errata_file(tmp_path))
    )
    assert session.qrels["conv-t1:q1"] == {"conv-t1:D2": 1}
    path = errata_file(tmp_path, ERRATA.replace("conv-t1:D2:3]", "conv-t1:D1:2]"))
    moved = load_locomo(FIXTURE, protocol="memeval", granularity="session", errata=str(path))
    assert moved.qrels["conv-t1:q1"] == {"conv-t1:D1": 1, "conv-t1:D2": 1}


def test_an_old_value_that_does_not_match_is_refused_naming_file_line_and_field(tmp_path):
    path = errata_file(tmp_path, ERRATA.replace("old: [conv-t1:D2:1]", "old: [conv-t1:D2:2]"))
    with pytest.raises(
        SuiteError, match=r"errata.yaml:2: old: does not match conv-t1:q1's evidence in the suite"
    ):
        load_locomo(FIXTURE, protocol="memeval", errata=str(path))
    unknown = errata_file(tmp_path, ERRATA.replace("question: conv-t1:q4", "question: conv-t1:q99"))
    with pytest.raises(SuiteError, match=r"errata.yaml:7: question: 'conv-t1:q99' is not a query"):
        load_locomo(FIXTURE, protocol="memeval", errata=str(unknown))
    nosource = errata_file(tmp_path, ERRATA.replace("  source: a reader's report\n", ""))
    with pytest.raises(SuiteError, match=r"errata.yaml:7: an erratum has exactly the keys"):
        load_locomo(FIXTURE, protocol="memeval", errata=str(nosource))


def test_beam_takes_errata_too(tmp_path):
    folder, _, _ = beam_conversation(tmp_path)
    path = errata_file(
        tmp_path,
        "- {question: 'T/1:information_extraction:0', field: evidence, old: ['T/1:2'], new: ['T/1:3'],"
        " source: test}\n",
    )
    suite = load_beam(folder, errata=str(path))
    assert suite.qrels["T/1:information_extraction:0"] == {"T/1:3": 1}


@pytest.mark.slow  # two runs and a report: ~12 s on the shared machine
def test_a_run_and_its_report_list_the_errata_applied(tmp_path, monkeypatch):
    from experiments.configure.compose import compose_config
    from experiments.run.app import run_experiment

    monkeypatch.chdir(tmp_path)
    path = errata_file(tmp_path)
    dirs = []
    for variant in ("bm25", "bm25_k1"):
        cfg = compose_config(
            [
                "suite=locomo",
                "suite.protocol=memeval",
                f"suite.path={FIXTURE}",
                f"suite.errata={path}",
                "variant=bm25",
                f"stage.bm25.k1={1.2 if variant == 'bm25' else 0.9}",
                "tracking=none",
                "cache_dir=null",
                "progress=false",
            ],
        )
        run_experiment(cfg, tmp_path / variant)
        dirs.append(tmp_path / variant)
    tags = json.loads((dirs[0] / "tags.json").read_text())
    assert json.loads(tags["errata_applied"])[0]["question"] == "conv-t1:q1"
    metrics = json.loads((dirs[0] / "metrics.json").read_text())
    assert sum(n.startswith("erratum applied") for n in metrics["suite"]["notes"]) == 2
    build_report([load_run_dir(d) for d in dirs], tmp_path / "report", title="errata", metrics=["R@10"])
    report = (tmp_path / "report" / "report.md").read_text()
    assert "Errata: errata.yaml (sha256" in report
    assert f"`conv-t1:q1` `evidence` ({ISSUE})" in report and "`conv-t1:q4` `text`" in report


def test_a_canonical_suite_takes_errata_too(tmp_path, tiny):
    from experiments.suites.jsonl import load_suite, save_suite

    folder = save_suite(tiny, tmp_path / "suite")
    path = errata_file(
        tmp_path, "- {question: 'c1:q1', field: evidence, old: ['c1:1'], new: ['c1:4'], source: t}\n"
    )
    after = load_suite(folder, errata=str(path))
    assert after.qrels == {**tiny.qrels, "c1:q1": {"c1:4": 1}}
    assert after.tags["errata"].endswith("1 applied")


def test_the_shipped_locomo_errata_restore_the_typo_d_11_26_under_memeval_and_official_refuses_errata(
    locomo_file,
):
    """datasets/errata/locomo10.yaml: conv-43 q18 names `D:11:26` for `D11:26` (Tim on "The Alchemist")."""
    from experiments.shipped_data import shipped_dataset

    shipped = shipped_dataset("errata") / "locomo10.yaml"
    path = locomo_file
    before = load_locomo(path, protocol="memeval")
    after = load_locomo(path, protocol="memeval", errata=str(shipped))
    assert "conv-43:D11:26" not in before.qrels["conv-43:q18"]
    assert after.qrels["conv-43:q18"] == {**before.qrels["conv-43:q18"], "conv-43:D11:26": 1}
    assert {q for q in before.qrels if before.qrels[q] != after.qrels[q]} == {"conv-43:q18"}
    assert "locomo" in json.loads(after.tags["errata_applied"])[0]["source"].lower()
    with pytest.raises(SuiteError, match="suite.errata"):
        load_locomo(path, errata=str(shipped))  # protocol=official scores upstream's key as it is
