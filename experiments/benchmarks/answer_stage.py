"""What the answer stage costs: `python -m experiments.benchmarks.answer_stage` writes
reports/benchmarks/answer_stage.md.

    python -m experiments.benchmarks.answer_stage                      # every section it can measure
    python -m experiments.benchmarks.answer_stage --questions 4 --out outputs/answer_stage.md

1. The runtime against a loopback stub endpoint answering in 50 ms (experiments/benchmarks/chat_stub.py):
   the same calls through `LlmCalls.ask` (client, key, cassette key) at concurrency 1 and 4, calls per
   second (target: 4 gives >= 3x of 1), and memeval's own time per call (the call's wall time minus the
   stub's 50 ms; target p50 <= 5 ms).
2. The offline endpoint (llama_cpp.server + SmolLM2-135M, memeval[llm-server]), when installed: server
   start (process start to GET /v1/models answering; target <= 10 s), and per answer at a LoCoMo
   question's top-10 bm25 turns (the prompt F's `answer_messages` builds): prompt and generated tokens/s,
   seconds p50/p95, at n_threads 1 and 2 (OMP_WAIT_POLICY=passive).
The load average is stated beside each figure: the machine is shared, so the figures are ceilings.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from experiments import PROJECT_ROOT
from experiments.answer.calls import LlmCalls
from experiments.answer.client import ChatEndpoint
from experiments.benchmarks.chat_stub import ChatStub
from experiments.benchmarks.report_paths import portable

STUB_DELAY_S = 0.05
RATIO_TARGET, OVERHEAD_TARGET_MS, START_TARGET_S = 3.0, 5.0, 10.0


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def stub_figures(calls: int) -> dict:
    """Calls per second at concurrency 1 and 4, and memeval's time per call, against the 50 ms stub."""
    out = {}
    with ChatStub(delay_s=STUB_DELAY_S) as stub:
        endpoint = ChatEndpoint(base_url=stub.base_url, retries=0)
        for concurrency in (1, 4):
            llm = LlmCalls(endpoint, {"model": "stub"}, mode="live", cassette=None)
            llm.server_model()
            bodies = [
                {
                    "model": "stub",
                    "messages": [{"role": "user", "content": f"ctx {i}\nQuestion: q{i}"}],
                    "seed": 42,
                }
                for i in range(calls)
            ]
            own: list[float] = []

            def one(i: int, llm=llm, bodies=bodies, own=own) -> None:
                started = time.perf_counter()
                llm.ask(f"q{i}", "answer", bodies[i])
                own.append((time.perf_counter() - started - STUB_DELAY_S) * 1000)

            load = _load()
            started = time.perf_counter()
            with ThreadPoolExecutor(max_workers=concurrency) as pool:
                list(pool.map(one, range(calls)))
            wall = time.perf_counter() - started
            out[concurrency] = {"per_s": calls / wall, "own_ms_p50": float(np.percentile(own, 50)),
                                "own_ms_p95": float(np.percentile(own, 95)), "load": load}  # fmt: skip
    return out


def server_figures(questions: int, threads: tuple[int, ...]) -> tuple[dict, str | None]:
    """Server start and per-answer speed at each n_threads, or (None-filled, why not) when it cannot run."""
    try:
        import llama_cpp  # noqa: F401  (memeval[llm-server])

        from experiments.answer.llama_server import start_server
        from experiments.answer.offline_model import smollm2_gguf
        from experiments.answer.prompts import answer_messages
    except ImportError as err:
        return {}, f"not measured: {err} (install memeval[llm-server]: make llm-server)"
    from experiments.suites.locomo import load_locomo
    from retrieval.pipeline import Pipeline
    from retrieval.retrievers.bm25 import BM25Retriever

    suite = load_locomo(
        PROJECT_ROOT.parent / "shared" / "locomo" / "locomo10_conv1-5.json", protocol="memeval"
    )
    rng = np.random.default_rng(0)
    picked = [suite.queries[i] for i in sorted(rng.choice(len(suite.queries), size=questions, replace=False))]
    ranked = Pipeline((BM25Retriever(),), depth=10).run(
        suite.memories, picked, suite_hash=suite.content_hash, progress=False
    )
    by_id = {m.id: m for m in suite.memories}
    out = {}
    for n in threads:
        with tempfile.TemporaryDirectory() as tmp:
            server = start_server(smollm2_gguf(), n_threads=n, log=Path(tmp) / "server.log")
            try:
                llm = LlmCalls(
                    ChatEndpoint(base_url=server.base_url), {"model": "smollm2"}, mode="live", cassette=None
                )
                model = llm.server_model()
                rows = []
                load = _load()
                for query, result in zip(picked, ranked.ranked, strict=True):
                    memories = [by_id[i] for i in result.memory_ids[:10]]
                    messages = answer_messages(
                        query, memories, benchmark="locomo", protocol="official", seed=42
                    )
                    body = {
                        "model": model,
                        "messages": messages,
                        "temperature": 0.0,
                        "seed": 42,
                        "max_tokens": 64,
                    }
                    started = time.perf_counter()
                    reply = llm.ask(query.id, "answer", body)
                    rows.append(
                        (
                            time.perf_counter() - started,
                            reply.prompt_tokens or 0,
                            reply.completion_tokens or 0,
                        )
                    )
                seconds = np.array([r[0] for r in rows])
                out[n] = {
                    "start_s": server.started_s, "p50_s": float(np.percentile(seconds, 50)),
                    "p95_s": float(np.percentile(seconds, 95)),
                    "prompt_tokens_mean": float(np.mean([r[1] for r in rows])),
                    "generated_per_s": float(sum(r[2] for r in rows) / seconds.sum()), "load": load,
                }  # fmt: skip
            finally:
                server.stop()
    return out, None


