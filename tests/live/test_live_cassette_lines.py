"""A cassette's lines say what is wrong with them (issue 41, part 3; experiments/systems/cassette.py), through
`memeval-run` with the Python adapter of test_live_verdict.py:

- a last line whose newline is there but whose checksum is not (an edit, not a kill mid-write) is
  "cassette line N is corrupt", exit 2, in replay and in record (it was dropped as a torn write: the
  replay said "replay miss ... record it first", a record run re-asked silently); a last line without
  its newline is still a torn write, dropped and reported;
- a cassette holding two different answers to one search (an altered line appended with a valid chain)
  is refused naming both lines (the replay took the later one without a word).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.systems.cassette import _chained, _checksum
from tests.live.test_live_verdict import ok, record, replay, suite_dir  # noqa: F401 (a fixture)


def _lines(cassette: Path) -> list[str]:
    return cassette.read_text().splitlines(keepends=True)


@pytest.mark.parametrize("mode", ["replay", "record"])
def test_a_whole_last_line_with_a_bad_checksum_is_corrupt_not_torn(tmp_path, suite_dir, mode):  # noqa: F811
    cassette = tmp_path / "c.jsonl"
    ok(record(tmp_path, tmp_path / "rec", suite_dir, cassette))
    lines = _lines(cassette)
    last = json.loads(lines[-1])
    assert last["op"] == "search"
    last["response"] = last["response"][::-1]  # edited, its checksum left as it was; newline kept
    cassette.write_text("".join(lines[:-1]) + json.dumps(last, sort_keys=True, separators=(",", ":")) + "\n")
    again = (replay if mode == "replay" else record)(tmp_path, tmp_path / mode, suite_dir, cassette)
    assert again.returncode == 2, again.stdout[-2000:] + again.stderr[-2000:]
    assert f"c.jsonl:{len(lines)}: cassette line is corrupt (checksum mismatch" in again.stderr, again.stderr
    assert "replay miss" not in again.stderr


def test_a_last_line_without_its_newline_is_a_torn_write_dropped_and_reported(tmp_path, suite_dir):  # noqa: F811
    cassette = tmp_path / "c.jsonl"
    ok(record(tmp_path, tmp_path / "rec", suite_dir, cassette))
    lines = _lines(cassette)
    cassette.write_text("".join(lines) + lines[-1][:40])  # a kill mid-write
    ok(replay(tmp_path, tmp_path / "replay", suite_dir, cassette))
    report = json.loads((tmp_path / "replay" / "metrics.json").read_text())["system"]["cassette"]
    assert report["torn_tail_dropped"] is True


def test_two_answers_to_one_search_are_refused_naming_both_lines(tmp_path, suite_dir):  # noqa: F811
    cassette = tmp_path / "c.jsonl"
    ok(record(tmp_path, tmp_path / "rec", suite_dir, cassette))
    lines = _lines(cassette)
    number = 1 + next(i for i, line in enumerate(lines) if json.loads(line)["op"] == "search")
    altered = json.loads(lines[number - 1])
    altered["response"] = altered["response"][::-1]  # another answer to the very same request
    altered["sha256"] = _checksum(altered)
    altered["chain"] = _chained(json.loads(lines[-1])["chain"], altered["sha256"])  # a valid chain
    cassette.write_text("".join(lines) + json.dumps(altered, sort_keys=True, separators=(",", ":")) + "\n")
    again = replay(tmp_path, tmp_path / "replay", suite_dir, cassette)
    assert again.returncode == 2, again.stdout[-2000:] + again.stderr[-2000:]
    query = altered["request"]["query_id"]
    said = f"lines {number} and {len(lines) + 1} hold two different answers to one request"
    assert f"{said} (search of query '{query}')" in again.stderr, again.stderr[-2000:]
    assert not (tmp_path / "replay" / "metrics.json").exists()


def test_the_same_answer_recorded_twice_still_replays(tmp_path, suite_dir):  # noqa: F811
    cassette = tmp_path / "c.jsonl"
    ok(record(tmp_path, tmp_path / "rec", suite_dir, cassette))
    lines = _lines(cassette)
    twice = json.loads(next(line for line in lines if json.loads(line)["op"] == "search"))
    twice["elapsed_ms"] += 1.0  # two jobs of a sweep recorded the same answer at once
    twice["sha256"] = _checksum(twice)
    twice["chain"] = _chained(json.loads(lines[-1])["chain"], twice["sha256"])
    cassette.write_text("".join(lines) + json.dumps(twice, sort_keys=True, separators=(",", ":")) + "\n")
    ok(replay(tmp_path, tmp_path / "replay", suite_dir, cassette))
