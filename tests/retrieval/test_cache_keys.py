"""The cache-key rule is written once (retrieval/code_version.py KEY_RULES): each cache's key takes exactly
the parts its rule names, changes with each of them, and docs/caching.md lists exactly what the code
hashes."""

from __future__ import annotations

import re

import pytest

from retrieval import code_version
from retrieval.code_version import KEY_RULES, key_table
from tests.support import REPO


def test_the_docs_table_is_the_rule_in_the_code():
    page = (REPO / "docs" / "caching.md").read_text()
    found = re.search(r"<!-- key table[^>]*-->\n(.*?)\n<!-- end key table -->", page, re.S)
    assert found, "docs/caching.md has no generated key table"
    assert found[1].strip() == key_table()  # regenerate: python -m retrieval.code_version


def example_parts(rule) -> dict[str, str]:
    return {name: "torch" if name == "backend" else f"{name}-value" for name in rule.parts}


@pytest.mark.parametrize("cache", sorted(KEY_RULES))
def test_a_key_takes_exactly_its_parts_and_changes_with_each(cache, monkeypatch):
    rule = KEY_RULES[cache]
    parts = example_parts(rule)
    key = rule.key(**parts)
    assert key == rule.key(**parts)
    for name in parts:
        if name == "backend":
            assert rule.key(**{**parts, name: "onnx"}) != key
        else:
            assert rule.key(**{**parts, name: "other"}) != key
    with pytest.raises(TypeError, match="takes exactly"):
        rule.key(**parts, extra="x")
    if parts:
        with pytest.raises(TypeError, match="takes exactly"):
            rule.key(**dict(list(parts.items())[1:]))
    real = code_version.library_versions
    for library in rule.libraries:  # every library the rule names is in the key

        def upgraded(*names: str, lib: str = library) -> str:
            return real(*names).replace(f"{lib}=", f"{lib}=0+x")

        monkeypatch.setattr(code_version, "library_versions", upgraded)
        assert rule.key(**parts) != key, library
    monkeypatch.setattr(code_version, "library_versions", real)
    if rule.code:  # and the source of its code
        monkeypatch.setattr(code_version, "source_hash", lambda *names: "edited")
        assert rule.key(**parts) != key


def test_model_hash_covers_every_file_loading_reads_and_skips_what_it_never_reads(tmp_path):
    folder = tmp_path / "model"
    (folder / "1_Pooling").mkdir(parents=True)
    for name in ("config.json", "modules.json", "sentence_bert_config.json", "1_Pooling/config.json"):
        (folder / name).write_text("{}")
    before = code_version.model_hash(str(folder))
    (folder / "onnx").mkdir()
    (folder / "onnx" / "model.onnx").write_bytes(b"never read by memeval")
    (folder / ".cache").mkdir()
    (folder / ".cache" / "lock").write_text("")
    assert code_version.model_hash(str(folder)) == before
    for name in ("config.json", "sentence_bert_config.json", "1_Pooling/config.json"):
        (folder / name).write_text('{"changed": 1}')
        assert code_version.model_hash(str(folder)) != before, name
        before = code_version.model_hash(str(folder))
