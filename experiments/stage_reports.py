"""Reports for issue 5's stage families: tag inference, time decay + importance, memory tiers.

    python -m experiments.stage_reports                      # all three, every suite
    python -m experiments.stage_reports --variants tiering --suites tiered_synth

Runs each variant, its ablations and the hybrid baseline in-process through the same Hydra configs
as `python -m experiments.run` (so every row can be re-run by hand with the overrides shown), on
BEAM 100K (`suite=beam`), spark25 and the generated tiered suite, and writes
reports/stages/<variant>.md: overall metrics with a paired randomization test vs hybrid (Holm across
the rows of one suite), per-ability / per-category nDCG@10 and P@5, latency per query and per stage.
The tiering report adds the cost benchmark (high-order tiers on vs off on a 1,000-observation scope,
no prefix cache, repeated). Latency is measured on a shared 2-core machine: treat it as indicative.
"""

from __future__ import annotations

import argparse
import subprocess
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

from experiments.config_check import SUITE_REPORT_KEYS
from experiments.configs import CONF_DIR
from experiments.evaluate import Evaluation, evaluate
from experiments.statistics import compare, holm
from retrieval.pipeline import CandidateCache, Pipeline

REPO = Path(__file__).resolve().parents[1]
METRICS = ["P@5", "R@10", "nDCG@10", "RR"]
SUITES = {"beam": "suite=beam", "spark25": "suite=spark25", "tiered_synth": "suite=tiered_synth"}
# variant -> rows: (row name, overrides). The first row is the baseline every other is tested against.
ROWS: dict[str, list[tuple[str, list[str]] | tuple[str, list[str], set[str]]]] = {
    "tag_inference": [
        ("hybrid", ["variant=hybrid"]),
        ("tag_inference", ["variant=tag_inference"]),
        ("tag_inference, fallback none", ["variant=tag_inference", "stage.tag_boost.fallback=none"]),
        ("tag_inference, suite tags only", ["variant=tag_inference", "stage.keyword_tags.enabled=false"]),
        ("tag_inference_topics", ["variant=tag_inference_topics", "+suite.topics=true"], {"beam"}),
    ],
    "decay": [
        ("hybrid", ["variant=hybrid"]),
        ("decay (replay + prune)", ["variant=decay"]),
        ("decay, no prune", ["variant=decay", "stage.importance_prune.enabled=false"]),
        (
            "recency only (30 d)",
            ["variant=decay", "stage.importance_prune.enabled=false", "stage.decay.access=none"],
        ),
        (
            "recency only (365 d)",
            [
                "variant=decay",
                "stage.importance_prune.enabled=false",
                "stage.decay.access=none",
                "stage.decay.half_life_days.default=365",
            ],
        ),
    ],
    "tiering": [
        ("hybrid", ["variant=hybrid"]),
        ("tiering", ["variant=tiering"]),
        ("tiering, observations only", ["variant=tiering", "stage.tiered.high_order=false"]),
        ("tiering, RRF inside each tier", ["variant=tiering", "stage.tiered.ranking=tier"]),
        ("tiering, no strength x confidence", ["variant=tiering", "stage.fusion.factors=false"]),
        ("tiering_advisory (issue-3 policy)", ["variant=tiering_advisory"], {"spark25"}),
    ],
}
NOTES = {
    "tag_inference": (
        "Tags: BEAM messages have none, so `keyword_tags` (ingest) gives every untagged memory its 3 best "
        "tf-idf terms within its conversation (terms in 2+ messages, in at most 10% of them, and not in "
        "more than half of the conversations); spark25 and tiered_synth carry their own tags, which "
        "`only_untagged` keeps as they are. Query tags: hashtags, else whole-word matches of the suite's tag "
        "vocabulary, else (fallback `embedding`) tag names with cosine >= 0.5 to the query (MiniLM). "
        "Boost: score x min(1.5, 1 + 0.15 x overlap)."
    ),
    "decay": (
        "Recency = floor + (1 - floor) exp(-age / half_life) (floor 0.3, half_life 30 days unless the row "
        "says otherwise), capped at 1; ICM importance outside the cap (critical 1.0, high 0.8, medium 0.6, "
        "low 0.4; medium/low / (1 + 0.1 x accesses)); unrated memories count as medium in this variant. "
        "Access counts are replayed: each query's top 10 after the decay stage, counted in suite order, "
        "seen by later queries only (AccessLedger). Prune: medium/low under weight 0.3 are dropped. "
        "BEAM's questions ask about the whole conversation, and its knowledge-update and contradiction "
        "evidence names the old statement as well as the new one, so favouring recent messages is expected "
        "to hurt there; each suite's section gives the age of the evidence (generated)."
    ),
    "tiering": (
        "One BM25 + dense index per scope over the searched tiers; each channel's top 50 per tier, RRF "
        "(k=60) "
        "of the capped channels, then per-tier weight (crystal 1.3, lesson/semantic/procedural/insight 1.1), "
        "x1.2 for a stated confidence > 0.85, x strength x confidence (a missing value counts 1.0, which "
        "favours unrated memories over rated ones: see the 'no strength x confidence' row). Deleted and "
        "confidence < 0.3 never indexed. BEAM has observations only, so there the variant measures the "
        "mechanism's overhead and its candidate cap; spark25's insights carry no tier either (all "
        "observations), and the advisory policy row (`tiering_advisory`: pinned / active / archive from "
        "validation counts) is the same mechanism under issue 3's policy. tiered_synth (generated, "
        "`python -m experiments.suites.generators.tiered_synth OUT`) has high-order memories holding "
        "the answers "
        "(grade 2) among 1,000 observations per scope (grade 1), plus deleted and low-confidence decoys."
    ),
}


