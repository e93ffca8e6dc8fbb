"""Metrics over a large run, memeval against pytrec_eval: `python -m experiments.benchmarks.metrics_speed`.

    python -m experiments.benchmarks.metrics_speed                       # 20,000 x 100; writes the report
    python -m experiments.benchmarks.metrics_speed --queries 2000 --out outputs/m.md      # a quick look

One seeded graded run (grades 0-2 over a 400-document pool, 0-19 judgements a query) of `--queries`
queries x `--depth` documents, given both ways a run comes: as ranked lists (what the runner holds) and as
score dicts `{query: {doc: score}}` (what a TREC run file holds, pytrec_eval reads and a merge of shards
reads). Timed, the same metrics (P@5, P@10, R@10, nDCG@10, RR, AP) from each:

- memeval, ranked lists: `per_query(qrels, run)`;
- memeval, score dicts: `per_query_from_scores` (one vectorised trec_eval ranking);
- memeval, score dicts one query at a time: trec_run's `trec_eval_order` per query, then `per_query` (the
  path before `per_query_from_scores`);
- pytrec_eval: `RelevanceEvaluator(qrels, measures).evaluate(scores)` (trec_eval's C code; the
  evaluator's construction included, as a user pays it);
- ir_measures: `iter_calc` (its pytrec_eval provider).

Twice: scores distinct (rank order) and scores with ties (25 values, so trec_eval's docid rule orders most
lists). Each path `--repeats` times, interleaved, the fastest CPU time (this process: user + system) and
wall kept; the load average beside, and the CPU's model and instruction-set class. The figures are ratios
to pytrec_eval's time in the same run. The values are checked too: score dicts equal the one-by-one
ranking's table exactly, and pytrec_eval's to 1e-9. Writes reports/benchmarks/metrics_speed.md (+ .json).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from experiments import PROJECT_ROOT
from experiments.benchmarks.sweep_cost import _machine
from experiments.evaluate.metrics import per_query, per_query_from_scores
from experiments.track.mlflow_tracker import git_commit
from retrieval.compute import cpu_isa
from retrieval.retrievers.trec_run import _Line, trec_eval_order

METRICS = ("P@5", "P@10", "R@10", "nDCG@10", "RR", "AP")
TREC_EVAL = {"P@5": "P_5", "P@10": "P_10", "R@10": "recall_10", "nDCG@10": "ndcg_cut_10", "RR": "recip_rank",
             "AP": "map"}  # fmt: skip
IR_MEASURES = {"P@5": "P@5", "P@10": "P@10", "R@10": "R@10", "nDCG@10": "nDCG@10", "RR": "RR", "AP": "AP"}


def graded_run(n_queries: int, depth: int, ties: bool, seed: int = 0) -> tuple[dict, dict, dict]:
    """(qrels, ranked lists, score dicts): the ranked lists are the score dicts in trec_eval's order."""
    rng = np.random.default_rng(seed)
    qrels, scores = {}, {}
    for i in range(n_queries):
        query = f"q{i}"
        judged = rng.choice(400, size=int(rng.integers(1, 20)), replace=False)
        qrels[query] = {f"d{j}": int(rng.integers(0, 3)) for j in judged}
        docs = [f"d{j}" for j in rng.choice(400, size=depth, replace=False)]
        values = rng.integers(0, 25, size=depth) / 7.0 if ties else np.arange(depth, 0, -1, dtype=float)
        scores[query] = dict(zip(docs, values.tolist(), strict=True))
    return qrels, one_by_one(scores), scores


def one_by_one(scores: dict) -> dict[str, list[str]]:
    """Each query's documents ranked by trec_run's own `trec_eval_order`, one query at a time."""
    return {
        q: [ln.doc_id for ln in trec_eval_order([_Line(0, q, d, s) for d, s in docs.items()])]
        for q, docs in scores.items()
    }


def _paths(qrels: dict, ranked: dict, scores: dict) -> dict[str, Callable[[], Any]]:
    import ir_measures
    import pytrec_eval

    measures = {ir_measures.parse_measure(v) for v in IR_MEASURES.values()}
    return {
        "memeval, ranked lists": lambda: per_query(qrels, ranked, METRICS),
        "memeval, score dicts": lambda: per_query_from_scores(qrels, scores, METRICS),
        "memeval, score dicts one query at a time": lambda: per_query(qrels, one_by_one(scores), METRICS),
        "pytrec_eval": lambda: pytrec_eval.RelevanceEvaluator(qrels, set(TREC_EVAL.values())).evaluate(
            scores
        ),
        "ir_measures": lambda: list(ir_measures.iter_calc(measures, qrels, scores)),
    }


