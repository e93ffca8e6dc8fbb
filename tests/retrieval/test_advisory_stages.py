"""The advisory-tier stages on tiny inputs: each one's rule, defaults, fallback and off switch."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
import pytest

from retrieval.pipeline import Pipeline
from retrieval.retrievers.bm25 import BM25Retriever
from retrieval.stage import IngestStage
from retrieval.stages.action_domain import DOMAINS, ActionDomainClassifier
from retrieval.stages.actionability import ActionabilityGate
from retrieval.stages.enrichment import ContextualEnrichment
from retrieval.stages.fallback import keep_or_relax
from retrieval.stages.intent_route import IntentRouter
from retrieval.stages.mmr import MMRDiversity, mmr_order
from retrieval.stages.retrieval_gate import RetrievalGate
from retrieval.stages.score_floor import ScoreFloor
from retrieval.types import Candidates, Corpus
from tests.support import memory, query


def insight(mid: str, text: str, **metadata):
    return memory(mid, text, "p", metadata=MappingProxyType(metadata))


def tool_query(tool: str = "", tool_input=None, task: str = "", text: str = "advice"):
    context = {"tool_name": tool, "tool_input": tool_input or {}, "task_context": task}
    return query("q", text, "p", context=MappingProxyType(context))


def candidates_of(memories, **columns) -> Candidates:
    """All memories as one query's candidates, in the given order, with score n..1 unless given."""
    corpus = Corpus(tuple(memories))
    n = len(memories)
    cols = {
        "score": np.arange(n, 0, -1, dtype=float),
        **{k: np.asarray(v, dtype=float) for k, v in columns.items()},
    }
    return Candidates(corpus, np.arange(n), cols)


def ids(candidates: Candidates) -> list[str]:
    return list(candidates.corpus.ids[candidates.index])


# ---- action_domain ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "metadata", "domain"),
    [
        ("[DEPTH: 3] Strong causal reasoning: linked the cause to the effect", {}, "depth_training"),
        ("RT @someone: ship small PRs (eng: 1.2k likes)", {}, "x_social"),
        ("User prefers short answers without bullet lists", {}, "user_context"),
        ("Now, can we make the header sticky?", {}, "user_context"),
        ("When editing a .py file, keep type hints on public functions", {}, "code"),
        ("Before a deploy, check the environment variables on the server", {}, "system"),
        ("Lead a post with the hook, then the detail", {"source": "x_research"}, "x_social"),
        ("Reasoning about the step that followed", {"source": "depth_training"}, "depth_training"),
        ("Summarise long documents before quoting them", {}, "general"),
    ],
)
def test_action_domain_classifies_by_generic_markers(text, metadata, domain):
    (out,) = ActionDomainClassifier()([insight("m", text, **metadata)])
    assert out.get("action_domain") == domain
    assert out.annotations["action_domain"] in DOMAINS


def test_action_domain_keeps_the_learners_own_label_and_never_mutates_inputs():
    labelled = insight("a", "RT @x: retweet this", action_domain="code")
    plain = insight("b", "RT @x: retweet this")
    out = ActionDomainClassifier()([labelled, plain])
    assert out[0] is labelled and out[0].get("action_domain") == "code"
    assert out[1].get("action_domain") == "x_social" and "action_domain" not in plain.annotations


def test_action_domain_first_matching_rule_wins_and_rules_are_config():
    stage = ActionDomainClassifier(rules=(("system", "text", "deploy"), ("code", "text", "deploy")))
    (out,) = stage([insight("m", "deploy twice")])
    assert out.get("action_domain") == "system" and out.get("action_domain_rule") == 0
    (other,) = stage([insight("n", "nothing here")])
    assert other.get("action_domain") == "general" and other.get("action_domain_rule") == -1


def test_action_domain_rejects_a_malformed_rule():
    with pytest.raises(ValueError, match="action_domain rule"):
        ActionDomainClassifier(rules=(("code", "title", "x"),))


