"""run.trec and ranking.csv text: fast formatting that is exactly what the plain Python loops write."""

from __future__ import annotations

import csv

import numpy as np
import pandas as pd
import pytest

from experiments.run_folder.float_text import float_reprs
from experiments.run_folder.ranking import read_ranking, write_ranking
from experiments.run_folder.trec import TIE_GAP, read_run, strictly_decreasing, write_run
from retrieval.types import RankedList

EDGES = [0.0, -0.0, 1.0, -1.0, 0.1, 1 / 3, 1e-4, -1e-4, 9.999999999999999e-05, 1e-5, 5e-324]
EDGES += [2.2250738585072014e-308, 1e16, 9999999999999998.0, -1e16, 1.7976931348623157e308, 123456789.125]
EDGES += [np.nan, np.inf, -np.inf]


def one_by_one(scores) -> list[float]:
    """The rule, as first written: top down, a score not clearly below the one above is lowered."""
    out = [float(s) for s in scores]
    for i in range(1, len(out)):
        gap = max(abs(out[i - 1]), 1e-9) * TIE_GAP
        if out[i] > out[i - 1] - gap:
            out[i] = out[i - 1] - gap
    return out


def test_float_reprs_is_repr_on_every_edge_and_a_million_floats():
    rng = np.random.default_rng(7)
    values = np.concatenate(
        [
            EDGES,
            rng.normal(size=300_000),
            rng.random(200_000) * 100,
            np.float32(rng.normal(size=200_000)).astype(np.float64),  # scores that went through float32
            10 ** rng.uniform(-8, 20, 300_000) * rng.choice([-1, 1], 300_000),  # both sides of both layouts
            rng.integers(-(10**6), 10**6, 50_000).astype(np.float64),
        ]
    )
    assert float_reprs(values) == [repr(v) for v in values.tolist()]
    assert float_reprs(np.zeros(0)) == []


@pytest.mark.parametrize("seed", range(20))
def test_lowering_ties_is_the_one_by_one_rule_with_chains_nan_and_infinities(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 60))
    scores = np.sort(rng.choice([3.0, 1.0, 0.5, 0.0, -2.0, 1e-12], n))[::-1]  # long runs of ties
    if seed % 3 == 0 and n:
        scores[rng.integers(0, n)] = np.nan
    if seed % 4 == 0 and n > 2:
        scores[:2] = np.inf
    if seed % 5 == 0 and n:
        scores[-1] = -np.inf
    expected = one_by_one(scores)
    np.testing.assert_array_equal(strictly_decreasing(scores), expected)


def test_run_file_keeps_the_harness_order_and_the_scores_read_back(tmp_path):
    rng = np.random.default_rng(3)
    ranked = []
    for q in range(40):
        n = int(rng.integers(0, 30))
        scores = np.sort(rng.choice([0.9, 0.5, 0.5001, 0.1], n) if q % 2 else rng.normal(size=n))[::-1]
        ranked.append(RankedList(f"q{q}", tuple(f"m{q}-{i}" for i in range(n)), scores, {}, {}))
    write_run(ranked, tmp_path / "run.trec", tag="t")
    lines = (tmp_path / "run.trec").read_text().splitlines()
    assert len(lines) == sum(len(r.memory_ids) for r in ranked)
    written: dict[str, list[float]] = {}
    for line in lines:
        qid, q0, doc, rank, score, tag = line.split(" ")
        assert q0 == "Q0" and tag == "t" and int(rank) == len(written.get(qid, [])) + 1
        written.setdefault(qid, []).append(float(score))  # reads back to exactly the lowered float
    for r in ranked:
        assert written.get(r.query_id, []) == one_by_one(r.scores)
    assert read_run(tmp_path / "run.trec") == {r.query_id: list(r.memory_ids) for r in ranked if r.memory_ids}
    bad = RankedList("q", ("a", "b"), np.array([1.0]), {}, {})
    with pytest.raises(ValueError, match="2 memory ids but 1 scores"):
        write_run([bad], tmp_path / "bad.trec")


def plain_run_file(ranked, path, tag) -> None:
    """run.trec as first written: one formatted line at a time."""
    with open(path, "w", encoding="utf-8") as fh:
        for r in ranked:
            for rank, (doc, score) in enumerate(
                zip(r.memory_ids, strictly_decreasing(r.scores), strict=True)
            ):
                fh.write(f"{r.query_id} Q0 {doc} {rank + 1} {float(score)!r} {tag}\n")