def measure(n_queries: int, depth: int, ties: bool, repeats: int) -> dict[str, Any]:
    qrels, ranked, scores = graded_run(n_queries, depth, ties)
    paths = _paths(qrels, ranked, scores)
    times: dict[str, dict[str, list[float]]] = {
        name: {"cpu_s": [], "wall_s": [], "load_1min": []} for name in paths
    }
    answers: dict[str, Any] = {}
    for _ in range(repeats):
        for name, path in paths.items():
            load, cpu, wall = os.getloadavg()[0], time.process_time(), time.perf_counter()
            answers[name] = path()
            times[name]["cpu_s"].append(time.process_time() - cpu)
            times[name]["wall_s"].append(time.perf_counter() - wall)
            times[name]["load_1min"].append(load)
    new, old = answers["memeval, score dicts"], answers["memeval, score dicts one query at a time"]
    theirs = answers["pytrec_eval"]
    difference = max(
        abs(float(new.at[q, ours]) - theirs[q][name]) for q in new.index for ours, name in TREC_EVAL.items()
    )
    reference = min(times["pytrec_eval"]["cpu_s"])
    return {
        "queries": n_queries,
        "depth": depth,
        "ties": ties,
        "paths": {
            name: {
                **t,
                "best_cpu_s": min(t["cpu_s"]),
                "best_wall_s": min(t["wall_s"]),
                "cpu_ratio_to_pytrec_eval": min(t["cpu_s"]) / reference,
            }  # fmt: skip
            for name, t in times.items()
        },
        "score_dicts_equal_one_by_one_exactly": bool(new.equals(old)),
        "max_abs_difference_to_pytrec_eval": difference,
    }


def report(results: dict[str, Any], command: str) -> str:
    lines = [
        "# Metrics from a run: memeval against pytrec_eval",
        "",
        f"Command: `{command}`  ",
        f"Date: {results['date']}; commit {results['commit']}.  ",
        f"Machine: {results['machine']}; CPU class {results['isa']}.  ",
        f"Load average (1 min) at start {results['load_start']:.2f}, at end {results['load_end']:.2f} "
        "(a shared machine: CPU time is the figure that load inflates least).",
        "",
        "Metrics P@5, P@10, R@10, nDCG@10, RR, AP on one seeded graded run; each path "
        f"{results['repeats']} times, interleaved, the fastest kept. Ratio: the path's CPU time over "
        "pytrec_eval's in the same run (below 1: faster than pytrec_eval).",
    ]
    for case in results["cases"]:
        kind = "with ties (25 score values)" if case["ties"] else "distinct scores"
        lines += [
            "",
            f"## {case['queries']:,} queries x {case['depth']} documents, {kind}",
            "",
            "| path | CPU s | wall s | CPU ratio to pytrec_eval | load (1 min) |",
            "|---|---|---|---|---|",
            *(
                f"| {name} | {p['best_cpu_s']:.3f} | {p['best_wall_s']:.3f} | "
                f"{p['cpu_ratio_to_pytrec_eval']:.2f} | {', '.join(f'{v:.2f}' for v in p['load_1min'])} |"
                for name, p in case["paths"].items()
            ),
            "",
            f"Score dicts give exactly the table of the one-by-one ranking: "
            f"{case['score_dicts_equal_one_by_one_exactly']}; largest difference to pytrec_eval over every "
            f"query and metric: {case['max_abs_difference_to_pytrec_eval']:.1e}.",
        ]
    return "\n".join([*lines, ""])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=int, default=20_000)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(PROJECT_ROOT / "reports" / "benchmarks" / "metrics_speed.md"))
    args = parser.parse_args(argv)
    load_start = os.getloadavg()[0]
    cases = [measure(args.queries, args.depth, ties, args.repeats) for ties in (False, True)]
    results = {
        "date": f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "commit": git_commit()[:10],
        "machine": _machine(),
        "isa": cpu_isa(),
        "repeats": args.repeats,
        "load_start": load_start,
        "load_end": os.getloadavg()[0],
        "cases": cases,
    }
    command = "python -m experiments.benchmarks.metrics_speed " + shlex.join(
        argv if argv is not None else sys.argv[1:]
    )
    text = report(results, command.strip())
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    Path(args.out).with_suffix(".json").write_text(json.dumps(results, indent=2))
    print(text)


if __name__ == "__main__":
    main()
