"""Comparison reports built from real runs: `experiments.run` (bm25, three k1 values) on a tiny suite,
logged to a temporary SQLite MLflow store, read back by experiment name; the HTML is parsed and must hold
the table and every plot as an embedded PNG.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from types import MappingProxyType

import pandas as pd
import pytest

from experiments.compare import build_report
from experiments.compare.cli import main
from experiments.suites.jsonl import save_suite
from experiments.suites.suite import Suite
from experiments.track.finished_runs import load_run_dir, read_per_query
from retrieval.types import Memory, Query
from tests.support import REPO, worse_run

TOPICS = [
    "python formatter black line length", "postgres connection pool size", "kubernetes pod memory limit",
    "react component state hooks", "rust borrow checker lifetimes", "docker image layer caching",
    "git rebase interactive squash", "redis cache eviction policy", "terraform state locking backend",
    "pytest fixture scope session", "nginx reverse proxy timeout", "graphql schema resolver batching",
]  # fmt: skip
K1_VALUES = ("0.3", "1.2", "3")  # a sweep: children of one MLflow parent run
SOLO_K1 = "1.5"  # a run of the same experiment outside the sweep


def report_suite() -> Suite:
    scope = MappingProxyType({"project": "p1"})
    # Short distractors repeat one query word: a large k1 (weak term-frequency saturation) ranks them first.
    words = [t.split() for t in TOPICS]
    memories = [
        Memory(
            id=f"m{i}",
            text=f"we decided on {t} after a long review of the options with the team",
            scope=scope,
        )
        for i, t in enumerate(TOPICS)
    ]
    memories += [
        Memory(id=f"d{i}", text=" ".join([w[0]] * 5 + [w[1]]), scope=scope) for i, w in enumerate(words)
    ]
    memories += [Memory(id=f"e{i}", text=" ".join([w[2]] * 4), scope=scope) for i, w in enumerate(words)]
    queries = [
        Query(
            id=f"q{i}",
            text=t,
            scope=scope,
            labels=MappingProxyType({"category": ("code", "ops", "data")[i % 3]}),
        )
        for i, t in enumerate(TOPICS)
    ]
    qrels = {f"q{i}": {f"m{i}": 1} for i in range(len(TOPICS))}
    return Suite(name="report-tiny", memories=tuple(memories), queries=tuple(queries), qrels=qrels, k=5)


def run(suite_dir: Path, out: Path, overrides: list[str]) -> Path:
    from experiments.configure.compose import compose_config
    from experiments.run.app import run_experiment

    cfg = compose_config(
        [
            "suite=jsonl",
            f"suite.path={suite_dir}",
            "cache_dir=null",
            "progress=false",
            *overrides,
        ],
    )
    run_experiment(cfg, out)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("report")
    suite_dir = save_suite(report_suite(), tmp / "suite")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp)  # MLflow puts artifacts under ./mlruns of the working directory
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        import mlflow

        client = mlflow.MlflowClient(uri)
        parent = client.create_run(client.create_experiment("report-test"), run_name="sweep").info.run_id
        tracking = [
            "tracking=mlflow",
            f"tracking.tracker.uri={uri}",
            "tracking.tracker.experiment=report-test",
        ]
        child = f"+tracking.tracker.parent_run_id={parent}"
        dirs = [
            run(suite_dir, tmp / "runs" / f"k1_{k1}",
                ["variant=bm25", f"stage.bm25.k1={k1}", *tracking, child])
            for k1 in K1_VALUES
        ]  # fmt: skip
        run(
            suite_dir, tmp / "solo" / f"k1_{SOLO_K1}", ["variant=bm25", f"stage.bm25.k1={SOLO_K1}", *tracking]
        )
    sweep_dir = tmp / "multirun"
    sweep_dir.mkdir()
    (sweep_dir / "mlflow_parent.json").write_text(json.dumps({"uri": uri, "parent_run_id": parent}))
    return {"tmp": tmp, "uri": uri, "dirs": dirs, "suite_dir": suite_dir, "sweep_dir": sweep_dir}


class _Html(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.tables = 0
        self.headers: list[str] = []
        self._in_th = False

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs)["src"])
        self.tables += tag == "table"
        self._in_th = tag == "th"

    def handle_endtag(self, tag):
        self._in_th = self._in_th and tag != "th"

    def handle_data(self, data):
        if self._in_th:
            self.headers.append(data.strip())


def test_report_from_mlflow_experiment_has_table_curves_heatmap_and_embedded_plots(runs, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out_root = runs["tmp"] / "reports"
    argv = ["--name", "k1", "--out-root", str(out_root), "--experiment", "report-test", "--tracking-uri",
            runs["uri"], "--metrics", "P@5", "RR", "nDCG@10", "--command", "make the runs"]  # fmt: skip
    assert main(argv) == 0
    folder = out_root / "k1"
    markdown = (folder / "report.md").read_text()
    assert markdown.index("make the runs") < markdown.index("## Variants × metrics")
    for k1 in (*K1_VALUES, SOLO_K1):
        assert f"bm25[bm25.k1={k1}]" in markdown
    assert "Holm correction" in markdown and "randomization" in markdown
    assert "The runs vary `stage.bm25.k1`" in markdown
    table = markdown.split("## Variants × metrics")[1].split("\n\n")[1].splitlines()
    rr_cells = [line.strip("|").split("|")[2].strip() for line in table[2:]]
    # ‡q: these runs' one scope left only query-level statistics, and the mark says so
    assert rr_cells[0].startswith("**") and not rr_cells[0].endswith(("‡", "‡q"))
    assert rr_cells[-1].endswith("‡q") and not rr_cells[-1].startswith(
        "**"
    )  # k1=3 ranks the distractors first
    parser = _Html()
    parser.feed((folder / "index.html").read_text())
    # index.html references the PNGs beside it (one copy of each figure), as report.md does
    pngs = [(folder / src).read_bytes() for src in parser.images if (folder / src).is_file()]
    # curves, curves per category, heat map, wins/losses, quality against latency and against tokens
    assert len(pngs) == len(parser.images) == 6
    assert all(png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 2000 for png in pngs)
    assert sorted(p.name for p in folder.glob("*.png")) == [
        "curves.png",
        "curves_by_category.png",
        "frontier_latency_ms.png",
        "frontier_tokens_returned.png",
        "heatmap.png",
        "wins_losses.png",
    ]
    assert parser.tables >= 5 and {"P@5", "RR", "nDCG@10"} <= set(parser.headers)
    provenance = [
        line for line in markdown.split("## Provenance")[1].splitlines() if line.startswith("| bm25")
    ]
    assert len(provenance) == 4 and all("mlflow:" in line for line in provenance)
    assert not any("not recorded" in line for line in provenance)  # suite hash, commit: MLflow run tags


def test_sweep_baseline_is_the_lowest_setting_and_means_match_per_query_files(runs):
    out_root = runs["tmp"] / "reports_dirs"
    assert (
        main(
            [
                "--name",
                "dirs",
                "--out-root",
                str(out_root),
                "--run-dir",
                str(runs["tmp"] / "runs"),
                "--metrics",
                "P@5",
                "RR",
            ]
        )
        == 0
    )
    markdown = (out_root / "dirs" / "report.md").read_text()
    assert f"Baseline: **bm25[bm25.k1={K1_VALUES[0]}]**" in markdown
    table = markdown.split("## Variants × metrics")[1].split("\n\n")[1].splitlines()
    header = [c.strip() for c in table[0].strip("|").split("|")]
    for line in table[2:]:
        cells = [c.strip().removesuffix("q").strip("*†‡") for c in line.strip("|").split("|")]
        k1 = cells[0].split("=")[1].rstrip("]")
        frame = pd.read_csv(runs["tmp"] / "runs" / f"k1_{k1}" / "per_query.csv")
        answerable = frame[~frame["abstention"]]
        for metric in ("P@5", "RR"):
            assert float(cells[header.index(metric)].replace("*", "")) == pytest.approx(
                answerable[metric].mean(), abs=5e-4
            )


def test_a_significantly_worse_run_is_marked_and_listed_as_losing(runs):
    worse = runs["tmp"] / "worse_runs" / "bad"
    shutil.copytree(runs["dirs"][1], worse)
    # The same config run later on changed code (else the report drops it as a repeat of the first).
    tags = json.loads((worse / "tags.json").read_text())
    (worse / "tags.json").write_text(json.dumps({**tags, "git_commit": "f" * 40}))
    worse_run(worse, list(read_per_query(worse / "per_query.csv").index[:8]))
    out_root = runs["tmp"] / "reports_worse"
    argv = ["--name", "w", "--out-root", str(out_root), "--run-dir", str(runs["dirs"][1]),
            "--run-dir", str(worse), "--metrics", "RR", "P@5", "--baseline", "bm25"]  # fmt: skip
    assert main(argv) == 0
    markdown = (out_root / "w" / "report.md").read_text()
    table = markdown.split("## Variants × metrics")[1].split("\n\n")[1]
    assert table.splitlines()[3].startswith("| bm25 #2 |") and "‡" in table.splitlines()[3]
    assert "‡" not in table.splitlines()[2]
    losers = markdown.split("## Per-query wins and losses")[1].split("## Latency")[0]
    assert all(f"| q{i} |" in losers for i in range(8))


def test_runs_on_different_suite_versions_are_refused(runs, capsys):
    other = save_suite(replace(report_suite(), qrels={"q0": {"m0": 1}}), runs["tmp"] / "suite_other")
    other_run = run(other, runs["tmp"] / "other_runs" / "x", ["variant=bm25", "tracking=none"])
    argv = ["--name", "x", "--out-root", str(runs["tmp"] / "r"), "--run-dir", str(runs["dirs"][0]),
            "--run-dir", str(other_run)]  # fmt: skip
    assert main(argv) == 2
    assert "different suite versions" in capsys.readouterr().err


def test_a_rerun_on_the_same_commit_replaces_its_earlier_copy_and_the_report_says_so(runs):
    original, rerun = (replace(load_run_dir(d), tags={"git_commit": "abc"}) for d in (runs["dirs"][2],) * 2)
    rerun = replace(rerun, source="rerun", finished_at=original.finished_at + 1)
    others = [load_run_dir(d) for d in runs["dirs"][:2]]
    out = runs["tmp"] / "reports_rerun"
    comp = build_report([original, *others, rerun], out / "r", title="r", metrics=["RR"])
    assert len(comp.runs) == 3 and "rerun" in [r.source for r in comp.runs]
    markdown = (out / "r" / "report.md").read_text()
    assert "1 earlier run(s) with the same suite and config as a later one were left out" in markdown
    assert f"`{original.source}`" in markdown.split("## Variants")[0]
    on_other_code = replace(rerun, tags={"git_commit": "def"})
    assert (
        len(build_report([original, *others, on_other_code], out / "c", title="c", metrics=["RR"]).runs) == 4
    )
    kept = build_report([original, *others, rerun], out / "k", title="k", metrics=["RR"], keep_repeats=True)
    assert len(kept.runs) == 4


def test_a_sweep_folder_selects_the_children_of_its_mlflow_parent_run_only(runs, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out_root = runs["tmp"] / "reports_sweep"
    argv = [
        "--name",
        "s",
        "--out-root",
        str(out_root),
        "--sweep-dir",
        str(runs["sweep_dir"]),
        "--metrics",
        "RR",
    ]
    assert main(argv) == 0
    markdown = (out_root / "s" / "report.md").read_text()
    assert all(f"bm25[bm25.k1={k1}]" in markdown for k1 in K1_VALUES)
    assert f"k1={SOLO_K1}" not in markdown and "MLflow: parent run" in markdown


def test_a_rerun_sweep_reports_the_finished_runs_its_skipped_jobs_reused(runs, monkeypatch):
    import mlflow

    from experiments.run.resume import REUSED_TAG_PREFIX

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    client = mlflow.MlflowClient(runs["uri"])
    parent = json.loads((runs["sweep_dir"] / "mlflow_parent.json").read_text())["parent_run_id"]
    experiment = client.get_experiment_by_name("report-test").experiment_id
    (solo,) = [r for r in client.search_runs([experiment]) if r.data.params.get("stage.bm25.k1") == SOLO_K1]
    client.set_tag(parent, f"{REUSED_TAG_PREFIX}somehash", solo.info.run_id)
    try:
        out_root = runs["tmp"] / "reports_reused"
        argv = [
            "--name",
            "s",
            "--out-root",
            str(out_root),
            "--sweep-dir",
            str(runs["sweep_dir"]),
            "--metrics",
            "RR",
        ]
        assert main(argv) == 0
        markdown = (out_root / "s" / "report.md").read_text()
        assert all(f"bm25[bm25.k1={k1}]" in markdown for k1 in (*K1_VALUES, SOLO_K1))
    finally:
        client.delete_tag(parent, f"{REUSED_TAG_PREFIX}somehash")


def test_per_category_cells_are_tested_against_the_baseline_with_holm_across_cells(runs):
    from experiments.compare.analysis import build_comparison, by_label

    comp = build_comparison([load_run_dir(d) for d in runs["dirs"]], metrics=["RR"])
    cells = by_label(comp, "RR")
    assert sorted(cells["label"].unique()) == ["code", "data", "ops"] and set(cells["n"]) == {4}
    tested = cells[cells["run"] != comp.baseline]
    assert len(tested) == 6 and (tested["p_holm"] >= tested["p_value"]).all()
    assert cells.loc[cells["run"] == comp.baseline, "delta"].eq(0).all()
    worst = tested.loc[tested["delta"].idxmin()]
    frame = pd.read_csv(runs["dirs"][2] / "per_query.csv", index_col="query_id")
    base = pd.read_csv(runs["dirs"][0] / "per_query.csv", index_col="query_id")
    in_label = frame["label.category"] == worst["label"]
    assert worst["delta"] == pytest.approx(frame.loc[in_label, "RR"].mean() - base.loc[in_label, "RR"].mean())


def test_a_skipped_sweep_job_counts_as_the_finished_run_it_reused(runs):
    from experiments.track.finished_runs import find_run_dirs

    sweep = runs["tmp"] / "resumed_sweep"
    (sweep / "0").mkdir(parents=True)
    (sweep / "0" / "skipped.json").write_text(json.dumps({"run_dir": str(runs["dirs"][0])}))
    shutil.copytree(runs["dirs"][1], sweep / "1")
    assert find_run_dirs([sweep]) == [runs["dirs"][0], sweep / "1"]
    assert load_run_dir(sweep / "0").source == str(runs["dirs"][0])


def test_runs_selected_by_tag_across_experiments(runs, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out_root = runs["tmp"] / "reports_tag"
    argv = ["--name", "t", "--out-root", str(out_root), "--tracking-uri", runs["uri"],
            "--tag", "suite=report-tiny", "--metrics", "RR"]  # fmt: skip
    assert main(argv) == 0
    markdown = (out_root / "t" / "report.md").read_text()
    assert "MLflow: tag suite=report-tiny" in markdown
    assert all(f"bm25[bm25.k1={k1}]" in markdown for k1 in (*K1_VALUES, SOLO_K1))
    assert main([*argv[:6], "--tag", "suite=no-such-suite"]) == 2  # names the selector, exit 2


XSS_LINK = "[x](javascript:alert(1))"
XSS_ATTR = '[y](x"onmouseover="alert(1))'


class _Links(HTMLParser):
    """Every element's attributes, and the page's visible text."""

    def __init__(self) -> None:
        super().__init__()
        self.attrs: list[tuple[str, str, str | None]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.attrs += [(tag, k, v) for k, v in attrs]

    def handle_data(self, data):
        self.text.append(data)


def test_strings_from_runs_are_escaped_for_html_and_markdown(runs, tmp_path):
    """Suite, variant, label names and values, tags and sources carrying link / attribute / tag payloads
    become visible text: no javascript: link, no injected attribute, no element, in either file."""
    label = "label.[z](javascript:alert(2))"
    values = {"code": XSS_LINK, "ops": XSS_ATTR, "data": "<script>alert(3)</script> & `tick`"}
    records = []
    for i, rec in enumerate(load_run_dir(d) for d in runs["dirs"]):
        per_query = rec.per_query.rename(columns={"label.category": label})
        per_query[label] = per_query[label].map(values)
        summary = {**rec.summary, "suite": {**rec.summary["suite"], "name": XSS_LINK}}
        summary["variant"] = [XSS_ATTR, XSS_LINK, "<img src=x onerror=alert(4)>"][i]
        tags = {**rec.tags, "git_commit": XSS_ATTR, "pipeline": XSS_LINK}
        source = f"{XSS_ATTR}/{i}"
        records.append(replace(rec, source=source, summary=summary, per_query=per_query, tags=tags))
    out = tmp_path / "xss"
    build_report(records, out, title=XSS_LINK, baseline=XSS_ATTR, metrics=["RR"], source=XSS_ATTR,
                 commands=["```\n" + XSS_LINK])  # fmt: skip
    page = (out / "index.html").read_text()
    parser = _Links()
    parser.feed(page)
    assert "<script" not in page and {tag for tag, _, _ in parser.attrs} <= {
        "html",
        "meta",
        "img",
        "div",
        "tr",
        "td",
    }
    assert {v for _, k, v in parser.attrs if k == "class"} <= {"scroll", "text"}
    assert all(v.isdigit() for _, k, v in parser.attrs if k == "colspan")  # a memory text's full-width row
    assert all(not k.startswith("on") for _, k, _ in parser.attrs)  # no event handler attribute
    hrefs = [v for tag, k, v in parser.attrs if k == "href"]
    assert not any("javascript" in (v or "").lower() for v in hrefs) and "<a " not in page
    text = "".join(parser.text)
    for visible in (XSS_LINK, XSS_ATTR, "<script>alert(3)</script> & `tick`", "<img src=x onerror=alert(4)>"):
        assert visible in text, visible
    assert sorted(p.name for p in out.glob("*.png"))  # the label's figure file name is a plain name
    assert all("/" not in p.name and not p.name.startswith(".") for p in out.iterdir())

    from markdown_it import MarkdownIt  # the Markdown, rendered as a Markdown viewer would

    rendered = MarkdownIt("commonmark").enable("table").render((out / "report.md").read_text())
    parser = _Links()
    parser.feed(rendered)
    assert not [v for _, k, v in parser.attrs if k == "href"]  # the report makes no links here
    assert {tag for tag, _, _ in parser.attrs} <= {"img"} and "<script" not in rendered
    assert all(not k.startswith("on") for _, k, _ in parser.attrs)
    text = "".join(parser.text)
    assert XSS_LINK in text and XSS_ATTR in text and "<img src=x onerror=alert(4)>" in text


def test_reports_commit_markdown_and_figures_once():
    """reports/ holds each result once: report.md and the PNGs it links; index.html is generated on demand
    and git-ignored (docs/gate_and_reports.md, "One copy of each result")."""
    root = REPO
    listed = subprocess.run(
        ["git", "ls-files", "reports"], cwd=root, capture_output=True, text=True, check=True
    )
    files = [Path(f) for f in listed.stdout.split()]
    assert files and not [f for f in files if f.suffix in (".html", ".htm")]
    assert subprocess.run(["git", "check-ignore", "-q", "reports/any/index.html"], cwd=root).returncode == 0
    markdown = {f: (root / f).read_text() for f in files if f.suffix == ".md"}
    for png in (f for f in files if f.suffix == ".png"):  # every stored figure is one a report links
        assert any(md.parent == png.parent and f"]({png.name})" in text for md, text in markdown.items()), png
    assert not [md for md, text in markdown.items() if "data:image" in text]  # and none is inlined
