"""EXP-05 stages on tiny inputs: each rule, the off switches, and the reserved `fact_role` key."""

from __future__ import annotations

import json
from types import MappingProxyType

import numpy as np
import pytest

from experiments.suites.jsonl import load_suite, save_suite
from experiments.suites.suite import SuiteError
from retrieval.pipeline import Pipeline
from retrieval.retrievers.bm25 import BM25Retriever
from retrieval.stages.abstention_gate import AbstentionGate
from retrieval.stages.conciseness_penalty import ConcisenessPenalty
from retrieval.stages.current_state import CurrentState, jaccard_matrix, recency_rank
from retrieval.stages.instruction_boost import InstructionBoost
from retrieval.stages.instruction_tagging import WIDE_MARKERS, InstructionTagging
from retrieval.types import Candidates, Corpus
from tests.support import memory, query, tiny_suite

Q = query("q", "anything")


def candidates(memories, scores, **columns) -> Candidates:
    corpus = Corpus(tuple(memories))
    cols = {"score": np.asarray(scores, dtype=float), **{k: np.asarray(v) for k, v in columns.items()}}
    return Candidates(corpus, np.arange(len(memories)), cols)


def ids(c: Candidates) -> list[str]:
    return list(c.corpus.ids[c.index])


# --- instruction_tagging -------------------------------------------------------------------------


def test_tagging_marks_markers_case_insensitively_and_floors_importance_score():
    mems = [
        memory("a", "ALWAYS include version numbers", role="user"),
        memory("b", "From now on answer in French", role="user"),
        memory("c", "the weather was nice", role="user"),
    ]
    out = InstructionTagging()(mems)
    assert [m.annotations.get("fact_role") for m in out] == ["instruction", "instruction", None]
    assert out[0].annotations["importance_score"] == 0.95
    assert out[2] is mems[2]  # untagged memories pass through untouched
    assert out[0].importance is None  # the suite's own label is never overwritten


def test_tagging_keeps_a_higher_prior_importance_score():
    mem = memory("a", "always be brief", role="user").annotate(importance_score=0.99)
    assert InstructionTagging()([mem])[0].annotations["importance_score"] == 0.99


def test_tagging_role_filter_is_config():
    mems = [
        memory("u", "Always cite sources", role="user"),
        memory("a", "Always test code", role="assistant"),
    ]
    user_only = InstructionTagging(roles=("user",))(mems)
    any_role = InstructionTagging(roles=None)(mems)
    assert [m.annotations.get("fact_role") for m in user_only] == ["instruction", None]
    assert [m.annotations.get("fact_role") for m in any_role] == ["instruction", "instruction"]


def test_tagging_matches_markers_at_word_starts_only():
    # "never " sits inside "whenever " but is not a word there.
    mem = memory("a", "whenever I ask about it", role="user")
    assert InstructionTagging(markers=("never ",))([mem])[0].annotations.get("fact_role") is None


def test_sentence_anchor_tags_imperatives_not_statements():
    mems = [
        memory("a", "Always include dates when I ask about timelines.", role="user"),
        memory("b", "Thanks. Never use tabs in code.", role="user"),
        memory("c", "I've never deployed this app before", role="user"),
    ]
    out = InstructionTagging(anchor="sentence")(mems)
    assert [m.annotations.get("fact_role") for m in out] == ["instruction", "instruction", None]


def test_wider_marker_list_is_a_config_change():
    mem = memory("a", "I'd like you to use metric units", role="user")
    assert InstructionTagging()([mem])[0].annotations.get("fact_role") is None
    assert InstructionTagging(markers=WIDE_MARKERS)([mem])[0].annotations["fact_role"] == "instruction"


def test_tagging_refuses_memories_whose_metadata_sets_the_reserved_key():
    mem = memory("a", "always x", role="user", metadata=MappingProxyType({"fact_role": "instruction"}))
    with pytest.raises(ValueError, match="reserved"):
        InstructionTagging()([mem])


def test_jsonl_loader_rejects_fact_role_in_suite_metadata_with_line_and_field(tmp_path):
    folder = save_suite(tiny_suite(), tmp_path / "suite")
    path = folder / "memories.jsonl"
    lines = path.read_text().splitlines()
    record = json.loads(lines[2])
    record["metadata"] = {"fact_role": "instruction"}
    lines[2] = json.dumps(record)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SuiteError) as err:
        load_suite(folder)
    assert [(p.line, p.field) for p in err.value.problems] == [(3, "metadata.fact_role")]


# --- instruction_boost ---------------------------------------------------------------------------


def tagged_candidates():
    mems = [
        memory("a", "fact one"),
        memory("b", "fact two"),
        memory("c", "always do x").annotate(fact_role="instruction"),
    ]
    return candidates(mems, [3.0, 2.0, 1.0])


def test_boost_adds_weight_to_the_min_max_normalised_score_of_tagged_candidates():
    out = InstructionBoost(weight=0.6)(Q, tagged_candidates())
    # normalised: a=1, b=0.5, c=0 -> c=0.6 passes b.
    assert ids(out) == ["a", "c", "b"]
    np.testing.assert_allclose(out.score, [1.0, 0.6, 0.5])
    np.testing.assert_allclose(out.columns["instruction_boost_base"], [1.0, 0.0, 0.5])