def replay_figures() -> dict | None:
    """The retrieval-only run's wall time and the same run with the committed LoCoMo answer cassette
    replayed (experiments/benchmarks/locomo_answers.py), each the fastest of two, from metrics.json's wall_s;
    None when no cassette is committed."""
    import json
    import subprocess

    from experiments.benchmarks.locomo_answers import CASSETTE, overrides

    if not CASSETTE.is_file():
        return None
    sample = sum('"op":"chat"' in line for line in CASSETTE.read_text().splitlines()) // 2
    answer = overrides(sample, 5, CASSETTE, "replay")
    retrieval = [o for o in answer if not o.startswith("answer")]
    walls: dict[str, list[float]] = {"retrieval": [], "replay": []}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(2):
            for name, args in (("retrieval", retrieval), ("replay", answer)):
                folder = Path(tmp) / f"{name}{repeat}"
                subprocess.run(
                    [sys.executable, "-m", "experiments.run", *args, "tracking.enabled=false",
                     "progress=false", f"hydra.run.dir={folder}", f"cache_dir={Path(tmp) / 'cache'}"],
                    cwd=PROJECT_ROOT, check=True, capture_output=True,
                )  # fmt: skip
                walls[name].append(json.loads((folder / "metrics.json").read_text())["wall_s"])
    return {name: min(values) for name, values in walls.items()} | {"sample": sample, "load": _load()}


def render(
    stub: dict, server: dict, why_not: str | None, replay: dict | None, args: argparse.Namespace
) -> str:
    ratio = stub[4]["per_s"] / stub[1]["per_s"]
    lines = [
        "# The answer stage's cost",
        "",
        f"Written by `python -m experiments.benchmarks.answer_stage {shlex.join(args.argv)}` on "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()}, {os.cpu_count()} CPUs (shared with "
        "other jobs: the figures are ceilings, the load average is stated beside each).",
        "",
        "## Against a loopback stub endpoint answering in 50 ms",
        "",
        f"{args.calls} calls through `LlmCalls.ask` (the client, the key, the cassette key), live mode:",
        "",
        "memeval's own time is a call's wall time minus the stub's 50 ms sleep: it includes the stub's own",
        "parsing and reply (Python's http.server), so it is an upper bound.",
        "",
        "| concurrency | calls/s | memeval's own ms per call p50 | p95 | load (1/5/15 min) |",
        "|---|---|---|---|---|",
        *(
            f"| {c} | {s['per_s']:.1f} | {s['own_ms_p50']:.2f} | {s['own_ms_p95']:.2f} | {s['load']} |"
            for c, s in stub.items()
        ),
        "",
        f"Concurrency 4 gives {ratio:.2f}x the calls per second of 1 (target >= {RATIO_TARGET:g}x); "
        f"memeval's own time per call is {stub[1]['own_ms_p50']:.2f} ms p50 at concurrency 1 "
        f"(target <= {OVERHEAD_TARGET_MS:g} ms).",
        "",
        "## The offline endpoint (llama_cpp.server, SmolLM2-135M-Instruct Q4_1, OMP_WAIT_POLICY=passive)",
        "",
    ]
    if why_not:
        lines.append(why_not + ".")
    else:
        lines += [
            f"{args.questions} LoCoMo questions (conversations 1-5, seeded), each with its top-10 bm25 "
            "turns, max_tokens 64, temperature 0, seed 42; the prompt built by "
            "experiments.answer.prompts.answer_messages:",
            "",
            "| n_threads | server start s | s per answer p50 | p95 | prompt tokens (mean) "
            "| generated tokens per answer-second | load |",
            "|---|---|---|---|---|---|---|",
            *(
                f"| {n} | {s['start_s']:.1f} | {s['p50_s']:.1f} | {s['p95_s']:.1f} "
                f"| {s['prompt_tokens_mean']:.0f} | {s['generated_per_s']:.1f} | {s['load']} |"
                for n, s in server.items()
            ),
        ]
    lines += ["", "## Replaying the recorded LoCoMo answers (tests/answer/test_locomo_answers.py)", ""]
    if replay is None:
        lines.append("not measured: no cassette committed (python -m experiments.benchmarks.locomo_answers).")
    else:
        added = replay["replay"] / replay["retrieval"] - 1
        lines += [
            f"LoCoMo conversations 1-5, bm25, {replay['sample']} questions answered from the retrieved "
            "and from random turns, replayed with no model: the run's wall time (metrics.json `wall_s`, "
            f"the fastest of two) is {replay['replay']:.2f} s against {replay['retrieval']:.2f} s for the "
            f"retrieval-only run: {added:+.1%} (target: less than +10%; load {replay['load']}).",
        ]
    return portable("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--questions", type=int, default=6)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", default=str(PROJECT_ROOT / "reports" / "benchmarks" / "answer_stage.md"))
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    stub = stub_figures(args.calls)
    server, why_not = server_figures(args.questions, tuple(args.threads))
    replay = replay_figures()
    text = render(stub, server, why_not, replay, args)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
