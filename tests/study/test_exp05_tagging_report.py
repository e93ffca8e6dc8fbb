"""Tagging coverage and precision (experiments.study.questions.tagging) on tiny suites and judgements."""

from __future__ import annotations

import pytest

from experiments.study.questions.tagging import (
    load_judgements,
    precision_estimate,
    tagging_report,
    text_sha256,
)
from retrieval.stages.instruction_tagging import InstructionTagging
from retrieval.types import Corpus
from tests.support import memory, tiny_suite


def judged(mem, verdict: int) -> dict[str, str]:
    return {"memory_id": mem.id, "text_sha256": text_sha256(mem.text), "standing_instruction": str(verdict)}


def test_coverage_counts_tagged_memories_and_instruction_evidence():
    suite = tiny_suite()  # c1:q0 (ability "if") has evidence c1:0, which says "always format ..."
    corpus = Corpus(tuple(InstructionTagging(roles=None)(suite.memories)))
    report = tagging_report(suite, corpus, judgements={})
    assert report["tagged"] == 2  # "always ..." in both scopes
    assert report["tagged_share"] == pytest.approx(2 / 10)
    # the tiny suite labels its instruction question "if", not instruction_following
    assert report["instruction_evidence"] == 0 and report["instruction_evidence_tagged_share"] is None
    assert report["precision"] is None and report["precision_judged"] == 0


def test_precision_is_the_role_stratified_mean_of_judged_tagged_memories():
    users = [memory(f"u{i}", f"always u{i}", role="user") for i in range(4)]
    bots = [memory(f"a{i}", f"always a{i}", role="assistant") for i in range(4)]
    judgements = {m.id: judged(m, 1) for m in users[:2]}
    judgements |= {bots[0].id: judged(bots[0], 0), bots[1].id: judged(bots[1], 1)}
    result = precision_estimate(users + bots, judgements)
    assert result["precision"] == pytest.approx(0.5 * 1.0 + 0.5 * 0.5)
    assert result["precision_judged"] == 4
    low, high = result["precision_ci95"]
    assert 0 <= low < result["precision"] < high <= 1


def test_precision_is_unknown_when_a_tagged_stratum_has_no_judgement():
    users = [memory("u", "always u", role="user")]
    bots = [memory("a", "always a", role="assistant")]
    assert precision_estimate(users + bots, {"u": judged(users[0], 1)})["precision"] is None


def test_a_judgement_of_different_text_is_not_used():
    mem = memory("u", "always u", role="user")
    stale = {**judged(mem, 1), "text_sha256": text_sha256("something else")}
    assert precision_estimate([mem], {"u": stale})["precision_judged"] == 0


def test_perfect_sample_still_gets_an_interval_below_one():
    mems = [memory(f"u{i}", "always", role="user") for i in range(20)]
    result = precision_estimate(mems, {m.id: judged(m, 1) for m in mems[:10]})
    assert result["precision"] == 1.0 and result["precision_ci95"][0] < 0.9


def test_committed_judgements_load_with_verdicts():
    rows = load_judgements()
    assert len(rows) >= 50
    assert {r["standing_instruction"] for r in rows.values()} == {"0", "1"}
