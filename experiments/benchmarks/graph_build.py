"""Cost of deriving a concept graph (graph_build ingest + assembling the per-scope graphs and the
concept search index) against building the BM25 index, on the same memories.

    python -m experiments.benchmarks.graph_build ../shared/beam/100K ../shared/beam/500K
        (writes reports/benchmarks/graph_build.md)

CPU time (time.process_time) beside wall time, best of `--repeat`, with the load average: the machine
is shared. Target: graph build <= 2x the BM25 build.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from experiments.suites.beam import load_beam
from retrieval.concept_graph import scope_graphs
from retrieval.retrievers.bm25 import BM25Retriever
from retrieval.stages.graph_build import GraphBuild
from retrieval.tokenize import tokenize
from retrieval.types import Corpus


def _timed(make) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    make()
    return time.perf_counter() - wall, time.process_time() - cpu


def _graph(memories) -> None:
    graphs = scope_graphs(Corpus(tuple(GraphBuild()(memories))))
    for graph in graphs.values():
        graph.search(tokenize("warm the concept index"))  # the BM25 index over concepts is lazy


def measure(path: str, repeat: int) -> dict:
    suite = load_beam(path)
    corpus = Corpus(suite.memories)
    bm25 = min((_timed(lambda: BM25Retriever().build(corpus)) for _ in range(repeat)), key=lambda t: t[1])
    graph = min((_timed(lambda: _graph(suite.memories)) for _ in range(repeat)), key=lambda t: t[1])
    built = scope_graphs(Corpus(tuple(GraphBuild()(suite.memories))))
    return {
        "suite": path,
        "memories": len(suite.memories),
        "concepts": sum(len(g.ids) for g in built.values()),
        "edges": sum(len(a) for g in built.values() for a in g.adjacency) // 2,
        "bm25": bm25,
        "graph": graph,
        "load": os.getloadavg()[0],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default="reports/benchmarks/graph_build.md")
    args = parser.parse_args(argv)
    lines = [
        "# Concept-graph build cost against the BM25 index build",
        "",
        "Written by `python -m experiments.benchmarks.graph_build " + " ".join(args.paths) + "`.",
        f"Best of {args.repeat}; CPU seconds (process time) and wall seconds; graph = graph_build ingest",
        "+ per-scope graphs + concept BM25 index. Target: graph CPU <= 2x BM25 CPU.",
        "",
        "| suite | memories | concepts | edges | BM25 CPU s | BM25 wall s | graph CPU s | graph wall s "
        "| ratio (CPU) | load |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for path in args.paths:
        r = measure(path, args.repeat)
        (bm25_wall, bm25_cpu), (graph_wall, graph_cpu) = r["bm25"], r["graph"]
        lines.append(
            f"| {r['suite']} | {r['memories']:,} | {r['concepts']:,} | {r['edges']:,} | {bm25_cpu:.2f} | "
            f"{bm25_wall:.2f} | {graph_cpu:.2f} | {graph_wall:.2f} | "
            f"{graph_cpu / bm25_cpu:.2f} | {r['load']:.2f} |"
        )
        print(lines[-1], flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
