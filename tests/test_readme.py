"""The README's result tables are the ones the project's commands wrote (never typed by hand)."""

from __future__ import annotations

from experiments.tools.readme_sync import documents, main, render


def test_readme_generated_blocks_are_up_to_date():
    assert main(["--check"]) == 0, "run `python -m experiments.tools.readme_sync`"


def test_every_generated_block_names_an_existing_report():
    for path, levels in documents().items():
        assert "*(missing:" not in render(path.read_text(), levels=levels), path


def test_a_copied_reports_images_and_links_point_at_the_report_folder(tmp_path):
    report = tmp_path / "reports" / "study"
    report.mkdir(parents=True)
    (report / "report.md").write_text(
        "# T\n\n![heat map](heatmap.png) [one](one/report.md) [web](https://x.org/a) [top](#t)\n"
    )
    doc = "<!-- generated from reports/study/report.md -->\n<!-- end generated -->\n"
    out = render(doc, root=tmp_path, levels=1, doc_dir=tmp_path / "docs")
    assert "![heat map](../reports/study/heatmap.png)" in out
    assert "[one](../reports/study/one/report.md)" in out
    assert "[web](https://x.org/a)" in out and "[top](#t)" in out