@pytest.mark.parametrize("seed", range(8))
def test_run_file_text_is_exactly_the_line_by_line_text(tmp_path, seed):
    rng = np.random.default_rng(seed)
    ids = ["m", "é-ø", "ｍ1", "a.b:c", "x" * 40, 7, "Ω"]  # unicode, look-alikes, an int id
    ranked = []
    for q in range(int(rng.integers(0, 25))):
        n = int(rng.integers(0, 120))  # empty queries too, and ranks past 100
        scores = np.sort(rng.choice([*EDGES[:-3], 0.5, 0.5], n) if q % 3 == 0 else rng.normal(size=n))[::-1]
        if q % 5 == 1 and n:
            scores[int(rng.integers(0, n))] = rng.choice([np.nan, np.inf, -np.inf])
        docs = tuple(f"{ids[i % len(ids)]}-{i}" if i % 4 else ids[i % len(ids)] for i in range(n))
        ranked.append(RankedList(f"q {q}" if q % 2 else q, docs, scores, {}, {}))
    write_run(ranked, tmp_path / "run.trec", tag=f"tag{seed}")
    plain_run_file(ranked, tmp_path / "plain.trec", tag=f"tag{seed}")
    assert (tmp_path / "run.trec").read_bytes() == (tmp_path / "plain.trec").read_bytes()


