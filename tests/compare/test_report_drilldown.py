"""The report's per-query drill-down, from real runs (`experiments.run`, bm25 at two k1 values) on a tiny
suite whose ids and texts carry markup, quotes, pipes, line breaks, invisible characters and look-alike
ids; the primary metric a suite config names; wide tables in scroll boxes; the plan's `drilldown:`.
"""

from __future__ import annotations

import re
import shutil
from html.parser import HTMLParser
from types import MappingProxyType

import numpy as np
import pytest

from experiments.compare import build_report
from experiments.compare.analysis import build_comparison
from experiments.compare.cli import main
from experiments.compare.drilldown import DrilldownOptions, clip, visible
from experiments.configure.compose import compose_config
from experiments.run_folder.ranking import read_ranking, saved_depth, write_ranking
from experiments.run_folder.trec import read_run
from experiments.study import PlanError, load_plan
from experiments.suites.jsonl import save_suite
from experiments.suites.suite import Suite
from experiments.track.finished_runs import RunError, load_run_dir
from retrieval.types import Memory, Query, RankedList
from tests.compare.test_report import TOPICS, run

SCRIPT_ID = "<script>alert(1)</script>"
QUOTE_ID = "q\"1'|x"
LATIN, CYRILLIC = "a1", "\u04301"  # look alike, differ
RTL = "\u202e"  # right-to-left override: would reverse the rest of the line on the page
LONG = "long " * 80
HOSTILE_QUERY = " </td></tr><script>alert(3)</script>\nsecond line"


def hostile_suite() -> Suite:
    scope = MappingProxyType({"project": "p1"})
    ids = [SCRIPT_ID, QUOTE_ID, LATIN, CYRILLIC, *(f"q{i}" for i in range(4, len(TOPICS)))]
    words = [t.split() for t in TOPICS]
    extra = [
        " | pipe | and\nnew line <img src=x onerror=alert(2)>",
        f" quotes \" ' and {RTL}override\u200b",
        " latin",
        " cyrillic",
    ]
    memories = [
        Memory(
            id=f"m{i}",
            text=f"we decided on {t} after a long review of the options with the team"
            + (extra[i] if i < len(extra) else "")
            + (LONG if i == 5 else ""),
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
            id=qid,
            text=t + (HOSTILE_QUERY if i == 0 else ""),
            scope=scope,
            labels=MappingProxyType({"category": ("code", "ops", "data")[i % 3]}),
        )
        for i, (qid, t) in enumerate(zip(ids, TOPICS, strict=True))
    ]
    qrels = {qid: {f"m{i}": 1} for i, qid in enumerate(ids)}
    return Suite(name="drilldown-tiny", memories=tuple(memories), queries=tuple(queries), qrels=qrels, k=5)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("drilldown")
    suite_dir = save_suite(hostile_suite(), tmp / "suite")
    common = ["variant=bm25", "tracking=none", "+suite.primary=nDCG@10"]
    dirs = [
        run(suite_dir, tmp / "runs" / f"k1_{k1}", [*common, f"stage.bm25.k1={k1}"]) for k1 in ("0.3", "3")
    ]
    return {"tmp": tmp, "dirs": dirs, "suite_dir": suite_dir}


class _Page(HTMLParser):
    """Attributes of every element, visible text, and the cell count of every table row."""

    def __init__(self) -> None:
        super().__init__()
        self.attrs: list[tuple[str, str, str | None]] = []
        self.text: list[str] = []
        self.row_cells: list[int] = []
        self.scroll_boxes = self.tables = 0

    def handle_starttag(self, tag, attrs):
        self.attrs += [(tag, k, v) for k, v in attrs]
        if tag == "tr":
            self.row_cells.append(0)
        elif tag in ("td", "th"):
            self.row_cells[-1] += 1
        self.tables += tag == "table"
        self.scroll_boxes += tag == "div" and ("class", "scroll") in attrs

    def handle_data(self, data):
        self.text.append(data)


def _page(html: str) -> _Page:
    parser = _Page()
    parser.feed(html)
    return parser