def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO
        )
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


class Runner:
    """Composes configs like the CLI, caches suites and finished evaluations within one process."""

    def __init__(self, cache_dir: str | None):
        self._suites: dict[str, object] = {}
        self._runs: dict[tuple[str, ...], Evaluation] = {}
        self.cache = CandidateCache(Path(cache_dir)) if cache_dir else None

    def config(self, overrides: Sequence[str]):
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose("config", overrides=[*overrides, "tracking=none", "progress=false"])

    def suite(self, cfg):
        key = OmegaConf.to_yaml(cfg.suite)
        if key not in self._suites:
            loader = OmegaConf.masked_copy(cfg.suite, [k for k in cfg.suite if k not in SUITE_REPORT_KEYS])
            self._suites[key] = instantiate(loader, _convert_="all")
        return self._suites[key]

    def pipeline(self, cfg) -> Pipeline:
        return Pipeline.from_config(list(cfg.variant.stages), cfg.stage, depth=cfg.depth)

    def evaluate(self, overrides: Sequence[str]) -> Evaluation:
        key = tuple(overrides)
        if key not in self._runs:
            cfg = self.config(overrides)
            suite = self.suite(cfg)
            output = self.pipeline(cfg).run(
                suite.memories, suite.queries, suite_hash=suite.content_hash, cache=self.cache, progress=False
            )
            self._runs[key] = evaluate(suite, output, METRICS)
        return self._runs[key]


def _fmt(value: float | None, digits: int = 3) -> str:
    return "–" if value is None or (isinstance(value, float) and np.isnan(value)) else f"{value:.{digits}f}"


def rows_for(variant: str, suite: str) -> list[tuple[str, list[str]]]:
    return [(r[0], r[1]) for r in ROWS[variant] if len(r) == 2 or suite in r[2]]


