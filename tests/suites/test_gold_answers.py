"""Gold answers in the suites: read by every benchmark loader and the canonical format, never hashed."""

from __future__ import annotations

import dataclasses
import json

import pytest

from experiments.suites.jsonl import load_suite, save_suite
from experiments.suites.locomo import NOT_MENTIONED, load_locomo
from experiments.suites.longmemeval import load_longmemeval
from experiments.suites.suite import SuiteError
from tests.support import DATA


def _without_gold(suite):
    queries = tuple(
        dataclasses.replace(q, answer=None, rubric=(), adversarial_answer=None) for q in suite.queries
    )
    return dataclasses.replace(suite, queries=queries)


def test_locomo_keeps_each_gold_answer_outside_the_content_hash():
    suite = load_locomo(DATA / "locomo" / "locomo_fixture.json")
    raw = json.loads((DATA / "locomo" / "locomo_fixture.json").read_text())[0]["qa"]
    by_id = {q.id: q for q in suite.queries}
    for j, entry in enumerate(raw):
        if entry["category"] != 5 and f"conv-t1:q{j}" in by_id:
            assert by_id[f"conv-t1:q{j}"].answer == str(entry["answer"])
    assert suite.content_hash == _without_gold(suite).content_hash
    changed = dataclasses.replace(suite, queries=(dataclasses.replace(suite.queries[0], answer="other"),))
    assert changed.content_hash == dataclasses.replace(suite, queries=suite.queries[:1]).content_hash


def test_locomo_category_5_keeps_its_distractor_apart_from_the_gold():
    suite = load_locomo(DATA / "locomo" / "locomo_fixture.json")
    (adversarial,) = [q for q in suite.queries if q.labels["category"] == "adversarial"]
    assert adversarial.answer == NOT_MENTIONED and adversarial.adversarial_answer == "Rex"
    assert all(q.adversarial_answer is None for q in suite.queries if q is not adversarial)


def test_longmemeval_keeps_its_answers_as_text():
    suite = load_longmemeval(DATA / "longmemeval" / "longmemeval_fixture.json")
    raw = {
        x["question_id"]: x["answer"]
        for x in json.loads((DATA / "longmemeval" / "longmemeval_fixture.json").read_text())
    }
    assert {q.id: q.answer for q in suite.queries} == {q.id: str(raw[q.id]) for q in suite.queries}
    assert suite.content_hash == _without_gold(suite).content_hash


def test_the_canonical_format_saves_and_reads_answers_and_rubrics(tmp_path):
    suite = load_locomo(
        DATA / "locomo" / "locomo_fixture.json", protocol="memeval", categories=[1, 2, 3, 4, 5]
    )
    rubric = dataclasses.replace(suite.queries[0], rubric=("LLM response should state: Pixel",))
    suite = dataclasses.replace(suite, queries=(rubric, *suite.queries[1:]))
    loaded = load_suite(save_suite(suite, tmp_path / "saved"))
    assert [(q.answer, q.rubric, q.adversarial_answer) for q in loaded.queries] == [
        (q.answer, q.rubric, q.adversarial_answer) for q in suite.queries
    ]
    assert loaded.content_hash == suite.content_hash == _without_gold(loaded).content_hash


def test_a_rubric_that_is_not_a_list_of_strings_names_file_line_and_field(tmp_path):
    suite = load_suite(
        save_suite(load_locomo(DATA / "locomo" / "locomo_fixture.json", protocol="memeval"), tmp_path / "s")
    )
    path = tmp_path / "s" / "queries.jsonl"
    lines = path.read_text().splitlines()
    lines[1] = json.dumps({**json.loads(lines[1]), "rubric": "one string"})
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SuiteError) as err:
        load_suite(tmp_path / "s")
    assert "queries.jsonl" in str(err.value) and ":2" in str(err.value) and "rubric" in str(err.value)
    assert len(suite.queries) == len(lines)