def test_ranking_file_keeps_the_top_k_and_lower_relevant_memories_with_every_score_column(tmp_path):
    ranks = np.arange(20, 0, -1, dtype=float)
    ranked = [
        RankedList("NA", tuple(f"m{i}" for i in range(20)), ranks,
                   {"score": ranks, "bm25": ranks * 2, "boost": np.where(ranks > 18, 0.5, 0.0)}, {}),
        RankedList("1.0", ("x,\"y", "m1"), ranks[:2], {"score": ranks[:2], "dense": ranks[:2] / 10}, {}),
    ]  # fmt: skip
    qrels = {"NA": {"m14": 2, "m2": 0, "m19": 0}, "1.0": {"m1": 1}}
    write_ranking(ranked, qrels, tmp_path / "ranking.csv", k=5)
    frame = read_ranking(tmp_path / "ranking.csv")
    na = frame[frame["query_id"] == "NA"]  # ids stay strings: not NaN, not the float 1.0
    assert list(na["rank"]) == [1, 2, 3, 4, 5, 15] and list(na["memory_id"])[-1] == "m14"
    assert list(na["relevance"].fillna(-1)) == [-1, -1, 0, -1, -1, 2]  # empty cell: unjudged
    assert list(na["bm25"]) == [40.0, 38.0, 36.0, 34.0, 32.0, 12.0] and na["dense"].isna().all()
    other = frame[frame["query_id"] == "1.0"]
    assert list(other["memory_id"]) == ['x,"y', "m1"] and other["bm25"].isna().all()
    assert list(other["dense"]) == [2.0, 1.9]
    assert saved_depth(["P@5", "RR", "nDCG@20"], 10) == 20 and saved_depth(["RR"], 10) == 10


def test_visible_shows_invisible_characters_and_clip_says_what_it_cut():
    assert visible(f"a{RTL}b\u200bc\nd") == "a⟨U+202E⟩b⟨U+200B⟩c d"
    assert visible(CYRILLIC) != visible(LATIN)
    assert clip("x" * 10, 4) == "xxxx … [+6 chars]" and clip("a  b\n c", 10) == "a b c"


def test_every_run_writes_its_ranking_and_the_report_drills_into_wins_losses_and_asked_queries(runs):
    first = load_run_dir(runs["dirs"][0])
    assert first.ranking is not None and {"score", "bm25"} <= set(first.ranking.columns)
    assert first.config["suite"]["primary"] == "nDCG@10"
    order = read_run(runs["dirs"][0] / "run.trec")  # the kept top ranks are the run file's, in order
    for query, rows in first.ranking.groupby("query_id"):
        top = rows[rows["rank"] <= 10].sort_values("rank")
        assert list(top["memory_id"]) == order[query][:10] and list(top["rank"]) == list(
            range(1, len(top) + 1)
        )
    out = runs["tmp"] / "report"
    build_report([load_run_dir(d) for d in runs["dirs"]], out, title="t", metrics=["R@10", "nDCG@10", "RR"],
                 drilldown=DrilldownOptions(n=2, queries=(CYRILLIC, "q5")))  # fmt: skip
    md = (out / "report.md").read_text()
    assert "## nDCG@10: difference from the baseline" in md  # the suite config's primary, not the first
    section = md.split("## Per-query drill-down")[1]
    assert f"### Query `{CYRILLIC}`" in section and "Shown as: asked for" in section
    assert section.count("### Query") >= 2 and ("gain of" in section or "loss of" in section)
    assert "| rank | memory | rel | score | bm25 | bm25_rank | text |" in section
    assert "| ✓ |" in section and "… [+" in section  # relevance marks; long texts cut with a mark
    assert "⟨U+202E⟩" in md and RTL not in md and "\u200b" not in md