# ---- intent routing --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "tool_input", "task", "family"),
    [
        ("Edit", {"file_path": "app/models.py"}, "rename a field", "code_edit"),
        ("Write", {"file_path": "web/app.js"}, "", "code_edit"),
        ("Bash", {"command": "pytest -x"}, "tests fail with ImportError traceback", "debugging"),
        ("Bash", {"command": "ls -la"}, "look at the folder", "shell"),
        ("WebSearch", {"query": "rrf fusion paper"}, "", "research"),
        ("WebFetch", {"url": "https://example.org"}, "", "research"),
        ("x_post_tweet", {"text": "hello"}, "", "social"),
        ("XReply", {"text": "thanks!"}, "", "social"),
        ("Xargs", {}, "", None),
        ("Write", {"file_path": "draft.md"}, "draft a tweet about the release", "code_edit"),
        ("Task", {}, "draft a tweet thread about the release", "social"),
        ("Read", {"file_path": "README.md"}, "", "explore"),
        ("Glob", {"pattern": "**/*.py"}, "", "explore"),
        ("", {}, "", None),
        ("SomethingElse", {}, "", None),
    ],
)
def test_intent_routing_maps_a_tool_call_to_a_family(tool, tool_input, task, family):
    assert IntentRouter().intent(tool_query(tool, tool_input, task)) == family


def test_intent_routing_keeps_allowed_domains_plus_general_and_drops_the_rest():
    domains = ["code", "x_social", "general", "depth_training", "system", None]
    mems = [
        insight(f"m{i}", f"text {i}", action_domain=d) if d else insight(f"m{i}", "text")
        for i, d in enumerate(domains)
    ]
    out = IntentRouter(min_pool=1)(tool_query("Edit", {"file_path": "a.py"}), candidates_of(mems))
    assert ids(out) == ["m0", "m2", "m4", "m5"]  # code, general, system, and unclassified counts as general
    assert not out.columns["intent_route_relaxed"].any()


def test_intent_routing_relaxes_to_all_when_fewer_than_min_pool_survive():
    mems = [insight(f"m{i}", "t", action_domain="x_social" if i else "code") for i in range(30)]
    edit = tool_query("Edit", {"file_path": "a.py"})
    relaxed = IntentRouter()(edit, candidates_of(mems))  # default min_pool = 20; 1 survives
    assert len(relaxed) == 30 and relaxed.columns["intent_route_relaxed"].all()
    social = IntentRouter()(tool_query("post_tweet"), candidates_of(mems))  # 29 survive
    assert len(social) == 29 and "m0" not in ids(social)


def test_intent_routing_without_tool_context_passes_candidates_unchanged():
    cands = candidates_of([insight("a", "t", action_domain="x_social")])
    assert IntentRouter()(query("q", "plain question", "p"), cands) is cands


def test_intent_routing_defaults():
    stage = IntentRouter()
    assert stage.min_pool == 20 and tuple(stage.always_allowed) == ("general",)


# ---- actionability gate ----------------------------------------------------------------------------

ACTIONABLE = "When editing a Python file, run ruff check before saving"
OBSERVATIONS = [
    "RT @dev: always run tests before every commit (eng: 45 likes)",
    "[DEPTH: 4] Strong causal reasoning: the model linked cause and effect",
    "User prefers dark mode in every editor they use",
    "Now, can we make the submit button blue please?",
    "https://docs.python.org/3/library/re.html",
    "def add(x, y): return x + y  # always use this helper",
    "Use packet guidance.",
    'MAX_RETRIES = int(os.environ.get("MAX_RETRIES", "3"))',
    "client.session.headers.update({'User-Agent': 'bot'})",
]


def test_actionability_scores_the_four_dimensions():
    gate = ActionabilityGate()
    dims = gate.dimensions(
        np.array([ACTIONABLE, "Tests are important for quality software overall"], dtype=object)
    )
    assert [dims[d][0] for d in ("directive", "condition", "specific", "not_observation")] == [1, 1, 1, 1]
    assert [dims[d][1] for d in ("directive", "condition", "specific", "not_observation")] == [0, 0, 0, 1]
    assert gate.score(np.array([ACTIONABLE], dtype=object))[0] == pytest.approx(1.0)


