"""`suite.protocol=official`: the same run scored by upstream's own code (vendored in tests/upstream/, under
its licence) and by memeval, on LoCoMo conversations 1-5 and on a LongMemEval file in the official schema
with every edge case of upstream's conventions (tests/data/longmemeval/longmemeval_official_edges.json).

The run is a real one: bm25 through memeval's pipeline and evaluation (experiments.run.app.execute). Its
ranked memory ids are turned into what upstream's scorers read (dia_ids, `S<n>` sessions, corpus positions)
by this file's own reading of the raw JSON, not by the loaders' code.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from experiments.configure.build import build_pipeline
from experiments.configure.compose import compose_config
from experiments.configure.settings import load_suite_from_config
from experiments.run.app import execute
from tests.support import DATA, LOCOMO
from tests.upstream import locomo_evaluation as locomo_upstream
from tests.upstream import longmemeval_retrieval as lme_upstream

LOCOMO_FIXTURE = DATA / "locomo" / "locomo_fixture.json"  # its schema, in the repo
EDGES = DATA / "longmemeval" / "longmemeval_official_edges.json"
KS = (1, 3, 5, 10, 30, 50)  # run_retrieval.py:316
TOLERANCE = 1e-9


def _run(suite_name: str, path: Path, granularity: str, metrics: list[str], *extra: str):
    cfg = compose_config(
        [
            f"suite={suite_name}",
            f"suite.path={path}",
            f"suite.granularity={granularity}",
            "variant=bm25",
            "depth=1000",
            "cache_dir=null",
            f"metrics=[{','.join(metrics)}]",
            *extra,
        ]
    )
    suite = load_suite_from_config(cfg)
    output, evaluation = execute(cfg, suite, build_pipeline(cfg))
    return suite, {r.query_id: list(r.memory_ids) for r in output.ranked}, evaluation


# ---------------------------------------------------------------------------------------------- LoCoMo


@pytest.fixture(scope="module")
def locomo_raw(locomo_file):  # conftest: ../shared/locomo, a failure (never a skip) when missing
    return json.loads(locomo_file.read_text())


@pytest.mark.parametrize("granularity", ["turn", "session"])
def test_locomo_official_recall_equals_upstreams_eval_question_answering(locomo_raw, granularity):
    ks = (5, 10)
    suite, run, evaluation = _run("locomo", LOCOMO, granularity, [f"R@{k}" for k in ks])
    table = evaluation.per_query
    scored = table[~table["abstention"]]
    every = {f"{s['sample_id']}:q{j}": (s, qa) for s in locomo_raw for j, qa in enumerate(s["qa"])}
    assert sorted(scored.index) == sorted(every)  # every question, category 5 and no-evidence ones too
    for k in ks:
        qas = []
        for qid in scored.index:
            sample, qa = every[qid]
            ranked = run.get(qid, [])[:k]
            prefix = sample["sample_id"] + ":"
            context = [m.removeprefix(prefix) for m in ranked]  # conv-26:D1:3 -> D1:3; conv-26:D3 -> D3
            if granularity == "session":
                context = ["S" + c.removeprefix("D") for c in context]  # upstream's session ids: S3
            qas.append({**copy.deepcopy(qa), "prediction_context": context})
        # Upstream's retriever always returns k items; its code stops (IndexError) on an empty context, which
        # bm25 gives a question it shares no term with: those are 0 (1 with no evidence), checked apart.
        fed = [i for i, q in enumerate(qas) if q["prediction_context"]]
        upstream = np.array([float(not q["evidence"]) for q in qas])
        upstream[fed] = locomo_upstream.eval_question_answering([qas[i] for i in fed], "prediction")
        assert 0 < len(fed) and len(fed) >= 0.9 * len(qas)
        ours = scored[f"R@{k}"].to_numpy()
        assert np.abs(ours - upstream).max() <= TOLERANCE
        assert abs(evaluation.metrics["overall"][f"R@{k}"] - float(np.mean(upstream))) <= TOLERANCE
        # Upstream's stats script (evaluation_stats.py) averages the per-question values rounded to 3 places
        # and counts a question with no evidence as 0: docs/benchmarks.md says so; this pins the difference.
        stored = [
            {**q, "m_recall": locomo_upstream.question_recall_as_stored(upstream, i)}
            for i, q in enumerate(qas)
        ]
        no_evidence = [i for i, q in enumerate(qas) if not q["evidence"]]
        expected = (sum(round(float(v), 3) for v in upstream) - len(no_evidence)) / len(qas)
        assert abs(locomo_upstream.overall_recall(stored, "m") - expected) <= TOLERANCE
        # both numbers in metrics.json, each labelled (issue 41): memeval's mean and upstream's printed one
        official = evaluation.metrics["official"][f"R@{k}"]
        assert official["memeval mean"] == evaluation.metrics["overall"][f"R@{k}"]
        printed = official["LoCoMo task_eval/evaluation_stats.py: Overall recall accuracy"]
        assert abs(printed - locomo_upstream.overall_recall(stored, "m")) <= TOLERANCE


@pytest.mark.parametrize("granularity", ["turn", "session"])
def test_locomo_official_equals_upstream_on_seeded_full_rankings_of_the_fixture(granularity, tmp_path):
    """The in-repo fixture (split string, `D`, an unknown id, no evidence, category 5) with two more questions
    (two ids of one session and a repeated id; the `D:11:26` kind of typo), every cutoff."""
    from experiments.evaluate.metrics.official import per_query as official_per_query

    raw = json.loads(LOCOMO_FIXTURE.read_text())
    extra = [["D1:1", "D1:3", "D1:1", "D2:2"], ["D:1:2", "D2:4"]]
    raw[0]["qa"] += [
        {"question": f"Extra question {i}?", "answer": "x", "evidence": e, "category": 1}
        for i, e in enumerate(extra)
    ]
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(raw))
    suite = load_suite_from_config(
        compose_config(["suite=locomo", f"suite.path={path}", f"suite.granularity={granularity}"])
    )
    ids = [m.id for m in suite.memories]
    qas = {f"{x['sample_id']}:q{j}": qa for x in raw for j, qa in enumerate(x["qa"])}
    for seed in range(8):
        order = [ids[i] for i in np.random.default_rng(seed).permutation(len(ids))]
        run = {q: order for q in qas}
        for k in range(1, len(ids) + 1):
            ours = official_per_query(suite.scorer, suite.qrels, run, [f"R@{k}"])
            context = [m.split(":", 1)[1] for m in order[:k]]
            if granularity == "session":
                context = ["S" + c.removeprefix("D") for c in context]
            fed = [{**copy.deepcopy(qa), "prediction_context": context} for qa in qas.values()]
            upstream = dict(zip(qas, locomo_upstream.eval_question_answering(fed, "prediction"), strict=True))
            assert sorted(ours.index) == sorted(qas)
            for qid, value in upstream.items():
                assert abs(ours.loc[qid, f"R@{k}"] - value) <= TOLERANCE, (seed, k, qid)


def test_locomo_official_scores_what_memeval_drops(locomo_raw):
    official = load_suite_from_config(compose_config(["suite=locomo", f"suite.path={LOCOMO}"]))
    memeval = load_suite_from_config(
        compose_config(["suite=locomo", f"suite.path={LOCOMO}", "suite.protocol=memeval"])
    )
    n = sum(len(s["qa"]) for s in locomo_raw)
    assert sum(not official.is_abstention(q.id) for q in official.queries) == n
    assert sum(not memeval.is_abstention(q.id) for q in memeval.queries) < n
    assert official.tags["protocol"] == "official" and memeval.tags["protocol"] == "memeval"
    # `D:11:26` (a typo of D11:26) is a miss that counts for upstream: in official's raw evidence
    typo = [q for q, ev in official.scorer.evidence.items() if "D:11:26" in ev]
    assert typo and all(f"{q.split(':q')[0]}:D:11:26" not in official.qrels.get(q, {}) for q in typo)


# ----------------------------------------------------------------------------------------- LongMemEval


def _upstream_results(raw: list[dict], run: dict[str, list[str]], granularity: str) -> list[dict]:
    """Upstream's per-question results (run_retrieval.py:241-331) for memeval's run."""
    results = []
    for entry in raw:
        qid = entry["question_id"]
        corpus_ids, memory_ids = [], []
        for sid, session, ts in zip(
            entry["haystack_session_ids"], entry["haystack_sessions"], entry["haystack_dates"], strict=True
        ):
            _, ids, _ = lme_upstream.process_item_flat_index(session, granularity, sid, ts)
            corpus_ids += ids
            if granularity == "session":
                memory_ids.append(f"{qid}:{sid}")
            else:  # upstream's turn number n of `<session>_<n>` counts every turn; memeval's id keeps it
                memory_ids += [f"{qid}:{sid}_{t + 1}" for t, x in enumerate(session) if x["role"] == "user"]
        correct_docs = lme_upstream.correct_docs_of(corpus_ids)
        position = {m: i for i, m in enumerate(memory_ids)}
        rankings = [position[m] for m in run.get(qid, [])]
        metrics = {"session": {}, "turn": {}}
        for k in KS:
            names = (f"recall_any@{k}", f"recall_all@{k}", f"ndcg_any@{k}")
            values = lme_upstream.evaluate_retrieval(rankings, correct_docs, corpus_ids, k=k)
            metrics[granularity].update(zip(names, values, strict=True))
            if granularity == "turn":
                values = lme_upstream.evaluate_retrieval_turn2session(rankings, correct_docs, corpus_ids, k=k)
                metrics["session"].update(zip(names, values, strict=True))
        results.append({**entry, "retrieval_results": {"metrics": metrics}})
    return results


@pytest.mark.parametrize("granularity", ["turn", "session"])
def test_longmemeval_official_equals_upstreams_eval_utils_and_both_averages(granularity):
    raw = json.loads(EDGES.read_text())
    names = [f"{m}@{k}" for k in KS for m in ("recall_any", "recall_all", "ndcg_any")]
    session_view = [f"session_{n}" for n in names] if granularity == "turn" else []
    suite, run, evaluation = _run("longmemeval", EDGES, granularity, [*names, *session_view])
    upstream = _upstream_results(raw, run, granularity)
    table = evaluation.per_query
    by_id = {r["question_id"]: r for r in upstream}
    scored = table[~table["abstention"]]
    assert sorted(scored.index) == sorted(
        q for q in by_id if "_abs" not in q
    )  # print_retrieval_metrics.py:12
    for qid in scored.index:
        for name in names:
            assert abs(
                scored.loc[qid, name] - by_id[qid]["retrieval_results"]["metrics"][granularity][name]
            ) <= (TOLERANCE), (qid, name)
        for name in session_view:
            value = by_id[qid]["retrieval_results"]["metrics"]["session"][name.removeprefix("session_")]
            assert abs(scored.loc[qid, name] - value) <= TOLERANCE, (qid, name)
    # The overall mean is print_retrieval_metrics.py's; lme_average="both scripts" is run_retrieval.py's.
    averaged = lme_upstream.run_retrieval_average(upstream)
    both = evaluation.metrics["by_label"]["lme_average"]["both scripts"]
    for name in names:
        expected = lme_upstream.print_retrieval_metrics_average(upstream, granularity, name)
        assert abs(evaluation.metrics["overall"][name] - expected) <= TOLERANCE, name
        assert abs(both[name] - averaged[granularity][name]) <= TOLERANCE, name
    for name in session_view:
        plain = name.removeprefix("session_")
        expected = lme_upstream.print_retrieval_metrics_average(upstream, "session", plain)
        assert abs(evaluation.metrics["overall"][name] - expected) <= TOLERANCE, name
        assert abs(both[name] - averaged["session"][plain]) <= TOLERANCE, name
    # the suite's notes (metrics.json's suite.notes) say which script each average is
    (note,) = [n for n in suite.notes if n.startswith("protocol=official")]
    assert (
        "print_retrieval_metrics.py" in note
        and "lme_average='both scripts' is src/retrieval/run_retrieval.py" in note
    )
    # The two scripts average different question sets here, so the edge cases are exercised.
    assert evaluation.metrics["by_label"]["lme_average"]["print_retrieval_metrics.py only"]["n_queries"] >= 1


@pytest.mark.parametrize("granularity", ["turn", "session"])
def test_longmemeval_official_equals_upstream_on_seeded_full_rankings(granularity):
    """bm25 leaves much of the ranking unreached; full rankings in random order reach every case (k grown
    past k turns in the session view, partial nDCG, noans turns ranked above answer turns)."""
    from experiments.evaluate.metrics.official import per_query as official_per_query

    raw = json.loads(EDGES.read_text())
    suite = load_suite_from_config(
        compose_config(["suite=longmemeval", f"suite.path={EDGES}", f"suite.granularity={granularity}"])
    )
    names = [f"{m}@{k}" for k in KS for m in ("recall_any", "recall_all", "ndcg_any")]
    session_view = [f"session_{n}" for n in names] if granularity == "turn" else []
    scope_of = {}
    for m in suite.memories:
        scope_of.setdefault(m.scope["question"], []).append(m.id)
    for seed in range(8):
        rng = np.random.default_rng(seed)
        run = {q: [ids[i] for i in rng.permutation(len(ids))] for q, ids in scope_of.items()}
        ours = official_per_query(suite.scorer, suite.qrels, run, [*names, *session_view])
        by_id = {
            r["question_id"]: r["retrieval_results"]["metrics"]
            for r in _upstream_results(raw, run, granularity)
        }
        for qid in ours.index:
            for name in names:
                assert abs(ours.loc[qid, name] - by_id[qid][granularity][name]) <= TOLERANCE, (
                    seed,
                    qid,
                    name,
                )
            for name in session_view:
                expected = by_id[qid]["session"][name.removeprefix("session_")]
                assert abs(ours.loc[qid, name] - expected) <= TOLERANCE, (seed, qid, name)


def test_longmemeval_edge_cases_read_as_upstream_reads_them():
    official = load_suite_from_config(compose_config(["suite=longmemeval", f"suite.path={EDGES}"]))
    memeval = load_suite_from_config(
        compose_config(["suite=longmemeval", f"suite.path={EDGES}", "suite.protocol=memeval"])
    )
    # has_answer outside an answer* session: evidence for memeval only
    assert "lme_edge_turns:sharegpt_dogs_1_3" in memeval.qrels["lme_edge_turns"]
    assert "lme_edge_turns:sharegpt_dogs_1_3" not in official.qrels["lme_edge_turns"]
    # `_abs` inside the id: abstention for upstream, not for memeval
    assert official.is_abstention("lme_edge_abs_v2") and not memeval.is_abstention("lme_edge_abs_v2")
    # no user evidence: skipped by memeval, scored by upstream (in print_retrieval_metrics.py's average only)
    assert "lme_edge_assistant" not in {q.id for q in memeval.queries}
    assert not official.is_abstention("lme_edge_assistant")
    # the empty has_answer turn is in upstream's corpus (it counts in recall_all and the ideal DCG)
    assert "answer_edge5_a_3" in official.scorer.corpus["lme_edge_empty"]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (["suite=longmemeval", f"suite.path={EDGES}", "suite.roles=all"], "suite.roles"),
        (["suite=longmemeval", f"suite.path={EDGES}", "suite.granularity=round"], "suite.granularity"),
        (["suite=locomo", f"suite.path={LOCOMO_FIXTURE}", "suite.granularity=round"], "suite.granularity"),
        (["suite=locomo", f"suite.path={LOCOMO_FIXTURE}", "suite.protocol=upstream"], "suite.protocol"),
    ],
)
def test_what_upstream_does_not_do_is_refused_under_official_naming_the_field(overrides, field):
    from experiments.suites.suite import SuiteError

    with pytest.raises(SuiteError, match=field):
        load_suite_from_config(compose_config(overrides))


def test_the_session_view_needs_longmemevals_official_scorer():
    from experiments.evaluate.metrics.official import check_metrics

    with pytest.raises(ValueError, match="session_recall_any@5"):
        check_metrics(None, ["R@5", "session_recall_any@5"])


def test_a_suite_scored_by_upstream_is_not_saved_as_a_canonical_suite_that_would_score_otherwise(tmp_path):
    from experiments.suites.jsonl import save_suite

    official = load_suite_from_config(compose_config(["suite=longmemeval", f"suite.path={EDGES}"]))
    with pytest.raises(ValueError, match="suite.protocol=memeval"):
        save_suite(official, tmp_path / "suite")
    assert not (tmp_path / "suite").exists()
    memeval = load_suite_from_config(
        compose_config(["suite=longmemeval", f"suite.path={EDGES}", "suite.protocol=memeval"])
    )
    assert (save_suite(memeval, tmp_path / "suite") / "qrels.tsv").is_file()