def test_hostile_ids_and_texts_stay_text_in_html_and_markdown(runs):
    out = runs["tmp"] / "hostile"
    asked = (SCRIPT_ID, QUOTE_ID, LATIN, CYRILLIC)
    build_report([load_run_dir(d) for d in runs["dirs"]], out, title="t", metrics=["RR"],
                 drilldown=DrilldownOptions(n=1, queries=asked))  # fmt: skip
    page = (out / "index.html").read_text()
    parsed = _page(page)
    # the only images are the report's own figures, the PNG files beside index.html
    figures = re.compile(r'<img src="([A-Za-z0-9_][A-Za-z0-9_.-]*\.png)" alt="[^"<>]*">')
    body = page.split("<body>")[1]
    assert all((out / name).is_file() for name in figures.findall(body))
    assert "<script" not in page and "<img" not in figures.sub("", body)
    assert {tag for tag, _, _ in parsed.attrs} <= {"html", "meta", "img", "div", "tr", "td"}
    assert all(not k.startswith("on") for _, k, _ in parsed.attrs)
    text = "".join(parsed.text)
    for shown in (SCRIPT_ID, QUOTE_ID, "<img src=x onerror=alert(2)>", "</td></tr><script>alert(3)</script>"):
        assert shown in text, shown
    assert "⟨U+202E⟩override⟨U+200B⟩" in text and RTL not in page
    assert f"Query {LATIN}" in text and f"Query {CYRILLIC}" in text  # look-alikes: two queries, each shown
    assert parsed.scroll_boxes == parsed.tables  # every table scrolls inside its own box

    from markdown_it import MarkdownIt  # the Markdown as a viewer renders it: pipes and breaks stay in cells

    rendered = MarkdownIt("commonmark").enable("table").render((out / "report.md").read_text())
    parsed_md = _page(rendered)
    assert "<script" not in rendered and {tag for tag, _, _ in parsed_md.attrs} <= {"img"}
    widths = parsed_md.row_cells
    assert widths and all(w > 0 for w in widths)
    md_text = "".join(parsed_md.text)
    assert " | pipe | and new line <img src=x onerror=alert(2)>" in md_text and SCRIPT_ID in md_text
    for table in rendered.split("<table>")[1:]:  # every row of a table has its header's cell count
        rows = _page("<table>" + table.split("</table>")[0] + "</table>").row_cells
        assert len(set(rows)) == 1, rows


def test_memory_texts_in_html_are_full_width_rows_under_their_ranks(runs):
    out = runs["tmp"] / "wide"
    build_report([load_run_dir(d) for d in runs["dirs"]], out, title="t", metrics=["RR"],
                 drilldown=DrilldownOptions(n=1, queries=("q5",)))  # fmt: skip
    section = (out / "index.html").read_text().split("Per-query drill-down")[1]
    tables = re.findall(r"<table>.*?</table>", section)
    assert tables
    for table in tables:
        header = re.findall(r"<th>(.*?)</th>", table)
        texts = re.findall(r'<tr class="text"><td class="text" colspan="(\d+)">(.*?)</td></tr>', table)
        assert "text" not in header and texts  # the text is no column of the table, it is a row under it
        assert all(int(span) == len(header) for span, _ in texts)  # as wide as the table
        # each text row follows a row of ids and scores, with every header cell
        rows = re.findall(r"<tr>(.*?)</tr>", table.split("</thead>")[1])
        assert len(rows) == len(texts) and all(r.count("<td>") == len(header) for r in rows)
    # a text is shown to its cut mark (220 characters), not squeezed into a narrow column
    assert any(len(text) > 200 for t in tables for _, text in re.findall(r'colspan="(\d+)">(.*?)</td>', t))
    assert "… [+" in section


def test_an_unknown_query_asked_for_is_an_error_naming_it_and_nothing_is_written(runs, capsys):
    out_root = runs["tmp"] / "reports"
    args = ["--name", "x", "--out-root", str(out_root), "--run-dir", str(runs["dirs"][0].parent)]
    assert main([*args, "--queries", f"q99,{LATIN}"]) == 2
    assert "'q99'" in capsys.readouterr().err and not (out_root / "x").exists()
    with pytest.raises(RunError, match="close"):
        build_report([load_run_dir(d) for d in runs["dirs"]], runs["tmp"] / "y", title="t",
                     drilldown=DrilldownOptions(queries=("q4 ",)))  # fmt: skip
    assert main([*args, "--queries", LATIN, "--queries", CYRILLIC, "--drilldown", "0"]) == 0
    section = (out_root / "x" / "report.md").read_text().split("## Per-query drill-down")[1]
    assert section.count("### Query") == 2


