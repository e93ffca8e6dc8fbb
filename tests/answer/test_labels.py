"""The labels file reader (experiments/answer/labels.py): a label applies only to the exact answer it judged,
and every problem names the file, the line and the field."""

from __future__ import annotations

import json

import pytest

from experiments.answer.labels import LabelsError, answer_sha256, read_labels

ANSWERS = {"conv-26:q0": "7 May 2023", "conv-26:q1": "Paris", "conv-30:q4": ""}


def write(tmp_path, *records) -> object:
    path = tmp_path / "labels.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n", "utf-8")
    return path


def label(qid: str, value=1, labeller="ana", digest=None) -> dict:
    return {
        "query_id": qid,
        "answer_sha256": digest or answer_sha256(ANSWERS[qid]),
        "label": value,
        "labeller": labeller,
    }


def test_a_good_file_reads_every_label(tmp_path):
    path = write(tmp_path, label("conv-26:q0"), "", label("conv-30:q4", 0, "bo"))
    labels = read_labels(path, ANSWERS)
    assert {k: (v.label, v.labeller, v.line) for k, v in labels.items()} == {
        "conv-26:q0": (1, "ana", 1),
        "conv-30:q4": (0, "bo", 3),
    }
    assert answer_sha256("Paris") == "5dd272b4f316b776a7b8e3d0894b37e1e42be3d5d3b204b8a5836cc50597a6b1"


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (
            label("conv-26:q0") | {"query_id": "conv-99:q0"},
            r"labels.jsonl:2: query_id 'conv-99:q0' is not a query",
        ),
        (
            label("conv-26:q1", digest=answer_sha256("London")),
            r"labels.jsonl:2: answer_sha256 does not match",
        ),
        (label("conv-26:q1", 2), r"labels.jsonl:2: label must be 0 or 1, got 2"),
        (label("conv-26:q1", True), r"labels.jsonl:2: label must be 0 or 1, got True"),
        (label("conv-26:q1", 1.0), r"labels.jsonl:2: label must be 0 or 1, got 1.0"),
        (
            label("conv-26:q0", 0),
            r"labels.jsonl:2: query_id 'conv-26:q0' is labelled twice \(first on line 1\)",
        ),
        (label("conv-26:q1", labeller=" "), r"labels.jsonl:2: labeller must be a non-empty string"),
        (label("conv-26:q1", digest="ABC"), r"labels.jsonl:2: answer_sha256 must be 64 lower-case hex"),
        (
            {"query_id": "conv-26:q1", "label": 1},
            r"labels.jsonl:2: missing field\(s\) answer_sha256, labeller",
        ),
        (label("conv-26:q1") | {"note": "x"}, r"labels.jsonl:2: unknown field\(s\) note"),
        ("{not json", r"labels.jsonl:2: not a JSON object"),
        ("[1, 2]", r"labels.jsonl:2: not a JSON object"),
    ],
)
def test_a_bad_line_is_refused_naming_file_line_and_field(tmp_path, record, message):
    path = write(tmp_path, label("conv-26:q0"), record)
    with pytest.raises(LabelsError, match=message):
        read_labels(path, ANSWERS)


def test_a_missing_or_undecodable_file_is_refused(tmp_path):
    with pytest.raises(LabelsError, match="labels file not found"):
        read_labels(tmp_path / "none.jsonl", ANSWERS)
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"query_id": "\xff"}\n')
    with pytest.raises(LabelsError, match="bad.jsonl: not UTF-8"):
        read_labels(bad, ANSWERS)
