"""The README's result tables are the ones the project's commands wrote (never typed by hand)."""

from __future__ import annotations

from experiments.readme_sync import main, render
from tests.support import REPO


def test_readme_generated_blocks_are_up_to_date():
    assert main(["--check"]) == 0, "run `python -m experiments.readme_sync`"


def test_every_generated_block_names_an_existing_report():
    rendered = render((REPO / "README.md").read_text())
    assert "*(missing:" not in rendered
