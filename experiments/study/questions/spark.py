"""Report section of the spark25 phases study (conf/study/spark25_phases.yaml).

`spark_phases`: the advisory phases against the plan's targets: per phase and category P@5, noise@5,
nDCG@5, R@5 and p95 latency; overall means with bootstrap 95% CIs; paired randomization tests against
the first phase and against the phase before (Holm within a metric); extra pairs (`compare`); a
leave-one-out table per phase in `ablate` (rows named `<phase>-no_<stage>`); how often each gate's
fallback fired; where the advisory tiers put the relevant insights; and two checks that the stages'
hand-written rules generalise (action-domain rules vs the learner's labels, intent routing vs each
scenario's expected domains).

Metrics come from the rows' finished runs. Latency, fallbacks and tiers come from a live re-run of each
phase (experiments.study.live.rerun: a warm-up pass, then a timed pass without the candidate cache and
with model-score caches off, so a cross-encoder scores live), which also records CPU time and the load
average; query embeddings come from the disk cache, so the time to encode a query is measured apart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from experiments.compare.render import Block, Heading, Paragraph, Table, code
from experiments.evaluate.statistics import bootstrap_ci, compare, holm
from experiments.study.live import query_encoding_ms, rerun, row_settings
from experiments.study.sections import SectionContext, register_section
from experiments.track.finished_runs import RunRecord
from retrieval.stages.action_domain import ActionDomainClassifier
from retrieval.stages.advisory_tiers import AdvisoryTiers
from retrieval.stages.intent_route import IntentRouter

REPORTED = ("P@5", "noise@5", "nDCG@5", "R@5")


def _fmt(value: float | None, digits: int = 3) -> str:
    return "–" if value is None or (isinstance(value, float) and np.isnan(value)) else f"{value:.{digits}f}"


def _answerable(run: RunRecord, metric: str) -> pd.Series:
    return run.answerable()[metric].astype(float)


def paired_table(
    runs: Mapping[str, RunRecord], pairs: Sequence[tuple[str, str]], metrics: Sequence[str], seed: int
) -> pd.DataFrame:
    """Paired tests of each (first, second) pair: Δ = first − second; Holm across the pairs, per metric."""
    rows = []
    for metric in metrics:
        tables = [
            compare({"b": _answerable(runs[b], metric), "a": _answerable(runs[a], metric)}, "b", seed=seed)
            for a, b in pairs
        ]
        adjusted = holm(np.array([t.loc["a", "p_value"] for t in tables]))
        for (a, b), table, p_holm in zip(pairs, tables, adjusted, strict=True):
            r = table.loc["a"]
            rows.append(
                {
                    "metric": metric,
                    "comparison": f"{a} vs {b}",
                    "Δ mean [95% CI]": (
                        f"{r['delta']:+.3f} [{r['delta_ci_low']:+.3f}, {r['delta_ci_high']:+.3f}]"
                    ),
                    "p": f"{r['p_value']:.4f}",
                    "p (Holm)": f"{p_holm:.4f}",
                    "higher/tie/lower": f"{int(r['wins'])}/{int(r['ties'])}/{int(r['losses'])}",
                    "_delta": float(r["delta"]),
                    "_p_holm": float(p_holm),
                }
            )
    return pd.DataFrame(rows)


def _shown(frame: pd.DataFrame, index: str) -> Table:
    return Table(frame[[c for c in frame.columns if not c.startswith("_")]].set_index(index), index)


def fallback_counts(ranked: Sequence, k: int = 5) -> dict[str, int]:
    """Per gate, how many queries' returned top k hold an item the gate's fallback let back."""
    counts: dict[str, int] = {}
    for r in ranked:
        for column, values in r.columns.items():
            if column.endswith("_relaxed"):
                gate = column.removesuffix("_relaxed")
                counts[gate] = counts.get(gate, 0) + int(np.asarray(values[:k], dtype=bool).any())
    return counts


def _target(value: float, rule: str) -> str:
    op, _, bound = str(rule).partition(" ")
    ok = value > float(bound) if op == ">" else value < float(bound)
    return "met" if ok else "not met"


@register_section("spark_phases")
def spark_phases(ctx: SectionContext) -> list[Block]:
    if ctx.study is None:
        return [Heading("spark25 phases"), Paragraph("Needs a study (rows to re-run).")]
    runs = ctx.comparison.run_by_label
    phases = [str(p) for p in ctx.options.get("phases", [])]
    seed = ctx.seed
    live, suite = {}, None
    for phase in phases:
        suite, live[phase] = rerun(ctx.study, phase)
    latency = {
        p: pd.Series(t.latency_ms, index=[r.query_id for r in t.output.ranked]) for p, t in live.items()
    }
    blocks: list[Block] = [Heading("spark25 phases"), Heading("Phases", 3)]
    blocks += [Paragraph(f"{code(p)}: " + " → ".join(row_settings(ctx.study, p).stage_order)) for p in phases]

    overall = {}
    for p in phases:
        cells = {}
        for metric in REPORTED:
            values = _answerable(runs[p], metric).to_numpy()
            low, high = bootstrap_ci(values, seed=seed)
            cells[f"{metric} [95% CI]"] = f"{values.mean():.3f} [{low:.3f}, {high:.3f}]"
        s = live[p].summary()
        cells |= {
            "p50 ms": _fmt(s["p50_ms"], 1),
            "p95 ms": _fmt(s["p95_ms"], 1),
            "CPU ms/query": _fmt(s["cpu_ms_per_query"], 1),
            "load 1 min": _fmt(s["load_1m"], 1),
        }
        overall[p] = cells
    encode = query_encoding_ms(row_settings(ctx.study, phases[0]), [q.text for q in suite.queries])
    blocks += [
        Heading("Overall", 3),
        Table(pd.DataFrame(overall).T, "phase"),
        Paragraph(
            "Means over the answerable scenarios with percentile bootstrap 95% CIs (seed "
            f"{seed}). Latency: per query, the sum of the stage timings, on a live second run of the phase "
            "(no candidate cache, model-score caches off); p50/p95 over all scenarios. CPU ms/query: this "
            "process's user + system CPU time of that run over its queries; load: the 1-minute load average "
            "at its start (the 2 cores are shared with other jobs, so latencies are noisy). Query embeddings "
            f"come from the disk cache; a live system encodes each query: {np.percentile(encode, 50):.1f} ms "
            f"p50, {np.percentile(encode, 95):.1f} ms p95 here, to add to every phase's latency."
        ),
    ]

    targets = {str(k): str(v) for k, v in (ctx.options.get("targets") or {}).items()}
    if targets:
        table = {}
        for p in phases:
            row = {}
            for key, rule in targets.items():
                value = (
                    live[p].summary()["p95_ms"] if key == "p95_ms" else float(runs[p].summary["overall"][key])
                )
                row[f"{key} ({rule})"] = f"{value:.{1 if key == 'p95_ms' else 3}f} {_target(value, rule)}"
            table[p] = row
        blocks += [Heading("Against the plan's targets", 3), Table(pd.DataFrame(table).T, "phase")]

    rows = []
    for p in phases:
        frame = runs[p].per_query.copy()
        frame["live_ms"] = latency[p].reindex(frame.index)
        answerable = frame[~frame["abstention"].astype(bool)]
        column = ctx.comparison.label_column or "label.category"
        groups = [("**all**", answerable, frame)] + [
            (str(c), answerable[answerable[column] == c], frame[frame[column] == c])
            for c in sorted(frame[column].dropna().unique())
        ]
        for cat, part, every in groups:
            rows.append(
                {"phase": p, "category": cat, "n": str(len(part))}
                | {m: _fmt(part[m].mean()) for m in REPORTED}
                | {"p95 ms": _fmt(float(np.percentile(every["live_ms"], 95)), 1)}
            )
    blocks += [
        Heading("Per category", 3),
        Table(pd.DataFrame(rows).set_index("phase"), "phase", markup=True),
    ]

    pairs = [(phases[i], phases[0]) for i in range(1, len(phases))]
    pairs += [(phases[i], phases[i - 1]) for i in range(2, len(phases))]
    blocks += [
        Heading("Paired comparisons (randomization test, answerable scenarios, Holm within a metric)", 3),
        Paragraph(
            "Δ = first minus second; for noise@5 lower is better. higher/tie/lower counts the scenarios "
            "where the first scored above, equal to, or below the second."
        ),
        _shown(paired_table(runs, pairs, REPORTED, seed), "metric"),
    ]
    for a, b in ctx.options.get("compare", []) or []:
        blocks += [
            Heading(f"{a} vs {b}", 3),
            _shown(paired_table(runs, [(str(a), str(b))], REPORTED, seed), "metric"),
        ]

    blocks += [Heading("Tiers", 3), Paragraph(_tier_check(suite, live[phases[-1]].output, phases[-1]))]
    blocks += [
        Heading("Fallbacks", 3),
        Paragraph(
            f"Queries (of {len(suite.queries)}) whose returned top 5 holds an item a gate's fallback let "
            "back (fewer than `min_results` passed, or for intent routing fewer than `min_pool`): "
            + "; ".join(f"{code(p)}: {fallback_counts(live[p].output.ranked) or 'none'}" for p in phases[1:])
            + "."
        ),
    ]
    for phase in ctx.options.get("ablate", []) or []:
        blocks += _ablation(runs, str(phase), seed, ctx.alpha)
    blocks += _rules_check(suite)
    return blocks


def _ablation(runs: Mapping[str, RunRecord], phase: str, seed: int, alpha: float) -> list[Block]:
    prefix = f"{phase}-no_"
    ablated = [name for name in runs if name.startswith(prefix)]
    if not ablated:
        return []
    # Δ = full phase minus the phase without the stage: positive Δ P@5 means the stage helps.
    table = paired_table(runs, [(phase, name) for name in ablated], REPORTED, seed)
    table["stage"] = [c.split(" vs ")[1].removeprefix(prefix) for c in table["comparison"]]
    cells = {
        stage: {
            f"Δ {m} [95% CI] (p Holm)": f"{r['Δ mean [95% CI]']} ({r['_p_holm']:.3f})"
            for m, r in ((row["metric"], row) for _, row in part.iterrows())
        }
        for stage, part in table.groupby("stage", sort=False)
    }
    findings = []
    for stage, part in table.groupby("stage", sort=False):
        verdicts = []
        for _, r in part[part["metric"].isin(["P@5", "noise@5"])].iterrows():
            good = r["_delta"] < 0 if r["metric"] == "noise@5" else r["_delta"] > 0
            word = (
                ("helps" if good else "hurts")
                if r["_p_holm"] < alpha and r["_delta"] != 0
                else "no significant effect"
            )
            verdicts.append(f"{r['metric']} {word} (Δ {r['_delta']:+.3f}, Holm p {r['_p_holm']:.3f})")
        findings.append(f"{code(stage)}: " + "; ".join(verdicts))
    return [
        Heading(f"Leave-one-out on {code(phase)}", 3),
        Paragraph(
            "Each stage switched off in turn (`stage.<name>.enabled=false`, bit-identical to its absence). "
            "Δ = full phase minus the phase without the stage: a positive Δ P@5 means the stage helps, a "
            "negative Δ noise@5 means it removes noise. Holm across the stages, within a metric."
        ),
        Table(pd.DataFrame(cells).T, "stage switched off"),
        *(Paragraph(f) for f in findings),
    ]


def _tier_check(suite, output, phase: str) -> str:
    tiers = {m.id: m.annotations["search_tier"] for m in AdvisoryTiers()(suite.memories)}
    relevant = {mid for judged in suite.qrels.values() for mid, grade in judged.items() if grade > 0}
    escalated = sum("archive" in set(r.columns.get("tier", ())) for r in output.ranked)
    counts = "; ".join(
        f"{t}: {sum(v == t for v in tiers.values())} insights, {sum(tiers[m] == t for m in relevant)} judged "
        "relevant to some scenario"
        for t in ("pinned", "active", "archive")
    )
    return (
        f"The advisory policy's tiers (default policy): {counts}. Queries whose list reached the archive "
        f"tier in {code(phase)}: {escalated} of {len(output.ranked)}."
    )


def _rules_check(suite) -> list[Block]:
    classifier = ActionDomainClassifier()
    labelled = [m for m in suite.memories if m.metadata.get("action_domain")]
    pairs = pd.DataFrame(
        {
            "label": [m.metadata["action_domain"] for m in labelled],
            "rules": [classifier.classify(m)[0] for m in labelled],
        }
    )
    agreement = float((pairs["label"] == pairs["rules"]).mean()) if len(pairs) else float("nan")
    confusion = pd.crosstab(pairs["label"], pairs["rules"]).astype(str)
    router = IntentRouter()
    routing = {}
    for q in suite.queries:
        allowed = router.allowed_domains(q)
        expected = set(q.expected_domains)
        routing[q.id] = {
            "category": str(q.labels.get("category")),
            "intent family": str(router.intent(q)),
            "expected domains allowed": "all domains"
            if allowed is None
            else f"{len(expected & allowed)}/{len(expected)}",
            "also allowed": "–" if allowed is None else ", ".join(sorted(allowed - expected)) or "none",
        }
    return [
        Heading("Do the rules generalise?", 3),
        Paragraph(
            f"Action-domain rules vs the learner's own label, on the {len(pairs)} insights that carry one "
            f"(label hidden from the rules): agreement {agreement:.3f}."
        ),
        Table(confusion, "label \\ rules"),
        Paragraph("Intent routing vs each scenario's `expected_domains` (`general` is always allowed):"),
        Table(pd.DataFrame(routing).T, "scenario"),
    ]
