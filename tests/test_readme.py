"""The README's result tables are the ones the project's commands wrote (never typed by hand)."""

from __future__ import annotations

from experiments.tools.readme_sync import documents, main, render


def test_readme_generated_blocks_are_up_to_date():
    assert main(["--check"]) == 0, "run `python -m experiments.tools.readme_sync`"


def test_every_generated_block_names_an_existing_report():
    for path, levels in documents().items():
        assert "*(missing:" not in render(path.read_text(), levels=levels), path


def test_a_generated_block_rebases_the_reports_relative_links_onto_the_document(tmp_path):
    (tmp_path / "reports" / "study").mkdir(parents=True)
    (tmp_path / "reports" / "study" / "report.md").write_text(
        "# Title\n\n## Plot\n\n![heat map](heatmap.png) [html](index.html)"
        " [ext](https://x.org/a.png) [top](#plot)\n"
    )
    doc = "<!-- generated from reports/study/report.md -->\n<!-- end generated -->\n"
    out = render(doc, root=tmp_path, levels=1, doc_dir=tmp_path / "docs")
    assert "![heat map](../reports/study/heatmap.png)" in out and "[html](../reports/study/index.html)" in out
    assert "[ext](https://x.org/a.png)" in out and "[top](#plot)" in out and "### Plot" in out
