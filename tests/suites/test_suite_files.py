"""Only regular files are read as suite files, never blocking and never unbounded
(experiments/suites/files.py): a FIFO named queries.jsonl is refused at once, a memories.jsonl that
links to /dev/zero is refused unread, and a file over the cap is refused with its size named.

The FIFO and /dev/zero cases run in a child process with a timeout and a memory limit: a loader that
waited on the FIFO or read /dev/zero to its end would hang or exhaust memory, and must fail this test,
not the machine.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import textwrap
import tracemalloc

import pytest

from experiments.suites.files import FileTooLarge, NotARegularFile, read_suite_file
from experiments.suites.jsonl import save_suite
from tests.support import REPO, tiny_suite

LOAD = textwrap.dedent(
    """
    import sys
    from experiments.suites.beam import load_beam
    from experiments.suites.jsonl import load_suite
    from experiments.suites.suite import SuiteError
    try:
        (load_beam if sys.argv[2] == "beam" else load_suite)(sys.argv[1])
    except SuiteError as err:
        print(err)
        sys.exit(2)
    """
)


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def _load_in_child(folder, kind: str = "jsonl") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", LOAD, str(folder), kind],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=_limit_memory,
    )


def test_a_fifo_named_queries_jsonl_is_refused_at_once(tmp_path):
    folder = save_suite(tiny_suite(), tmp_path / "suite")
    (folder / "queries.jsonl").unlink()
    os.mkfifo(folder / "queries.jsonl")
    done = _load_in_child(folder)  # a loader that opened it for reading would wait for a writer forever
    assert done.returncode == 2, done.stderr[-2000:]
    assert "queries.jsonl: cannot read" in done.stdout and "is a FIFO (named pipe)" in done.stdout


def test_a_memories_file_linked_to_dev_zero_is_refused_unread(tmp_path):
    folder = save_suite(tiny_suite(), tmp_path / "suite")
    (folder / "memories.jsonl").unlink()
    (folder / "memories.jsonl").symlink_to("/dev/zero")
    done = _load_in_child(folder)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "memories.jsonl: cannot read" in done.stdout and "is a device: only regular files" in done.stdout
    assert "MemoryError" not in done.stderr


def test_a_fifo_named_chat_json_in_a_beam_folder_is_refused_at_once(tmp_path):
    folder = tmp_path / "1"
    shutil.copytree(REPO / "tests" / "data" / "bad_suites" / "beam_chat_not_a_list", folder)
    (folder / "chat.json").unlink()
    os.mkfifo(folder / "chat.json")
    done = _load_in_child(folder, "beam")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "chat.json: cannot read" in done.stdout and "is a FIFO (named pipe)" in done.stdout


def test_a_file_over_the_cap_is_refused_naming_the_limit(tmp_path):
    path = tmp_path / "memories.jsonl"
    path.write_bytes(b"x" * 2049)
    with pytest.raises(FileTooLarge, match="larger than 2 KiB"):
        read_suite_file(path, limit=2048)
    assert read_suite_file(path, limit=2049) == b"x" * 2049


def test_a_socket_or_directory_is_not_a_suite_file(tmp_path):
    with pytest.raises(IsADirectoryError):
        read_suite_file(tmp_path)
    with pytest.raises(NotARegularFile, match="is a device"):
        read_suite_file("/dev/null")


def test_reading_a_small_file_allocates_its_size_not_the_cap(tmp_path):
    # `read(limit + 1)` allocated the whole 1 GiB cap for every file read (each of a BEAM tier's
    # chat.json files): harmless while the pages stay untouched, fatal where memory is not overcommitted.
    path = tmp_path / "chat.json"
    path.write_bytes(b"[]" * 50_000)
    tracemalloc.start()
    data = read_suite_file(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert data == b"[]" * 50_000 and peak < 10 * len(data)
