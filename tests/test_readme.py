"""The README's result tables are the ones the project's commands wrote (never typed by hand)."""

from __future__ import annotations

from experiments.tools.readme_sync import documents, main, render


def test_readme_generated_blocks_are_up_to_date():
    assert main(["--check"]) == 0, "run `python -m experiments.tools.readme_sync`"


def test_every_generated_block_names_an_existing_report():
    for path, levels in documents().items():
        assert "*(missing:" not in render(path.read_text(), levels=levels), path