def overall_table(runs: dict[str, Evaluation], stages: Sequence[str]) -> str:
    names = list(runs)
    frames = {n: e.per_query[~e.per_query["abstention"]] for n, e in runs.items()}
    stats = compare({n: f["nDCG@10"] for n, f in frames.items()}, names[0], seed=0)
    p_holm = holm(stats["p_value"].to_numpy()[1:]) if len(names) > 1 else []
    # Ingest stages run once per suite (the "ingest ms" column), not per query: no column of their own.
    stages = [s for s in stages if any(f"ms.{s}" in e.per_query for e in runs.values())]
    header = ["row", *METRICS, "Δ nDCG@10", "p (Holm)", "W/T/L", "latency p50 ms", "p95 ms"]
    header += [f"{s} ms p50" for s in stages] + ["ingest ms (once)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for i, name in enumerate(names):
        e, row = runs[name], stats.loc[name] if name in stats.index else stats.iloc[i]
        cells = [name, *[_fmt(e.metrics["overall"][m]) for m in METRICS]]
        if i == 0:
            cells += ["baseline", "", ""]
        else:
            cells += [
                f"{row['delta']:+.3f}",
                _fmt(float(p_holm[i - 1])),
                f"{int(row['wins'])}/{int(row['ties'])}/{int(row['losses'])}",
            ]
        cells += [
            _fmt(e.metrics["overall"]["latency_ms_p50"], 1),
            _fmt(e.metrics["overall"]["latency_ms_p95"], 1),
        ]
        for s in stages:
            col = f"ms.{s}"
            cells.append(_fmt(float(e.per_query[col].median()), 2) if col in e.per_query else "–")
        cells.append(_fmt(e.metrics.get("build_ms", {}).get("ingest"), 0))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def reading(runs: dict[str, Evaluation]) -> str:
    """One generated sentence per row: significant gain, significant loss, or no detectable change."""
    names = list(runs)
    frames = {n: e.per_query[~e.per_query["abstention"]] for n, e in runs.items()}
    stats = compare({n: f["nDCG@10"] for n, f in frames.items()}, names[0], seed=0)
    p_holm = holm(stats["p_value"].to_numpy()[1:]) if len(names) > 1 else []
    out = []
    for i, name in enumerate(names[1:]):
        delta, p = float(stats.iloc[i + 1]["delta"]), float(p_holm[i])
        verdict = (
            "no detectable change"
            if p >= 0.05
            else ("significantly better" if delta > 0 else "significantly worse")
        )
        out.append(f"{name}: {verdict} (nDCG@10 {delta:+.3f} vs {names[0]}, Holm p = {p:.3f}).")
    return " ".join(out)


def label_table(runs: dict[str, Evaluation], label: str, metric: str) -> str:
    values = {n: e.metrics["by_label"].get(label, {}) for n, e in runs.items()}
    groups = sorted({g for v in values.values() for g in v})
    header = [label, "n", *runs]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    base = next(iter(values.values()))
    for g in groups:
        n = base.get(g, {}).get("n_answerable", 0)
        if not n:
            continue  # abstention-only groups have no relevance metric
        lines.append(
            "| " + " | ".join([g, str(n), *[_fmt(values[r].get(g, {}).get(metric)) for r in runs]]) + " |"
        )
    return "\n".join(lines)


def tier_cost(runner: Runner, repeats: int) -> str:
    """Per-query retrieval time (channels + fusion, no prefix cache), high-order tiers on vs off."""
    rows = [
        ("hybrid (bm25 + dense + rrf)", ["suite=tiered_synth", "variant=hybrid"]),
        (
            "tiering, observations only",
            ["suite=tiered_synth", "variant=tiering", "stage.tiered.high_order=false"],
        ),
        ("tiering, all tiers", ["suite=tiered_synth", "variant=tiering"]),
    ]
    configs = {name: runner.config(overrides) for name, overrides in rows}
    suite = runner.suite(next(iter(configs.values())))
    per_run: dict[str, list[list[float]]] = {name: [] for name in configs}
    for _ in range(repeats):  # interleaved, so a burst of load from others hits every pipeline alike
        for name, cfg in configs.items():
            out = runner.pipeline(cfg).run(suite.memories, suite.queries, progress=False)
            per_run[name].append([r.latency_ms for r in out.ranked])
    results = {}
    for name, runs in per_run.items():
        times = np.array(runs)
        # Per query, the fastest repeat is the intrinsic cost (others' load only ever adds time);
        # the median repeat is shown too.
        fastest, median = times.min(axis=0), np.median(times, axis=0)
        results[name] = (
            float(np.mean(fastest)),
            float(np.percentile(fastest, 50)),
            float(np.percentile(fastest, 95)),
            float(np.mean(median)),
        )
    obs, full = results[rows[1][0]], results[rows[2][0]]
    encode = query_encoding_ms(runner, [q.text for q in suite.queries[:50]])
    n_obs = sum(m.tier == "observation" for m in suite.memories)
    n_high = len(suite.memories) - n_obs
    scopes = len({m.scope_key for m in suite.memories})
    lines = [
        f"Workload: tiered_synth, {scopes} scopes x {n_obs // scopes:,} observations, {n_high} high-order "
        f"memories in all, {len(suite.queries)} queries; per-query time = channel search + fusion over "
        f"{repeats} interleaved runs, prefix cache off, query embeddings from the disk cache.",
        "",
        "| pipeline | mean ms (fastest repeat) | p50 ms | p95 ms | mean ms (median repeat) |",
        "|---|---|---|---|---|",
        *[f"| {n} | {a:.3f} | {b:.3f} | {c:.3f} | {d:.3f} |" for n, (a, b, c, d) in results.items()],
        "",
        f"Searching the high-order tiers costs **{100 * (full[0] / obs[0] - 1):+.1f}%** mean time per query "
        f"({100 * (full[1] / obs[1] - 1):+.1f}% at the median query; {100 * (full[3] / obs[3] - 1):+.1f}% "
        "on the median repeats) against observations only (target: under +10%).",
        "",
        f"A live system also embeds each query (here read from the disk cache): MiniLM takes {encode:.1f} ms "
        f"per query (median, batch of 1, one torch thread, this machine). Counting it, the high-order "
        "tiers add "
        f"**{100 * (full[0] - obs[0]) / (obs[0] + encode):+.2f}%** to the mean query time.",
    ]
    return "\n".join(lines)


def query_encoding_ms(runner: Runner, texts: Sequence[str]) -> float:
    """Median time to embed one query with the configured bi-encoder, bypassing the cache.

    On one torch thread: on this shared 2-core machine two threads contend with other jobs and time
    swings by 10x; one thread gives a stable, conservative (slower than idle) figure.
    """
    import torch

    from retrieval.encoder import load_sentence_transformer

    encoder = instantiate(runner.config(["suite=tiered_synth"]).encoder, _convert_="all")
    model = load_sentence_transformer(encoder.path, encoder.device)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model.encode(texts[:2], show_progress_bar=False)  # warm-up
        times = []
        for text in texts:
            started = time.perf_counter()
            model.encode([text], normalize_embeddings=True, show_progress_bar=False)
            times.append((time.perf_counter() - started) * 1000)
    finally:
        torch.set_num_threads(threads)
    return float(np.median(times))


def evidence_age(suite) -> str:
    """Median age in days (query now - created_at) of relevant memories and of all in-scope memories."""
    from retrieval.decay import epoch_days

    created = {m.id: epoch_days(m.created_at) for m in suite.memories}
    by_scope: dict[str, list[float]] = {}
    for m in suite.memories:
        by_scope.setdefault(m.scope_key, []).append(created[m.id])
    relevant, everything = [], []
    for q in suite.queries:
        now = epoch_days(q.now)
        relevant += [now - created[mid] for mid, grade in suite.qrels.get(q.id, {}).items() if grade > 0]
        everything += [now - c for c in by_scope.get(q.scope_key, [])]
    relevant, everything = np.array(relevant), np.array(everything)
    if not np.isfinite(relevant).any():
        return "Evidence age: the suite has no dates on queries or memories (no decay applies)."
    return (
        f"Evidence age at query time (generated): median {np.nanmedian(relevant):.0f} days for relevant "
        f"memories, {np.nanmedian(everything):.0f} days for all memories in the query's scope."
    )


def report(runner: Runner, variant: str, suites: Sequence[str], command: str, repeats: int) -> str:
    stages = {
        "tag_inference": ["keyword_tags", "tag_boost"],
        "decay": ["decay", "importance_prune"],
        "tiering": ["tiered", "tier_fusion"],
    }[variant]
    parts = [
        f"# Stage report: `{variant}`",
        "",
        f"Generated by `{command}` (commit {git_commit()}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC). "
        "Do not edit by hand.",
        "",
        NOTES[variant],
        "",
        "Each row re-runs as `python -m experiments.run <suite> <overrides> tracking=none`; rows:",
        "",
        *[
            f"- {row[0]}: `{' '.join(row[1])}`"
            + (f" ({', '.join(sorted(row[2]))} only)" if len(row) > 2 else "")
            for row in ROWS[variant]
        ],
        "",
        "Δ nDCG@10, p and W/T/L are paired per query against the first row (sign-flip randomization test, "
        "Holm across the rows of a suite). Latency is per query (channels + fusion + rank stages, query "
        "embeddings from the disk cache, no candidate cache), on a shared 2-core machine: indicative only.",
    ]
    for suite_name in suites:
        runs = {
            name: runner.evaluate([SUITES[suite_name], *ov]) for name, ov in rows_for(variant, suite_name)
        }
        first = next(iter(runs.values()))
        label = "ability" if "ability" in first.metrics["by_label"] else "category"
        summary = first.metrics.get("suite", {})
        parts += [
            "",
            f"## {suite_name}" + (f" ({summary.get('memories')} memories)" if summary else ""),
            "",
            overall_table(runs, stages),
            "",
            "Reading (generated): " + reading(runs),
            "",
            *(
                [evidence_age(runner.suite(runner.config([SUITES[suite_name]]))), ""]
                if variant == "decay"
                else []
            ),
            f"nDCG@10 per {label}:",
            "",
            label_table(runs, label, "nDCG@10"),
            "",
            f"P@5 per {label}:",
            "",
            label_table(runs, label, "P@5"),
        ]
    if variant == "tiering":
        parts += ["", "## Cost of searching high-order tiers", "", tier_cost(runner, repeats)]
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variants", nargs="+", default=list(ROWS), choices=list(ROWS))
    parser.add_argument("--suites", nargs="+", default=list(SUITES), choices=list(SUITES))
    parser.add_argument("--out", default="reports/stages")
    parser.add_argument("--repeats", type=int, default=7, help="repeats of the tier cost benchmark")
    parser.add_argument(
        "--candidate-cache", default=None, help="folder of a candidate cache (faster; latency then stale)"
    )
    args = parser.parse_args(argv)
    command = "python -m experiments.stage_reports " + " ".join(
        [f"--variants {' '.join(args.variants)}", f"--suites {' '.join(args.suites)}"]
    )
    runner = Runner(args.candidate_cache)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for variant in args.variants:
        started = time.perf_counter()
        text = report(runner, variant, args.suites, command, args.repeats)
        (out / f"{variant}.md").write_text(text, encoding="utf-8")
        print(f"wrote {out / f'{variant}.md'} in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