def test_boost_below_the_gap_does_not_reorder():
    assert ids(InstructionBoost(weight=0.4)(Q, tagged_candidates())) == ["a", "b", "c"]


def test_boost_weight_zero_returns_the_input_unchanged():
    c = tagged_candidates()
    assert InstructionBoost(weight=0.0)(Q, c) is c


def test_max_boosted_lifts_only_the_best_ranked_tagged_candidates():
    mems = [memory(i, i).annotate(fact_role="instruction") if i in "bd" else memory(i, i) for i in "abcd"]
    out = InstructionBoost(weight=1.0, max_boosted=1)(Q, candidates(mems, [4.0, 3.0, 2.0, 1.0]))
    assert ids(out) == ["b", "a", "c", "d"]


def pipeline_ranking(*rank_stages):
    suite = tiny_suite()
    stages = (InstructionTagging(roles=None), BM25Retriever(), *rank_stages)
    out = Pipeline(stages, depth=100).run(suite.memories, suite.queries, progress=False)
    return [(r.query_id, r.memory_ids, r.scores.tolist()) for r in out.ranked]


@pytest.mark.parametrize(
    "off",
    [InstructionBoost(weight=0.0), InstructionBoost(weight=0.5, enabled=False)],
    ids=["weight0", "disabled"],
)
def test_boost_off_is_identical_to_no_stage(off):
    assert pipeline_ranking(off) == pipeline_ranking()


def test_boost_on_changes_the_tiny_pipeline():
    assert pipeline_ranking(InstructionBoost(weight=1.0)) != pipeline_ranking()


# --- current_state -------------------------------------------------------------------------------


def test_jaccard_matrix_on_token_sets():
    sim = jaccard_matrix(["red apple pie", "red apple tart", "blue sky"])
    assert sim[0, 1] == pytest.approx(2 / 4)
    assert sim[0, 2] == 0.0 and sim[0, 0] == 0.0


def test_recency_rank_orders_by_date_then_position_missing_first():
    rank = recency_rank(
        [
            np.array(["2024-03-01", "2024-03-01", None, "2024-01-01"], dtype=object),
            np.array([5, 2, 9, 1], dtype=object),
        ]
    )
    assert rank.tolist() == [3, 2, 0, 1]


def test_current_state_puts_the_latest_near_duplicate_just_above_the_older_one():
    mems = [
        memory("old", "my team has five members", created_at="2024-01-01", metadata={"position": 1}),
        memory("other", "the budget is tight", created_at="2024-01-02", metadata={"position": 2}),
        memory("new", "my team has seven members", created_at="2024-02-01", metadata={"position": 3}),
    ]
    out = CurrentState(min_jaccard=0.5)(Q, candidates(mems, [3.0, 2.0, 1.0]))
    assert ids(out) == ["new", "old", "other"]
    assert out.columns["superseded"][ids(out).index("old")]
    assert out.columns["lifted"][ids(out).index("new")]


def test_current_state_leaves_dissimilar_candidates_in_order():
    mems = [
        memory(str(i), t, metadata={"position": i})
        for i, t in enumerate(["alpha beta", "gamma delta", "eps zeta"])
    ]
    out = CurrentState()(Q, candidates(mems, [3.0, 2.0, 1.0]))
    assert ids(out) == ["0", "1", "2"]


# --- conciseness_penalty -------------------------------------------------------------------------


def test_conciseness_penalty_demotes_only_memories_over_the_word_limit():
    mems = [memory("long", " ".join(["w"] * 40)), memory("short", "w w w"), memory("mid", "w " * 10)]
    out = ConcisenessPenalty(weight=0.6, max_words=10)(Q, candidates(mems, [3.0, 2.5, 1.0]))
    # normalised 1, 0.75, 0: "long" (40 words, saturated excess 1) loses 0.6 -> 0.4 < 0.75.
    assert ids(out) == ["short", "long", "mid"]
    np.testing.assert_allclose(out.columns["words"], [3, 40, 10])


def test_conciseness_weight_zero_returns_the_input_unchanged():
    c = tagged_candidates()
    assert ConcisenessPenalty(weight=0.0)(Q, c) is c


# --- abstention_gate -----------------------------------------------------------------------------


def test_gate_returns_nothing_when_the_best_calibrated_score_is_under_threshold():
    mems = [memory("a", "a"), memory("b", "b")]
    low = candidates(mems, [2.0, 1.0], dense=[0.2, np.nan])
    high = candidates(mems, [2.0, 1.0], dense=[np.nan, 0.5])
    gate = AbstentionGate(column="dense", threshold=0.3)
    assert len(gate(Q, low)) == 0
    assert gate(Q, high) is high


def test_gate_without_threshold_never_abstains_and_names_a_missing_column():
    c = candidates([memory("a", "a")], [1.0], dense=[0.0])
    assert AbstentionGate(threshold=None)(Q, c) is c
    with pytest.raises(KeyError, match="bm25"):
        AbstentionGate(column="bm25", threshold=0.1)(Q, c)