@pytest.mark.parametrize("text", OBSERVATIONS)
def test_an_observation_scores_zero_even_when_it_quotes_a_directive(text):
    assert ActionabilityGate().score(np.array([text], dtype=object))[0] == 0.0


def test_without_the_veto_an_observation_is_scored_on_its_other_dimensions():
    gate = ActionabilityGate(observation_veto=False)
    assert gate.score(np.array([OBSERVATIONS[0]], dtype=object))[0] == pytest.approx(
        0.6
    )  # directive + condition


def test_actionability_drops_below_threshold_instead_of_demoting():
    texts = [
        OBSERVATIONS[0],
        ACTIONABLE,
        "Tests are important for quality software overall",
        "Always pin dependency versions in requirements.txt",
        "Prefer small commits with clear messages",
    ]
    mems = [insight(f"m{i}", t) for i, t in enumerate(texts)]
    out = ActionabilityGate()(query("q", "x", "p"), candidates_of(mems))
    assert ids(out) == ["m1", "m3", "m4"]  # rank order kept among survivors
    assert np.array_equal(out.score, [4.0, 2.0, 1.0])  # scores untouched: a gate, not a boost
    assert out.columns["actionability"].min() >= 0.3 and not out.columns["actionability_relaxed"].any()


def test_actionability_fallback_lets_the_best_dropped_back_when_fewer_than_three_survive():
    texts = [OBSERVATIONS[0], "Tests are important for quality software overall", ACTIONABLE, OBSERVATIONS[1]]
    mems = [insight(f"m{i}", t) for i, t in enumerate(texts)]
    out = ActionabilityGate()(query("q", "x", "p"), candidates_of(mems))
    # one survivor (m2); the fallback adds the best dropped by actionability (m1, 0.2), then by rank (m0)
    assert ids(out) == ["m0", "m1", "m2"]
    assert list(out.columns["actionability_relaxed"]) == [True, True, False]
    off = ActionabilityGate(min_results=0)(query("q", "x", "p"), candidates_of(mems))
    assert ids(off) == ["m2"]


def test_actionability_defaults():
    gate = ActionabilityGate()
    assert gate.threshold == 0.3 and gate.min_results == 3 and gate.observation_veto
    assert sum(gate.weights.values()) == pytest.approx(1.0)


# ---- score floors ----------------------------------------------------------------------------------


def test_score_floor_drops_low_similarity_and_missing_dense_scores():
    mems = [insight(f"m{i}", "t") for i in range(5)]
    cands = candidates_of(mems, dense=[0.5, 0.1, np.nan, 0.3, 0.25], fused=[0.03, 0.03, 0.02, 0.01, 0.01])
    out = ScoreFloor(min_similarity=0.2)(query("q", "x", "p"), cands)
    assert ids(out) == ["m0", "m3", "m4"]


def test_score_floor_on_fused_and_both_floors_together():
    mems = [insight(f"m{i}", "t") for i in range(5)]
    cands = candidates_of(mems, dense=[0.5, 0.1, 0.6, 0.3, 0.25], fused=[0.03, 0.03, 0.02, 0.01, 0.005])
    q = query("q", "x", "p")
    assert ids(ScoreFloor(min_similarity=None, min_fused=0.01, min_results=0)(q, cands)) == [
        "m0",
        "m1",
        "m2",
        "m3",
    ]
    assert ids(ScoreFloor(min_similarity=0.2, min_fused=0.01, min_results=0)(q, cands)) == ["m0", "m2", "m3"]


def test_score_floor_fallback_relaxes_by_similarity():
    mems = [insight(f"m{i}", "t") for i in range(4)]
    cands = candidates_of(mems, dense=[0.05, 0.9, 0.1, np.nan], fused=[0.03, 0.02, 0.01, 0.01])
    out = ScoreFloor(min_similarity=0.5)(query("q", "x", "p"), cands)
    assert ids(out) == ["m0", "m1", "m2"]  # m1 passes; m2 (0.1) and m0 (0.05) let back; NaN last
    assert list(out.columns["score_floor_relaxed"]) == [True, False, True]


