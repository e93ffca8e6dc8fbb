"""The metrics.json `answer` block from judged answers: unparsed verdicts counted apart, accuracy by
retrieval, paired differences between contexts, per-query columns aligned with the suite."""

from __future__ import annotations

from types import MappingProxyType

import numpy as np
import pytest

from experiments.answer.stage import AnswerOutcome, Judged
from experiments.answer.summary import answer_block, judge_summary, mlflow_numbers, per_query_columns
from experiments.answer.types import Verdict
from experiments.evaluate.statistics import cluster_delta_ci, cluster_mean_ci
from retrieval.types import Query


def _query(i: int) -> Query:
    return Query(
        id=f"c{i % 3}:q{i}", text="?", scope=MappingProxyType({"conversation": f"c{i % 3}"}),
        labels=MappingProxyType({"category": "a" if i % 2 else "b"}), answer="gold",
    )  # fmt: skip


def _judged(mode: str, scores: list[float | None], evidence: list[str | None]) -> list[Judged]:
    return [
        Judged(_query(i), mode, {"query_id": _query(i).id, "answer": f"a{i}"},
               {"lexical": Verdict(s, unparsed=s is None, raw=() if s is not None else ("???",))}, e)
        for i, (s, e) in enumerate(zip(scores, evidence, strict=True))
    ]  # fmt: skip


RETRIEVED = [1.0, 0.0, None, 1.0, 1.0, 0.0, 1.0, 0.5, 0.0]
RANDOM = [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.5, 0.0, 0.0]
EVIDENCE = ["all", "none", "all", "some", "all", "none", "all", None, "none"]


def test_an_unparsed_verdict_is_counted_and_left_out_of_the_mean():
    summary = judge_summary(_judged("retrieved", RETRIEVED, EVIDENCE), "lexical")
    parsed = [s for s in RETRIEVED if s is not None]
    assert summary["unparsed"] == 1 and summary["n"] == len(parsed)
    assert summary["mean"] == pytest.approx(np.mean(parsed))
    clusters = [f"conversation=c{i % 3}" for i, s in enumerate(RETRIEVED) if s is not None]
    assert summary["ci95"] == pytest.approx(list(cluster_mean_ci(parsed, clusters)))


def test_accuracy_by_retrieval_groups_all_some_and_none_of_the_evidence():
    by = judge_summary(_judged("retrieved", RETRIEVED, EVIDENCE), "lexical")["by_retrieval"]
    kept = [(s, e) for s, e in zip(RETRIEVED, EVIDENCE, strict=True) if s is not None]
    for share in ("all", "some", "none"):
        values = [s for s, e in kept if e == share]
        assert by[share]["n"] == len(values) and by[share]["mean"] == pytest.approx(np.mean(values))


def test_differences_pair_each_query_and_carry_the_cluster_sign_flip_interval():
    outcome = AnswerOutcome(
        judged={
            "retrieved": _judged("retrieved", RETRIEVED, EVIDENCE),
            "random": _judged("random", RANDOM, EVIDENCE),
        },
        skipped=["x:q9"], judge_columns={"lexical": ("answer.lexical.f1",)}, cassette_path=None,
        cassette_digest=None, counts={"cassette": 0, "live": 0},
    )  # fmt: skip
    block = answer_block(outcome, benchmark="other", settings_view={"k": 5}, seed=0)
    found = block["differences"]["retrieved-random"]["lexical"]
    pairs = [(a, b, i) for i, (a, b) in enumerate(zip(RETRIEVED, RANDOM, strict=True)) if a is not None]
    diffs = [a - b for a, b, _ in pairs]
    assert found["n"] == len(pairs) and found["mean"] == pytest.approx(np.mean(diffs))
    assert found["better"] == sum(d > 0 for d in diffs) and found["worse"] == sum(d < 0 for d in diffs)
    clusters = [f"conversation=c{i % 3}" for _, _, i in pairs]
    interval = list(cluster_delta_ci(diffs, clusters, seed=0))  # 3 conversations: unbounded at 95%
    assert not np.isfinite(interval).all() and found["ci95"] is None and "unbounded" in found["ci_reason"]
    assert block["n_skipped_no_gold"] == 1 and block["judges"]["lexical"]["random"]["n"] == len(RANDOM)
    values, cis = mlflow_numbers({**block, "contexts": ["retrieved", "random"]})
    assert values == {"answer_acc_lexical": block["judges"]["lexical"]["retrieved"]["mean"]}
    assert cis["answer_acc_lexical"] == block["judges"]["lexical"]["retrieved"]["ci95"]
    columns = per_query_columns(outcome, ["x:q9", *(q.query.id for q in outcome.judged["retrieved"])])
    assert columns["answer"][0] is None and np.isnan(columns["answer.lexical.f1"][0])
    assert np.isnan(columns["answer.lexical.f1"][3]) and columns["answer.lexical.f1@random"][1] == RANDOM[0]
