"""LongMemEval: the loader on a fixture in the published schema, and the official retrieval metrics.

tests/data/longmemeval/longmemeval_fixture.json is hand-written in the schema of the README of
github.com/xiaowu0162/LongMemEval (question_id, question_type, question, answer, question_date,
haystack_session_ids, haystack_dates, haystack_sessions with has_answer turns, answer_session_ids): five
questions, one of each kind the loader treats apart (an abstention `_abs` question, an assistant-side
answer, an answer session with no has_answer turn).

The metrics are checked against a recomputation written here from upstream's definitions
(src/retrieval/eval_utils.py and run_retrieval.py): its corpus ids, its relevant ids ("answer" ids, with
an answer session that has no has_answer user turn relabelled `noans`), its DCG, its average over the
non-abstention questions.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from experiments.evaluate.metrics import per_query
from experiments.suites.longmemeval import load_longmemeval
from experiments.suites.suite import SuiteError
from tests.support import DATA

FIXTURE = DATA / "longmemeval" / "longmemeval_fixture.json"
RAW = json.loads(FIXTURE.read_text())


# --- upstream's definitions, transcribed (binary relevance; rankings index the corpus)
def official_dcg(relevances: list[float], k: int) -> float:
    rel = np.asarray(relevances, dtype=float)[:k]
    return float(rel[0] + np.sum(rel[1:] / np.log2(np.arange(2, rel.size + 1)))) if rel.size else 0.0


def official_metrics(
    rankings: list[int], correct: set[str], corpus_ids: list[str], k: int
) -> tuple[float, ...]:
    recalled = {corpus_ids[i] for i in rankings[:k]}
    relevances = [1 if c in correct else 0 for c in corpus_ids]
    ideal = official_dcg(sorted(relevances, reverse=True), k)
    ndcg = official_dcg([relevances[i] for i in rankings[:k]], k) / ideal if ideal else 0.0
    return float(any(c in recalled for c in correct)), float(all(c in recalled for c in correct)), ndcg


def official_corpus(entry: dict, granularity: str) -> tuple[list[str], set[str]]:
    """Upstream's corpus ids (user turns only) and its relevant ones, for one question."""
    ids, correct = [], set()
    for sid, session in zip(entry["haystack_session_ids"], entry["haystack_sessions"], strict=True):
        user = [(i, t) for i, t in enumerate(session) if t["role"] == "user"]
        if granularity == "session":
            ids.append(sid)
            if "answer" in sid and any(t.get("has_answer") for _, t in user):
                correct.add(sid)
        else:
            for i, t in user:
                ids.append(f"{sid}_{i + 1}")
                if "answer" in sid and t.get("has_answer"):
                    correct.add(f"{sid}_{i + 1}")
    return ids, correct


@pytest.mark.parametrize("granularity", ["turn", "session"])
def test_official_metrics_equal_a_direct_recomputation(granularity):
    suite = load_longmemeval(FIXTURE, granularity=granularity)
    rng = np.random.default_rng(7)
    run, expected = {}, {}
    for entry in RAW:
        qid = entry["question_id"]
        corpus_ids, correct = official_corpus(entry, granularity)
        rankings = [int(i) for i in rng.permutation(len(corpus_ids))]  # any ranking will do: a seeded one
        run[qid] = [f"{qid}:{corpus_ids[i]}" for i in rankings]
        if not qid.endswith("_abs") and correct:  # upstream skips `_abs`; see the assistant-side test below
            expected[qid] = [official_metrics(rankings, correct, corpus_ids, 5)]
    ours = per_query(suite.qrels, run, ["recall_any@5", "recall_all@5", "ndcg_any@5"])
    assert sorted(ours.index) == sorted(expected)
    for qid, (values,) in expected.items():
        assert ours.loc[qid].tolist() == pytest.approx(list(values), abs=1e-12), qid
    assert ours.mean().tolist() == pytest.approx(np.mean([v[0] for v in expected.values()], axis=0).tolist())


def test_ndcg_any_differs_from_trec_ndcg_where_upstream_does():
    # One relevant document at rank 2: upstream's DCG divides rank 2 by log2(2) = 1, trec_eval by log2(3).
    scores = per_query({"q": {"a": 1}}, {"q": ["x", "a"]}, ["ndcg_any@5", "nDCG@5"])
    assert scores.loc["q", "ndcg_any@5"] == 1.0
    assert scores.loc["q", "nDCG@5"] == pytest.approx(1 / np.log2(3))


def test_each_haystack_is_its_own_scope_and_question_date_is_now():
    suite = load_longmemeval(FIXTURE)
    for entry in RAW:
        qid = entry["question_id"]
        mine = [m for m in suite.memories if m.scope == {"question": qid}]
        users = sum(t["role"] == "user" for s in entry["haystack_sessions"] for t in s)
        assert len(mine) == users, qid  # upstream's corpus: the user turns
    q = next(q for q in suite.queries if q.id == "e47becba")
    assert q.now == "2023-05-30T23:40:00" and q.labels["question_type"] == "single-session-user"
    first = next(m for m in suite.memories if m.id == "e47becba:answer_280352e9_1")
    assert first.created_at == "2023-05-22T14:05:00"


def test_abstention_questions_are_kept_with_nothing_relevant_and_reported_apart():
    suite = load_longmemeval(FIXTURE)
    assert suite.is_abstention("e47becba_abs")
    assert next(q for q in suite.queries if q.id == "e47becba_abs").labels["abstention"] == "yes"
    assert any("1 abstention question(s)" in n and "e47becba_abs" in n for n in suite.notes)
    assert suite.summary()["abstention_queries"] == 1


def test_memeval_skips_assistant_side_evidence_aloud_with_user_turns_and_scores_it_with_all_roles():
    user_only = load_longmemeval(FIXTURE, protocol="memeval")
    assert "7161e7e2" not in {q.id for q in user_only.queries}
    assert any("1 non-abstention question(s) with no indexed evidence" in n for n in user_only.notes)
    every_role = load_longmemeval(FIXTURE, protocol="memeval", roles="all")
    assert every_role.qrels["7161e7e2"] == {"7161e7e2:answer_ultrachat_771_2": 1}


def test_an_answer_session_without_has_answer_is_not_relevant_and_is_noted():
    suite = load_longmemeval(FIXTURE, granularity="session")
    assert sorted(suite.qrels["gpt4_2655b836"]) == [
        "gpt4_2655b836:answer_4be1b6b4_1",
        "gpt4_2655b836:answer_4be1b6b4_2",
    ]
    assert any("gpt4_2655b836:answer_4be1b6b4_3" in n for n in suite.notes)


def test_a_bad_instance_is_named_by_index_question_and_field(tmp_path):
    bad = json.loads(FIXTURE.read_text())
    bad[1]["haystack_dates"] = bad[1]["haystack_dates"][:-1]
    bad[2]["question_type"] = "multi-hop"
    path = tmp_path / "longmemeval_s.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(SuiteError) as err:
        load_longmemeval(path)
    text = str(err.value)
    assert (
        "[1] (gpt4_2655b836).haystack_*: haystack_session_ids, haystack_dates, haystack_sessions "
        "must be lists" in text
    )
    assert "[2] (7161e7e2).question_type: must be one of" in text