def test_score_floor_with_both_floors_off_keeps_everything():
    cands = candidates_of([insight(f"m{i}", "t") for i in range(3)], dense=[0.0, 0.0, 0.0])
    out = ScoreFloor(min_similarity=None, min_fused=None)(query("q", "x", "p"), cands)
    assert ids(out) == ids(cands) and np.array_equal(out.score, cands.score)


def test_score_floor_names_a_missing_column():
    with pytest.raises(KeyError, match="dense"):
        ScoreFloor()(query("q", "x", "p"), candidates_of([insight("m", "t")]))


def test_keep_or_relax_never_invents_candidates():
    cands = candidates_of([insight(f"m{i}", "t") for i in range(2)])
    out = keep_or_relax(cands, np.zeros(2, bool), np.zeros(2), 5, "g")
    assert ids(out) == ["m0", "m1"]


# ---- MMR -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FakeEncoder:
    """Vectors looked up by text; anything unknown is orthogonal to everything."""

    vectors: dict = field(default_factory=dict)

    def encode(self, texts, role):
        dim = 4
        out = []
        for i, t in enumerate(texts):
            default = np.zeros(dim)
            default[i % dim] = 1.0
            out.append(np.asarray(self.vectors.get(t, default), dtype=float))
        return np.stack(out)

    def fingerprint(self):
        return "fake"


def test_mmr_order_is_textbook_on_a_tiny_example():
    # a and b are near-duplicates, c is different and a little less relevant.
    relevance = np.array([1.0, 0.9, 0.6])
    vectors = np.array([[1.0, 0.0], [0.99, 0.141], [0.0, 1.0]])
    order, marginals = mmr_order(relevance, vectors, 0.5)
    assert list(order) == [0, 2, 1]
    assert marginals[0] == pytest.approx(0.5) and marginals[1] == pytest.approx(0.3)
    assert list(mmr_order(relevance, vectors, 1.0)[0]) == [0, 1, 2]


def test_mmr_stage_reorders_the_pool_and_keeps_the_rest_after_it():
    enc = FakeEncoder({"a": [1, 0, 0, 0], "b": [1, 0, 0, 0], "c": [0, 1, 0, 0], "d": [0, 0, 1, 0]})
    mems = [insight(t, t) for t in "abcd"]
    out = MMRDiversity(encoder=enc, pool=3)(query("q", "x", "p"), candidates_of(mems))
    assert ids(out) == ["a", "c", "b", "d"]
    assert np.all(np.diff(out.score) < 0) and "mmr_marginal" in out.columns
    assert np.isnan(out.columns["mmr_marginal"][-1])


def test_mmr_with_lambda_one_keeps_the_order():
    enc = FakeEncoder({"a": [1, 0, 0, 0], "b": [1, 0, 0, 0], "c": [0, 1, 0, 0]})
    mems = [insight(t, t) for t in "abc"]
    out = MMRDiversity(encoder=enc, lambda_mult=1.0)(query("q", "x", "p"), candidates_of(mems))
    assert ids(out) == ["a", "b", "c"]


def test_mmr_defaults_and_bad_lambda():
    stage = MMRDiversity(encoder=FakeEncoder())
    assert stage.lambda_mult == 0.5 and stage.pool == 20
    with pytest.raises(ValueError):
        MMRDiversity(encoder=FakeEncoder(), lambda_mult=1.5)


# ---- enrichment ------------------------------------------------------------------------------------


def test_enrichment_prepends_category_and_domain_for_the_indexes_only():
    m = insight("m", "Summarise long documents first", category="wisdom")
    (out,) = ContextualEnrichment()(ActionDomainClassifier()([m]))
    assert out.annotations["embed_text"] == "[wisdom] [domain:general] Summarise long documents first"
    assert out.text == "Summarise long documents first"
    assert Corpus((out,)).texts() == ["[wisdom] [domain:general] Summarise long documents first"]


