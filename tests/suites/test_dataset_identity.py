"""Dataset identity: the sha256 of every file a loader read, and the known release they are (or not).

Specification: the real files are named as their release; a copy with one byte changed is named as a
modified release, never as the release itself; the hashes are in the suite's tags (so tags.json, MLflow).
"""

from __future__ import annotations

import hashlib
import json
import shutil

from experiments.suites.beam import load_beam
from experiments.suites.locomo import load_locomo

BEAM_RELEASE = "BEAM 100K at upstream commit b2a3ee8"


def test_beam_100k_is_named_as_its_release(beam_suite, beam_100k):
    assert beam_suite.tags["dataset_release"] == BEAM_RELEASE
    files = json.loads(beam_suite.tags["dataset_files"])
    assert len(files) == 20  # chat.json and probing_questions.json of 10 conversations
    chat = beam_100k / "1" / "chat.json"
    assert files["100K/1/chat.json"] == hashlib.sha256(chat.read_bytes()).hexdigest()


def test_a_byte_modified_beam_file_is_named_modified(tmp_path, beam_100k):
    copy = tmp_path / "100K" / "1"
    shutil.copytree(beam_100k / "1", copy)
    assert load_beam(copy).tags["dataset_release"] == f"{BEAM_RELEASE} (2 of 20 files)"
    chat = copy / "chat.json"
    data = bytearray(chat.read_bytes())
    data[data.index(b"Lisbon") if b"Lisbon" in data else data.index(b"the")] ^= 0x20  # one letter's case
    chat.write_bytes(bytes(data))
    tags = load_beam(copy).tags
    assert tags["dataset_release"] == f"modified {BEAM_RELEASE}: 100K/1/chat.json"
    assert json.loads(tags["dataset_files"])["100K/1/chat.json"] == hashlib.sha256(bytes(data)).hexdigest()


def test_locomo_cut_is_named_and_a_modified_copy_is_not(tmp_path, locomo_file):
    release = load_locomo(locomo_file).tags["dataset_release"]
    assert release.startswith("LoCoMo locomo10.json, conversations 1-5")
    copy = tmp_path / locomo_file.name
    copy.write_bytes(locomo_file.read_bytes().replace(b"Caroline", b"Karoline", 1))
    tags = load_locomo(copy).tags
    assert tags["dataset_release"].startswith("modified LoCoMo locomo10.json, conversations 1-5")
    assert tags["dataset_sha256"] == hashlib.sha256(copy.read_bytes()).hexdigest()
    renamed = tmp_path / "mine.json"
    shutil.copy(locomo_file, renamed)  # the same bytes under another name are still the release
    assert load_locomo(renamed).tags["dataset_release"].startswith("LoCoMo locomo10.json, conversations 1-5")
