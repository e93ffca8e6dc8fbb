"""A suite declares its statistical unit (suite.yaml `cluster`, issue 41): spark25's queries are
independent scenarios, so its statistics are query-level by declaration, with no one-cluster warning;
a bad value is refused naming the file, line and field."""

from __future__ import annotations

import shutil
import warnings

import pytest

from experiments.evaluate.statistics import unit_warning
from experiments.evaluate.table import evaluate
from experiments.suites.jsonl import load_suite
from experiments.suites.suite import SuiteError
from retrieval.pipeline import Pipeline
from retrieval.retrievers.bm25 import BM25Retriever
from tests.support import REPO

SPARK25 = REPO / "datasets" / "spark25"


def _statistics(suite) -> dict:
    output = Pipeline((BM25Retriever(),), depth=10).run(suite.memories, suite.queries, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fall-back warning would fail here
        return evaluate(suite, output, ["P@5", "nDCG@10"]).metrics["statistics"]


def test_spark25_declares_each_query_a_cluster_and_warns_of_no_fall_back():
    suite = load_suite(SPARK25)
    assert suite.cluster == "query"
    statistics = _statistics(suite)
    assert statistics["unit"] == "query" and statistics["warning"] is None
    assert statistics["n_clusters"] == sum(not suite.is_abstention(q.id) for q in suite.queries)


def test_without_the_declaration_one_scope_falls_back_naming_the_scopes_own_field(tmp_path):
    shutil.copytree(SPARK25, tmp_path / "s")
    meta = tmp_path / "s" / "suite.yaml"
    meta.write_text(meta.read_text().replace("cluster: query", ""))
    suite = load_suite(tmp_path / "s")
    with pytest.warns(UserWarning, match=r"one cluster \(project=spark\)"):
        evaluate(
            suite,
            Pipeline((BM25Retriever(),), depth=10).run(suite.memories, suite.queries, progress=False),
            ["P@5"],
        )
    assert "(conversation)" not in unit_warning("query", ["project=spark"] * 3, 3)


def test_a_label_can_be_the_cluster_and_a_bad_unit_is_refused_by_file_line_and_field(tmp_path):
    shutil.copytree(SPARK25, tmp_path / "s")
    meta = tmp_path / "s" / "suite.yaml"
    meta.write_text(meta.read_text().replace("cluster: query", "cluster: label.category"))
    statistics = _statistics(load_suite(tmp_path / "s"))
    assert statistics["unit"] == "cluster" and statistics["n_clusters"] == 5
    meta.write_text(meta.read_text().replace("cluster: label.category", "cluster: conversation"))
    with pytest.raises(SuiteError) as caught:
        load_suite(tmp_path / "s")
    assert "suite.yaml" in str(caught.value) and "cluster" in str(caught.value)
    assert f":{len(meta.read_text().splitlines())}" in str(caught.value)  # its line