def test_without_the_suite_or_a_ranking_file_the_drilldown_says_what_is_missing(runs):
    copies = []
    for d in runs["dirs"]:
        copy = runs["tmp"] / "copies" / d.name
        shutil.copytree(d, copy, dirs_exist_ok=True)
        copies.append(copy)
    (copies[1] / "ranking.csv").unlink()
    shutil.copytree(runs["suite_dir"], runs["tmp"] / "suite_moved", dirs_exist_ok=True)
    records = [load_run_dir(c) for c in copies]
    moved = {**records[0].config, "suite": {**records[0].config["suite"], "path": "/nowhere"}}
    records[0] = type(records[0])(**{**records[0].__dict__, "config": moved})
    out = runs["tmp"] / "partial"
    build_report(records, out, title="t", metrics=["RR"], drilldown=DrilldownOptions(n=1))
    section = (out / "report.md").read_text().split("## Per-query drill-down")[1]
    assert "Texts are not shown: its suite could not be loaded here" in section
    assert "bm25[bm25.k1=3]" in section.split("No `ranking.csv`")[1]  # the run that has none, named
    assert "Relevant memories (those the baseline ranked; the suite is not loaded)" in section


def test_primary_metric_comes_from_the_plan_or_cli_then_the_suite_then_the_first_metric(runs):
    records = [load_run_dir(d) for d in runs["dirs"]]
    comp = build_comparison(records, metrics=["RR", "R@10"])
    assert comp.primary == "RR"  # the suite's nDCG@10 is not among the report's metrics
    comp = build_report(records, runs["tmp"] / "p2", title="t", metrics=["nDCG@10", "RR"], primary="RR")
    assert comp.primary == "RR" and "## RR: difference" in (runs["tmp"] / "p2" / "report.md").read_text()
    with pytest.raises(RunError, match="primary metric 'P@5'"):
        build_report(records, runs["tmp"] / "p3", title="t", metrics=["RR"], primary="P@5")
    assert compose_config(["suite=beam"]).suite.primary == "nDCG@10"
    assert compose_config(["suite=spark25"]).suite.primary == "P@5"


def test_a_bad_suite_primary_is_a_config_error():
    from experiments.configure.check import suite_problems

    cfg = compose_config(["suite=spark25", "suite.primary=P@0"])
    assert any(p.startswith("suite.primary") for p in suite_problems(cfg))


def _plan(**changes) -> dict:
    plan = {
        "name": "p",
        "suite": "spark25",
        "variant": "bm25",
        "rows": [{"name": "a"}, {"name": "b", "overrides": ["stage.bm25.k1=2"]}],
        "metrics": ["P@5", "RR"],
    }
    return {**plan, **changes}


def test_a_plan_names_its_drilldown_and_leaves_the_primary_to_the_suite():
    plan = load_plan(_plan(drilldown={"n": 1, "queries": ["x|1", "<y>"]}))
    assert plan.drilldown == DrilldownOptions(1, ("x|1", "<y>")) and plan.primary is None
    assert load_plan(_plan()).drilldown == DrilldownOptions()
    assert load_plan(_plan(primary="RR")).primary == "RR"


@pytest.mark.parametrize(
    ("drilldown", "field"),
    [
        ({"n": -1}, "study.drilldown.n"),
        ({"n": "3"}, "study.drilldown.n"),
        ({"n": True}, "study.drilldown.n"),
        ({"top": 3}, "study.drilldown"),
        ({"queries": "q1"}, "study.drilldown.queries"),
        ([3], "study.drilldown"),
    ],
)
def test_a_bad_drilldown_is_a_plan_error_naming_the_field(drilldown, field):
    with pytest.raises(PlanError, match=field.replace(".", r"\.")):
        load_plan(_plan(drilldown=drilldown))
