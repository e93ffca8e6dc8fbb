"""A run exported to LongMemEval's retrieval output (memeval-export --to longmemeval) and scored by upstream's
own code (tests/upstream/longmemeval_retrieval.py: evaluate_retrieval, its session view and
print_retrieval_metrics' average) equals memeval's protocol=official numbers. Upstream's corpus ids and
correct documents come from its own process_item_flat_index over the raw file, not from memeval's loader."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from experiments.configure.build import build_pipeline
from experiments.configure.compose import compose_config, yaml_text
from experiments.configure.settings import load_suite_from_config
from experiments.run.app import execute
from experiments.run_folder.exchange import export
from experiments.run_folder.trec import write_run
from tests.support import DATA
from tests.upstream import longmemeval_retrieval as lme_upstream

EDGES = DATA / "longmemeval" / "longmemeval_official_edges.json"
KS = (1, 3, 5, 10, 30, 50)


@pytest.mark.parametrize("granularity", ["turn", "session"])
def test_the_exported_file_scored_by_upstream_equals_memevals_official_numbers(granularity, tmp_path):
    names = [f"{m}@{k}" for k in KS for m in ("recall_any", "recall_all", "ndcg_any")]
    view = [f"session_{n}" for n in names] if granularity == "turn" else []
    cfg = compose_config(
        ["suite=longmemeval", f"suite.path={EDGES}", f"suite.granularity={granularity}", "variant=bm25",
         "depth=1000", "cache_dir=null", "tracking=none", f"metrics=[{','.join([*names, *view])}]",
         f"objective={names[0]}"]
    )  # fmt: skip
    suite = load_suite_from_config(cfg)
    output, evaluation = execute(cfg, suite, build_pipeline(cfg))
    write_run(output.ranked, tmp_path / "run.trec", tag="bm25")
    (tmp_path / "config.yaml").write_text(yaml_text(OmegaConf.to_container(cfg, resolve=True)))
    exported = {
        line["question_id"]: line for line in map(json.loads, export(tmp_path, "longmemeval").splitlines())
    }
    results = []
    for entry in json.loads(EDGES.read_text()):  # upstream's run_retrieval.py:241-331 on the exported ranking
        corpus_ids = []
        for sid, session, ts in zip(
            entry["haystack_session_ids"], entry["haystack_sessions"], entry["haystack_dates"], strict=True
        ):
            corpus_ids += lme_upstream.process_item_flat_index(session, granularity, sid, ts)[1]
        correct = lme_upstream.correct_docs_of(corpus_ids)
        items = exported.get(entry["question_id"], {"retrieval_results": {"ranked_items": []}})
        rankings = [corpus_ids.index(i["corpus_id"]) for i in items["retrieval_results"]["ranked_items"]]
        metrics = {"session": {}, "turn": {}}
        for k in KS:
            keys = (f"recall_any@{k}", f"recall_all@{k}", f"ndcg_any@{k}")
            values = lme_upstream.evaluate_retrieval(rankings, correct, corpus_ids, k)
            metrics[granularity].update(zip(keys, values, strict=True))
            if granularity == "turn":
                values = lme_upstream.evaluate_retrieval_turn2session(rankings, correct, corpus_ids, k)
                metrics["session"].update(zip(keys, values, strict=True))
        results.append({**entry, "retrieval_results": {"metrics": metrics}})
    overall = evaluation.metrics["overall"]
    for name in names:
        assert overall[name] == pytest.approx(
            lme_upstream.print_retrieval_metrics_average(results, granularity, name), abs=1e-12
        ), name
    for name in view:
        plain = name.removeprefix("session_")
        expected = lme_upstream.print_retrieval_metrics_average(results, "session", plain)
        assert overall[name] == pytest.approx(expected, abs=1e-12), name
    ids = [i["corpus_id"] for e in exported.values() for i in e["retrieval_results"]["ranked_items"]]
    assert ids and not any(":" in i for i in ids) and any("answer" in i for i in ids)  # upstream's ids