def test_ranking_file_cells_are_repr_text_nan_empty_and_hostile_ids_quoted(tmp_path):
    ids = ("a,b", 'quote"d', "line\nbreak", "plain", " space ", "x")
    columns = {
        "bm25": np.array([2.5, np.nan, 1e-5, 0.1, 1 / 3, -0.0]),
        "bm25_rank": np.arange(1, 7),
        "label": ["p", "q", "r", "s", "t", "u"],
    }
    ranked = [
        RankedList("q,1", ids, np.arange(6.0, 0, -1), {**columns, "score": np.arange(6.0, 0, -1)}, {}),
        RankedList("q2", ids[:2], np.array([1.0, 0.5]), {"score": np.array([1.0, 0.5])}, {}),  # no bm25
    ]
    qrels = {"q,1": {"x": 2, "plain": 0}, "q2": {}}
    write_ranking(ranked, qrels, tmp_path / "ranking.csv", k=3)
    with open(tmp_path / "ranking.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["query_id", "rank", "memory_id", "relevance", "score", "bm25", "bm25_rank", "label"]
    # the top 3, then the relevant memory ranked 6th (a judged-not-relevant one below k is not kept)
    assert [r[:4] for r in rows[1:5]] == [
        ["q,1", "1", "a,b", ""],
        ["q,1", "2", 'quote"d', ""],
        ["q,1", "3", "line\nbreak", ""],
        ["q,1", "6", "x", "2"],
    ]
    assert [r[5] for r in rows[1:5]] == ["2.5", "", "1e-05", "-0.0"]
    assert [r[6:] for r in rows[1:5]] == [["1", "p"], ["2", "q"], ["3", "r"], ["6", "u"]]
    assert rows[5:] == [
        ["q2", "1", "a,b", "", "1.0", "", "", ""],
        ["q2", "2", 'quote"d', "", "0.5", "", "", ""],
    ]
    frame = read_ranking(tmp_path / "ranking.csv")
    assert frame["memory_id"].tolist()[:3] == ["a,b", 'quote"d', "line\nbreak"]


def plain_ranking_csv(ranked, qrels, path, k) -> None:
    """ranking.csv as first written: cell by cell through csv.writer, each text cell that a spreadsheet
    would read as a formula (OWASP: = + - @ tab CR, and the escape ' itself) prefixed with '."""
    columns = ["score"]
    for r in ranked:
        columns += [c for c in r.columns if c not in columns]

    def cell(value):
        if isinstance(value, str):
            return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r", "'") else value
        if isinstance(value, float | np.floating):
            return "" if np.isnan(value) else repr(float(value))
        return value.item() if isinstance(value, np.generic) else value

    with open(path, "w", encoding="utf-8", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["query_id", "rank", "memory_id", "relevance", *columns])
        for r in ranked:
            judged = qrels.get(r.query_id, {})
            relevant = {m for m, grade in judged.items() if (grade or 0) > 0}
            keep = [i for i, m in enumerate(r.memory_ids) if i < k or m in relevant]
            for i in keep:
                grade = judged.get(r.memory_ids[i])
                row = [cell(r.query_id), i + 1, cell(r.memory_ids[i]), "" if grade is None else grade]
                row += ["" if r.columns.get(c) is None else cell(r.columns[c][i]) for c in columns]
                out.writerow(row)


@pytest.mark.parametrize("seed", range(12))
def test_ranking_file_is_byte_for_byte_what_csv_writer_writes(tmp_path, seed):
    rng = np.random.default_rng(seed)
    alphabet = list("ab ,\"\n\r;\t'é—\u00a0\u2028x0=+-@") + ["", "nan", "1e5"]

    def text() -> str:
        return "".join(rng.choice(alphabet, int(rng.integers(0, 6))))

    ranked, qrels = [], {}
    for q in range(int(rng.integers(0, 25))):
        n = int(rng.integers(0, 40))
        ids = tuple(dict.fromkeys(f"{text()}{q}-{i}" for i in range(n)))  # distinct, hostile
        n = len(ids)
        scores = np.sort(rng.normal(size=n))[::-1]
        columns = {"score": scores}
        if rng.random() < 0.8:  # some queries lack a column: empty cells
            columns["dense"] = np.where(
                rng.random(n) < 0.1, np.nan, rng.random(n) * 10.0 ** rng.integers(-7, 18)
            )
        if rng.random() < 0.7:
            columns["dense_rank"] = np.arange(1, n + 1)
        if rng.random() < 0.5:
            columns["tagged"] = rng.random(n) < 0.5
        if rng.random() < 0.5:  # an object column: strings, None, floats, NaN, numpy scalars
            pool = [text(), None, 0.25, float("nan"), np.float32(0.5), np.int64(3), "x,y"]
            columns["role"] = np.array([pool[int(j)] for j in rng.integers(0, len(pool), n)], dtype=object)
        if rng.random() < 0.3:
            columns["plain_list"] = [text() for _ in range(n)]
        qid = f"{text()}q{q}"
        ranked.append(RankedList(qid, ids, scores, columns, {}))
        qrels[qid] = {ids[int(j)]: int(rng.integers(0, 3)) for j in rng.integers(0, n, 5)} if n else {}
    k = int(rng.integers(1, 12))
    write_ranking(ranked, qrels, tmp_path / "fast.csv", k=k)
    plain_ranking_csv(ranked, qrels, tmp_path / "plain.csv", k=k)
    assert (tmp_path / "fast.csv").read_bytes() == (tmp_path / "plain.csv").read_bytes()


def test_read_run_ranks_as_trec_eval_not_by_the_rank_column(tmp_path):
    # ir_measures' fixtures hold files whose rank column disagrees with their scores; trec_eval, ranx,
    # ir_measures and the trec_run channel rank by score, ties by document id descending.
    (tmp_path / "run.trec").write_text(
        "q1 Q0 d1 1 0.1 other\n"
        "q1 Q0 d2 2 0.9 other\n"
        "q1 Q0 d3 3 0.5 other\n"
        "q1 Q0 d4 4 0.5 other\n"
        "q2 Q0 x 9 -1 other\n"
        "q2 Q0 y 1 -2 other\n"
    )
    assert read_run(tmp_path / "run.trec") == {"q1": ["d2", "d4", "d3", "d1"], "q2": ["x", "y"]}


def test_a_run_tag_with_whitespace_is_refused_and_every_written_file_reads_back_in_the_channel(tmp_path):
    from experiments.names import UnsafeNameError
    from retrieval.retrievers.trec_run import parse_run

    ranked = [RankedList("q1", ("m1", "m2"), np.array([0.5, 0.5]), {}, {})]
    with pytest.raises(UnsafeNameError, match="run tag: must not contain whitespace"):
        write_run(ranked, tmp_path / "bad.trec", tag="bm25 tuned")
    assert not (tmp_path / "bad.trec").exists()
    write_run(ranked, tmp_path / "run.trec", tag="bm25_tuned")
    lines = parse_run(tmp_path / "run.trec", (tmp_path / "run.trec").read_bytes())  # the channel's parser
    assert [ln.doc_id for ln in lines["q1"]] == ["m1", "m2"]


def test_csv_text_cells_a_spreadsheet_would_run_are_neutralised_and_read_back_exactly(tmp_path):
    from experiments.csv_cells import safe_frame
    from experiments.track.finished_runs import read_per_query

    hostile = ["=cmd|'/c calc'!A0", '=HYPERLINK("http://x")', "+1", "-2", "@SUM(A1)", "\tx", "\rx", "'q"]
    ids = tuple(hostile)
    scores = np.linspace(0.5, -0.5, len(ids))
    ranked = [RankedList("=q1", ids, scores, {"score": scores, "role": np.array(hostile)}, {})]
    write_ranking(ranked, {"=q1": {"-2": 1}}, tmp_path / "ranking.csv", k=len(ids))
    with open(tmp_path / "ranking.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))[1:]
    assert {r[0] for r in rows} == {"'=q1"}
    assert [r[2] for r in rows] == ["'" + h for h in hostile] == [r[5] for r in rows]
    assert rows[-1][4] == "-0.5"  # a number is not text: it stays a number
    frame = read_ranking(tmp_path / "ranking.csv")
    assert frame["memory_id"].tolist() == hostile and frame["role"].tolist() == hostile
    assert set(frame["query_id"]) == {"=q1"} and frame["score"].iloc[-1] == -0.5

    hostile = [h for h in hostile if h[0] not in "\t\r"]  # a suite's labels and ids hold no control character
    per_query = pd.DataFrame(
        {"label.category": hostile, "nDCG@10": np.linspace(-0.5, 0.5, len(hostile))},
        index=pd.Index([f"{h}{i}" for i, h in enumerate(hostile)], name="query_id"),
    )
    safe_frame(per_query).to_csv(tmp_path / "per_query.csv")
    with open(tmp_path / "per_query.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))[1:]
    assert all(cell.startswith("'") for r in rows for cell in r[:2])
    assert rows[0][2] == "-0.5"
    back = read_per_query(tmp_path / "per_query.csv")
    assert back.index.tolist() == per_query.index.tolist()
    assert back["label.category"].tolist() == hostile
    assert back["nDCG@10"].tolist() == per_query["nDCG@10"].tolist()
