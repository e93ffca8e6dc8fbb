"""What the answer stage refuses before any call: bad settings, bad answers files, bad labels (exit 2)."""

from __future__ import annotations

import json

import pytest

from experiments.answer.answers_file import read_answers
from experiments.answer.client import AnswerError
from experiments.answer.settings import read_settings

GOOD = {
    "source": "llm",
    "model": "m",
    "endpoint": {"base_url": "http://127.0.0.1:8080/v1"},
    "judges": ["lexical"],
}


def _problems(**changes):
    node = {**GOOD, **changes}
    settings, problems = read_settings(node, suite_k=10, suite_protocol="official")
    assert (settings is None) == bool(problems)
    return "\n".join(problems)


def test_good_settings_take_the_suites_k_and_protocol():
    settings, problems = read_settings(GOOD, suite_k=7, suite_protocol="official")
    assert (
        not problems
        and settings.k == 7
        and settings.protocol == "official"
        and settings.contexts == ("retrieved",)
    )


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"k": 0}, "answer.k"),
        ({"context": "gold_only"}, "answer.context"),
        ({"context": ["retrieved", "retrieved"]}, "answer.context"),
        ({"template": "{question} {memories}"}, "{memories}"),
        ({"judges": ["no_such_judge"]}, "no_such_judge"),
        ({"judges": []}, "answer.judges"),
        ({"mode": "replay"}, "answer.cassette"),
        ({"mode": "tape"}, "answer.mode"),
        ({"source": "file"}, "answer.path"),
        ({"model": None}, "answer.model"),
        ({"endpoint": {"base_url": "ftp://x"}}, "answer.endpoint.base_url"),
        (
            {"endpoint": {"base_url": "http://h:1/v1", "api_key_env": "MEMEVAL_TEST_UNSET_KEY"}},
            "MEMEVAL_TEST_UNSET_KEY",
        ),
        ({"contxt": "gold"}, "contxt"),
        ({"concurrency": 0}, "answer.concurrency"),
    ],
)
def test_a_bad_setting_is_named_before_any_call(changes, named, monkeypatch):
    monkeypatch.delenv("MEMEVAL_TEST_UNSET_KEY", raising=False)
    assert named in _problems(**changes)


def _write(path, records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def test_an_answers_file_gives_each_wanted_query_its_answer(tmp_path):
    path = _write(
        tmp_path / "a.jsonl", [{"query_id": "q1", "answer": "x"}, {"query_id": "q2", "answer": "y"}]
    )
    assert read_answers(path, ["q2", "q1"], {"q1", "q2", "q3"}) == {"q2": "y", "q1": "x"}


@pytest.mark.parametrize(
    ("records", "where"),
    [
        ([{"query_id": "q1", "answer": "x"}, {"query_id": "zz", "answer": "y"}], ":2: query_id"),
        (
            [{"query_id": "q1", "answer": "x"}, {"query_id": "q1", "answer": "y"}],
            ":2: query_id: q1 is answered twice",
        ),
        ([{"query_id": "q1", "answer": "x"}], ":2: 1 query of the suite not answered (first: q2)"),
        ([{"query_id": "q1", "answer": 3}], ":1: answer"),
        (["not json"], ":1: not a JSON object"),
    ],
)
def test_a_bad_answers_file_names_file_and_line(tmp_path, records, where):
    path = _write(tmp_path / "a.jsonl", records)
    with pytest.raises(AnswerError) as err:
        read_answers(path, ["q1", "q2"], {"q1", "q2"})
    assert f"{path}{where}" in str(err.value)
