"""The canonical suite format: round trip, content hash, and a clear error for every kind of bad file."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from types import MappingProxyType

import pytest

from experiments.suites.jsonl import load_suite, save_suite
from experiments.suites.suite import Suite, SuiteError, check_suite
from tests.support import REPO, tiny_suite


def write(dir: Path, memories: list, queries: list, qrels: str) -> Path:
    dir.mkdir(parents=True, exist_ok=True)
    (dir / "memories.jsonl").write_text(
        "".join(m if isinstance(m, str) else json.dumps(m) + "\n" for m in memories)
    )
    (dir / "queries.jsonl").write_text(
        "".join(q if isinstance(q, str) else json.dumps(q) + "\n" for q in queries)
    )
    (dir / "qrels.tsv").write_text(qrels)
    return dir


GOOD_M = {"id": "m1", "text": "always use type hints", "scope": {"user": "u1"}}
GOOD_M2 = {"id": "m2", "text": "the budget is 2000", "scope": {"user": "u1"}}
GOOD_Q = {"id": "q1", "text": "show me python code", "scope": {"user": "u1"}}


def test_round_trip_keeps_every_field_and_the_content_hash(tmp_path):
    suite = tiny_suite()
    loaded = load_suite(save_suite(suite, tmp_path / "tiny"))
    assert loaded.content_hash == suite.content_hash
    assert [m.text for m in loaded.memories] == [m.text for m in suite.memories]
    assert dict(loaded.qrels) == dict(suite.qrels)
    assert loaded.is_abstention("c2:q1") and not loaded.is_abstention("c1:q0")


def test_content_hash_changes_with_any_judgement(tmp_path):
    suite = tiny_suite()
    save_suite(suite, tmp_path / "a")
    qrels = (tmp_path / "a" / "qrels.tsv").read_text().replace("c1:q0 0 c1:0 1", "c1:q0 0 c1:0 2")
    (tmp_path / "a" / "qrels.tsv").write_text(qrels)
    assert load_suite(tmp_path / "a").content_hash != suite.content_hash


@pytest.mark.parametrize(
    "memories, queries, qrels, expected",
    [
        ([GOOD_M, '{"id": "m2", "text": oops}\n'], [GOOD_Q], "", "memories.jsonl:2: malformed JSON"),
        (
            [GOOD_M, {"id": "m2", "scope": {"user": "u1"}}],
            [GOOD_Q],
            "",
            "memories.jsonl:2: text: missing required field",
        ),
        ([{**GOOD_M, "text": "   "}], [GOOD_Q], "", "memories.jsonl:1: text: must be a non-empty string"),
        ([{**GOOD_M, "confidence": "high"}], [GOOD_Q], "", "memories.jsonl:1: confidence: must be a number"),
        ([{**GOOD_M, "importance": "urgent"}], [GOOD_Q], "", "memories.jsonl:1: importance: must be one of"),
        ([GOOD_M, {**GOOD_M2, "id": "m1"}], [GOOD_Q], "", "memories.jsonl:2: id: duplicate memory id 'm1'"),
        ([{**GOOD_M, "colour": "red"}], [GOOD_Q], "", "memories.jsonl:1: colour: unknown field"),
        (
            [{**GOOD_M, "metadata": {"fact_role": "instruction"}}],
            [GOOD_Q],
            "",
            "metadata.fact_role: reserved",
        ),
        ([GOOD_M], [{**GOOD_Q, "scope": "u1"}], "", "queries.jsonl:1: scope: must be a non-empty object"),
        (
            [GOOD_M],
            [{**GOOD_Q, "noise_patterns": ["(unclosed"]}],
            "",
            "queries.jsonl:1: noise_patterns: bad regex",
        ),
        ([GOOD_M], [GOOD_Q], "q1 0 m1 1\nq9 0 m1 1\n", "qrels.tsv:2: query_id: unknown query 'q9'"),
        ([GOOD_M], [GOOD_Q], "q1 0 m7 1\n", "qrels.tsv:1: memory_id: unknown memory 'm7'"),
        ([GOOD_M], [GOOD_Q], "q1 0 m1 high\n", "qrels.tsv:1: grade: must be an integer"),
        ([GOOD_M], [GOOD_Q], "q1 m1 1\n", "qrels.tsv:1: expected 4 columns"),
        ([GOOD_M], [GOOD_Q], "q1 0 m1 1\nq1 0 m1 2\n", "qrels.tsv:2: memory_id: 'q1' judges 'm1' twice"),
        ([{**GOOD_M, "scope": {"user": "u2"}}], [GOOD_Q], "q1 0 m1 1\n", "memory 'm1' of another scope"),
    ],
)
def test_bad_file_names_file_line_and_field(tmp_path, memories, queries, qrels, expected):
    with pytest.raises(SuiteError) as err:
        load_suite(write(tmp_path / "s", memories, queries, qrels))
    assert expected in str(err.value)


def test_non_utf8_bytes_are_reported_with_their_line(tmp_path):
    folder = write(tmp_path / "s", [GOOD_M], [GOOD_Q], "")
    with open(folder / "memories.jsonl", "ab") as fh:
        fh.write(b'{"id": "m2", "text": "caf\xe9", "scope": {"user": "u1"}}\n')
    with pytest.raises(SuiteError, match=r"memories.jsonl:2: not UTF-8"):
        load_suite(folder)


def test_every_problem_is_reported_at_once(tmp_path):
    with pytest.raises(SuiteError) as err:
        load_suite(write(tmp_path / "s", [GOOD_M, "{bad\n", {"id": "m3"}], [GOOD_Q], "q1 0 zz 1\n"))
    assert len(err.value.problems) >= 4  # malformed line, missing text, missing scope, unknown memory


def test_missing_directory_and_files_are_clear(tmp_path):
    with pytest.raises(SuiteError, match="does not exist"):
        load_suite(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SuiteError, match="memories.jsonl: file is missing"):
        load_suite(tmp_path / "empty")


def test_runner_exits_non_zero_on_a_bad_suite_before_any_work(tmp_path):
    folder = write(tmp_path / "s", [GOOD_M, '{"id": "m2", "text": oops}\n'], [GOOD_Q], "")
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.run",
            "suite=jsonl",
            f"suite.path={folder}",
            "variant=bm25",
            "tracking=none",
            f"hydra.run.dir={out}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "memories.jsonl:2: malformed JSON" in proc.stderr
    assert not (out / "metrics.json").exists()  # nothing half-written


# --- ids, numbers and text that would corrupt outputs; rules in experiments/suites/fields.py

CORPUS = REPO / "tests" / "data" / "bad_suites"
JSONL_CASES = sorted(
    p.name
    for p in CORPUS.iterdir()
    if (p / "expected.txt").is_file() and not p.name.startswith("beam_") and p.name != "huge_text"
)


@pytest.mark.parametrize("case", JSONL_CASES)
def test_every_bad_suite_of_the_corpus_fails_in_process_with_its_message(case):
    """The fast twin of the CLI corpus test (test_reliability_bad_input.py): same cases, same messages."""
    expected = (CORPUS / case / "expected.txt").read_text("utf-8").strip()
    path = CORPUS / case / "suite.jsonl" if case == "path_is_a_file" else CORPUS / case
    with pytest.raises(SuiteError) as err:
        load_suite(path)
    assert expected in str(err.value)


@pytest.mark.parametrize(
    "memories, queries, qrels, expected",
    [
        ([{**GOOD_M, "id": "m\t1"}], [GOOD_Q], "", "memories.jsonl:1: id: must not contain whitespace"),
        ([GOOD_M], [{**GOOD_Q, "id": "q1\n"}], "", "queries.jsonl:1: id: must not contain whitespace"),
        ([{**GOOD_M, "id": "m\u00a01"}], [GOOD_Q], "", "U+00A0 at position 1"),  # no-break space
        ([{**GOOD_M, "id": "m\u200b1"}], [GOOD_Q], "", "U+200B at position 1"),  # zero-width space
        ([{**GOOD_M, "id": "m\x071"}], [GOOD_Q], "", "U+0007 at position 1"),  # a control character
        ([{**GOOD_M, "id": ""}], [GOOD_Q], "", "memories.jsonl:1: id: must be a non-empty string"),
        ([GOOD_M], [{**GOOD_Q, "id": "Cafe\u0301"}], "", "queries.jsonl:1: id: must be in Unicode NFC form"),
        (['{"id": "m1", "text": "t", "scope": {"user": "u1"}, "strength": -Infinity}\n'], [GOOD_Q], "",
         "memories.jsonl:1: strength: -Infinity is not a JSON number"),
        (['{"id": "m1", "text": "t", "scope": {"user": "u1"}, "confidence": 1e999}\n'], [GOOD_Q], "",
         "memories.jsonl:1: confidence: 1e999 is too large for a finite number"),
        (['{"id": "m1", "text": "t", "scope": {"user": "u1"}, "metadata": {"w": NaN}}\n'], [GOOD_Q], "",
         "memories.jsonl:1: metadata.w: NaN is not a JSON number"),
        (["[" * 100_000 + "]" * 100_000 + "\n"], [GOOD_Q], "", "memories.jsonl:1: malformed JSON"),
        (['{"id": "m1", "text": "t", "scope": {"user": "\\udfff"}}\n'], [GOOD_Q], "",
         "memories.jsonl:1: scope.user: contains a lone surrogate U+DFFF"),
        ([GOOD_M], ['{"id": "\\ud800", "text": "t", "scope": {"user": "u1"}}\n'], "",
         "queries.jsonl:1: id: contains a lone surrogate U+D800"),
        ([{**GOOD_M, "text": None}], [GOOD_Q], "", "memories.jsonl:1: text: must be a non-empty"),
        ([{**GOOD_M, "scope": {"user": ""}}], [GOOD_Q], "", "jsonl:1: scope: must be a non-empty object"),
        ([GOOD_M], [GOOD_Q], "q1 0 m1 \u0661\n", "qrels.tsv:1: grade: must be an integer (ASCII"),
        ([GOOD_M], [GOOD_Q], "q1 0 m1 1.0\n", "qrels.tsv:1: grade: must be an integer"),
        ([GOOD_M], [GOOD_Q], "q1 \uff10 m1 1\n", "qrels.tsv:1: iteration: must be an integer (ASCII digits)"),
        ([GOOD_M], [GOOD_Q], "q1 0 m1\u00a0x 1\n", "qrels.tsv:1: memory_id: must not contain whitespace"),
        ([GOOD_M], [GOOD_Q], "q1 0 m1 1 extra\n", "qrels.tsv:1: expected 4 columns"),
    ],
)  # fmt: skip
def test_ids_numbers_and_text_that_would_corrupt_outputs_are_rejected(
    tmp_path, memories, queries, qrels, expected
):
    with pytest.raises(SuiteError) as err:
        load_suite(write(tmp_path / "s", memories, queries, qrels))
    assert expected in str(err.value)
    assert "Traceback" not in str(err.value)


def test_query_ids_that_look_like_missing_values_are_valid_ids(tmp_path):
    queries = [{**GOOD_Q, "id": qid} for qid in ("NA", "null", "nan", "None", "1.0")]
    suite = load_suite(write(tmp_path / "s", [GOOD_M], queries, "NA 0 m1 1\nnull 0 m1 2\n"))
    assert [q.id for q in suite.queries] == ["NA", "null", "nan", "None", "1.0"]
    assert dict(suite.qrels) == {"NA": {"m1": 1}, "null": {"m1": 2}}


def test_the_same_rules_hold_for_a_suite_built_in_code():
    """check_suite applies the field rules to every suite (BEAM, generated), not only to JSONL files."""
    from tests.support import memory, query

    bad = Suite(
        name="built",
        memories=(memory("m 1", "fine text"), memory("m2", "x", strength=float("inf"))),
        queries=(query("q1", "a question", labels=MappingProxyType({"ability": "ie"})),),
        qrels={"q1": {"m2": True}},
        k=0,
        label_names=("category",),
    )
    with pytest.raises(SuiteError) as err:
        check_suite(bad)
    text = str(err.value)
    assert "memories:1: id: must not contain whitespace" in text
    assert "memories:2: strength: must be a finite number, got inf" in text
    assert "suite: k: must be a positive integer, got 0" in text
    assert "queries:1: labels.ability: not a declared label (declared: category)" in text
    assert "suite: labels: declares label 'category', but no query has it" in text
    assert "grades memory 'm2' True: not an integer" in text


# --- suite.yaml: bounded, safe, and k / labels validated and used


def with_yaml(folder: Path, text: str | bytes) -> Path:
    if isinstance(text, bytes):
        (folder / "suite.yaml").write_bytes(text)
    else:
        (folder / "suite.yaml").write_text(text, "utf-8")
    return folder


LABELED_Q = {**GOOD_Q, "labels": {"category": "code"}}


def test_suite_yaml_k_and_labels_are_read(tmp_path):
    folder = with_yaml(
        write(tmp_path / "s", [GOOD_M], [LABELED_Q], "q1 0 m1 1\n"), "k: 5\nlabels: [category]\n"
    )
    suite = load_suite(folder)
    assert suite.k == 5 and suite.label_names == ("category",)
    assert suite.summary()["k"] == 5 and suite.summary()["label_names"] == ["category"]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("k: 0\n", "suite.yaml:1: k: must be a positive integer, got 0"),
        ("name: s\nk: -3\n", "suite.yaml:2: k: must be a positive integer, got -3"),
        ("k: true\n", "suite.yaml:1: k: must be a positive integer, got True"),
        ("k: '5'\n", "suite.yaml:1: k: must be a positive integer, got '5'"),
        ("k: 5.0\n", "suite.yaml:1: k: must be a positive integer, got 5.0"),
        ("labels: category\n", "suite.yaml:1: labels: must be a list of label names"),
        ("labels: [category, category]\n", "suite.yaml:1: labels: names a label twice"),
        (
            "labels: [category, ability]\n",
            "suite.yaml: labels: declares label 'ability', but no query has it",
        ),
        (
            "colour: red\n",
            "suite.yaml:1: colour: unknown field (known: name, version, description, k, labels, cluster)",
        ),
        ("name: ''\n", "suite.yaml:1: name: must be a non-empty string"),
        ("- a\n- b\n", "suite.yaml: must be a mapping"),
        ("k: [\n", "suite.yaml:2: not valid YAML"),
        ("x: &anchor 1\ny: *anchor\n", "suite.yaml:1: YAML anchors and aliases are not allowed"),
        ("a: " + "[" * 30_000 + "]" * 30_000 + "\n", "suite.yaml:1: nested deeper than 8 levels"),
        (b"name: caf\xe9\n", "suite.yaml: not UTF-8 text"),
        ("description: " + "x" * 70_000 + "\n", "suite.yaml: larger than 64 KiB"),
    ],
)
def test_bad_suite_yaml_is_a_clear_error(tmp_path, text, expected):
    folder = with_yaml(write(tmp_path / "s", [GOOD_M], [LABELED_Q], "q1 0 m1 1\n"), text)
    with pytest.raises(SuiteError) as err:
        load_suite(folder)
    assert expected in str(err.value)


def test_suite_yaml_from_an_endless_device_is_refused_unread(tmp_path):
    folder = write(tmp_path / "s", [GOOD_M], [LABELED_Q], "q1 0 m1 1\n")
    (folder / "suite.yaml").symlink_to("/dev/zero")
    with pytest.raises(SuiteError, match="suite.yaml: cannot read .*: is a device: only regular files"):
        load_suite(folder)


def test_suite_yaml_reads_are_bounded(tmp_path):
    folder = write(tmp_path / "s", [GOOD_M], [LABELED_Q], "q1 0 m1 1\n")
    (folder / "suite.yaml").write_text("description: " + "x" * 70_000 + "\n")
    with pytest.raises(SuiteError, match="suite.yaml: larger than 64 KiB"):
        load_suite(folder)


def test_the_alias_bomb_is_rejected_before_it_expands(tmp_path):
    bomb = (CORPUS / "suite_yaml_alias_bomb" / "suite.yaml").read_bytes()
    assert len(bomb) < 400  # a few hundred bytes that safe_load would expand into ~400 million items
    started = time.perf_counter()
    with pytest.raises(SuiteError, match="anchors and aliases are not allowed"):
        load_suite(CORPUS / "suite_yaml_alias_bomb")
    assert time.perf_counter() - started < 2


# --- files that cannot be read name the file; a file where a directory belongs says so


def test_a_suite_path_that_is_a_file_says_it_is_not_a_directory(tmp_path):
    (tmp_path / "suite.jsonl").write_text("{}\n")
    with pytest.raises(SuiteError) as err:
        load_suite(tmp_path / "suite.jsonl")
    assert "is not a directory" in str(err.value) and "does not exist" not in str(err.value)


def test_a_suite_file_that_is_a_directory_says_so(tmp_path):
    folder = write(tmp_path / "s", [GOOD_M], [GOOD_Q], "")
    (folder / "qrels.tsv").unlink()
    (folder / "qrels.tsv").mkdir()
    with pytest.raises(SuiteError, match=r"qrels.tsv: .*qrels.tsv is a directory, not a file"):
        load_suite(folder)


def test_an_unreadable_suite_file_is_named_with_the_os_reason(tmp_path):
    """A symlink loop: a real OSError (ELOOP) that even root gets, on the same path as EACCES."""
    folder = write(tmp_path / "s", [GOOD_M], [GOOD_Q], "")
    (folder / "memories.jsonl").unlink()
    (folder / "memories.jsonl").symlink_to(folder / "memories.jsonl")
    with pytest.raises(SuiteError) as err:
        load_suite(folder)
    assert (
        f"memories.jsonl: cannot read {folder / 'memories.jsonl'}: Too many levels of symbolic links"
        in str(err.value)
    )