def test_enrichment_drops_missing_brackets_and_leaves_bare_memories_alone():
    no_category = insight("a", "Run it", action_domain="code")
    bare = insight("b", "Run it")
    out = ContextualEnrichment()([no_category, bare])
    assert out[0].annotations["embed_text"] == "[domain:code] Run it"
    assert out[1] is bare


# ---- adaptive retrieval gate -----------------------------------------------------------------------


def test_retrieval_gate_silences_read_only_calls_without_task_context():
    cands = candidates_of([insight("m", "t")])
    gate = RetrievalGate()
    assert len(gate(tool_query("Read", {"file_path": "a.py"}, ""), cands)) == 0
    assert len(gate(tool_query("Glob", {"pattern": "*"}, "   "), cands)) == 0
    assert gate(tool_query("Read", {"file_path": "a.py"}, "find where the bug is"), cands) is cands
    assert gate(tool_query("Edit", {"file_path": "a.py"}, ""), cands) is cands
    assert gate(query("q", "no tool at all", "p"), cands) is cands


# ---- off switches: a disabled stage is bit-identical to its absence ---------------------------------

TEXTS = [
    "When editing a Python file, run ruff check before saving",
    "RT @dev: always run tests before every commit (eng: 45 likes)",
    "User prefers dark mode in every editor they use",
    "Always pin dependency versions in requirements.txt before a release",
    "If pytest fails with ImportError, check the venv and PYTHONPATH",
    "Lead a tweet with the hook, then the detail",
]


def _run(*stages):
    mems = [insight(f"m{i}", t) for i, t in enumerate(TEXTS)]
    queries = [
        tool_query(
            "Edit", {"file_path": "a.py"}, "run ruff before saving python", text="python file editing ruff"
        ),
        tool_query("Read", {"file_path": "a.py"}, "", text="pytest ImportError venv"),
    ]
    queries = [query(f"q{i}", q.text, "p", context=q.context) for i, q in enumerate(queries)]
    ingest = [s for s in stages if isinstance(s, IngestStage)]
    rank = [s for s in stages if not isinstance(s, IngestStage)]
    return Pipeline((*ingest, BM25Retriever(top_n=10), *rank), depth=100).run(mems, queries, progress=False)


OFF_CASES = {
    "action_domain": lambda on: ActionDomainClassifier(enabled=on),
    "enrichment": lambda on: ContextualEnrichment(enabled=on),
    "intent_route": lambda on: IntentRouter(enabled=on, min_pool=1),
    "actionability": lambda on: ActionabilityGate(enabled=on),
    "score_floor": lambda on: ScoreFloor(enabled=on, min_similarity=None, min_fused=1.0, fused_column="bm25"),
    "mmr": lambda on: MMRDiversity(enabled=on, encoder=FakeEncoder()),
    "retrieval_gate": lambda on: RetrievalGate(enabled=on),
}


@pytest.mark.parametrize("stage", sorted(OFF_CASES))
def test_a_switched_off_advisory_stage_is_identical_to_its_absence(stage):
    base = [ActionDomainClassifier()] if stage == "intent_route" else []  # routing reads the domains
    absent = _run(*base)
    off = _run(*base, OFF_CASES[stage](False))
    on = _run(*base, OFF_CASES[stage](True))
    assert off.prefix_fingerprint == absent.prefix_fingerprint
    for a, b in zip(absent.ranked, off.ranked, strict=True):
        assert a.memory_ids == b.memory_ids and np.array_equal(a.scores, b.scores)
        assert set(a.columns) == set(b.columns)
    # and switched on, it does something on this input (so the comparison above could have failed)
    assert on.prefix_fingerprint != absent.prefix_fingerprint or any(
        a.memory_ids != b.memory_ids
        or not np.array_equal(a.scores, b.scores)
        or set(a.columns) != set(b.columns)
        for a, b in zip(absent.ranked, on.ranked, strict=True)
    )
