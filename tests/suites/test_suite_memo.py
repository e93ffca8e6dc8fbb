"""A sweep's jobs share one loaded suite only while its loader config and every file under its path are
unchanged: an edited, added or removed file, or another loader setting, loads it again."""

from __future__ import annotations

import os

from experiments.configure.compose import compose_config
from tests.support import tiny_suite
from tests.sweep_support import write_tiny_suite


def compose(*overrides: str):
    return compose_config(["suite=jsonl", "variant=bm25", *overrides])


def test_the_memoised_suite_is_reused_only_while_its_config_and_files_are_the_same(tmp_path):
    from experiments.configure.settings import load_suite_from_config

    root = write_tiny_suite(tmp_path)
    cfg = compose(f"suite.path={root}")
    first = load_suite_from_config(cfg, memoise=True)
    assert load_suite_from_config(cfg, memoise=True) is first
    # A report-only key is not the loader's: the same suite.
    assert (
        load_suite_from_config(compose(f"suite.path={root}", "suite.report_label=other"), memoise=True)
        is first
    )

    # A file edited in place (same size, a new mtime): loaded again.
    memories = root / "memories.jsonl"
    stat = memories.stat()
    os.utime(memories, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    second = load_suite_from_config(cfg, memoise=True)
    assert second is not first
    assert load_suite_from_config(cfg, memoise=True) is second

    # A memory dropped from the file: the new suite has one memory fewer.
    lines = memories.read_text("utf-8").splitlines(keepends=True)
    memories.write_text("".join(lines[:-1]), "utf-8")
    third = load_suite_from_config(cfg, memoise=True)
    assert len(third.memories) == len(tiny_suite().memories) - 1

    # A file added in a subfolder, then removed: each changes what is reused.
    (root / "extra").mkdir()
    (root / "extra" / "notes.txt").write_text("x", "utf-8")
    fourth = load_suite_from_config(cfg, memoise=True)
    assert fourth is not third
    (root / "extra" / "notes.txt").unlink()
    assert load_suite_from_config(cfg, memoise=True) is not fourth


def test_the_files_signature_lists_every_file_once_in_a_stable_order(tmp_path):
    from experiments.suites.load import files_signature

    (tmp_path / "b" / "c").mkdir(parents=True)
    for name in ("a.json", "b/x.json", "b/c/y.json", "b c.json"):
        (tmp_path / name).write_text(name, "utf-8")
    (tmp_path / "link").symlink_to(tmp_path / "b", target_is_directory=True)  # not descended into
    signature = files_signature(tmp_path)
    names = [os.path.relpath(path, tmp_path) for path, _, _ in signature]
    assert sorted(names) == sorted(["a.json", "b/x.json", "b/c/y.json", "b c.json"])
    assert names == sorted(names, key=lambda n: os.path.join(str(tmp_path), n))
    assert files_signature(tmp_path) == signature
    assert files_signature(tmp_path / "a.json") == (
        (str(tmp_path / "a.json"), 6, (tmp_path / "a.json").stat().st_mtime_ns),
    )
    assert files_signature(tmp_path / "missing") == ()
