"""Assemble a comparison report from finished runs: analysis -> figures -> blocks -> report.md + index.html.

The last step of the data flow: `experiments.track.finished_runs` reads the runs, `analysis` computes the
tables, `plots` draws them, `render` writes reports/<name>/.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.compare import analysis, plots
from experiments.compare.drilldown import DEFAULT_DRILLDOWN, DrilldownOptions, drilldown_blocks, suite_texts
from experiments.compare.frontier_section import frontier_blocks
from experiments.compare.render import (
    Block,
    Code,
    Heading,
    Image,
    Paragraph,
    Table,
    code,
    md,
    safe_filename,
    write,
)
from experiments.evaluate.statistics import TEST_NAMES
from experiments.track.finished_runs import RunRecord, higher_is_better


def _f(value: float, digits: int = 3) -> str:
    return "–" if value is None or not np.isfinite(value) else f"{value:.{digits}f}"


def _p(value: float) -> str:
    return "–" if not np.isfinite(value) else f"{value:.2g}"


def _suite_provenance(run: RunRecord) -> list[Block]:
    """What the suite's loader stated (experiments/suites: granularity, dataset release, errata), if any."""
    tags = run.tags
    said = [
        f"{name} {code(tags[key])}"
        for name, key in (("Granularity", "granularity"), ("dataset", "dataset_release"))
        if tags.get(key)
    ]
    if tags.get("dataset_sha256"):
        said.append(f"sha256 {code(tags['dataset_sha256'][:16])}")
    if not said and not tags.get("errata"):
        return []
    text = "; ".join(said) + "."
    if tags.get("errata"):
        applied = json.loads(tags.get("errata_applied") or "[]")
        listed = "; ".join(f"{code(e['question'])} {code(e['field'])} ({md(e['source'])})" for e in applied)
        text += f" Errata: {md(tags['errata'])}: {listed or 'none'}."
    return [Paragraph(text)]


def _partial_blocks(comp: analysis.Comparison) -> list[Block]:
    """The first thing a report says when a run in it is a partial merge (memeval-merge --allow-partial)."""
    partial = [(lab, r) for lab, r in zip(comp.labels, comp.runs, strict=True) if r.partial is not None]
    if not partial:
        return []
    return [
        Paragraph(
            f"**Partial: {len(partial)} run(s) merge some shards only**; their statistics cover those "
            "shards' queries, not the whole suite: "
            + "; ".join(f"{md(lab)} ({md(r.partial_text)})" for lab, r in partial)
            + "."
        )
    ]


def build_report(
    runs: Sequence[RunRecord],
    out_dir: Path,
    *,
    title: str,
    baseline: str | None = None,
    metrics: Sequence[str] | None = None,
    primary: str | None = None,
    label: str | None = None,
    test: str = "randomization",
    alpha: float = 0.05,
    seed: int = 0,
    unit: str = "auto",
    references: Sequence[str] = (),
    commands: Sequence[str] = (),
    source: str = "",
    keep_repeats: bool = False,
    sections: Sequence[Callable[[analysis.Comparison, pd.DataFrame], list[Block]]] = (),
    missing: Sequence[str] = (),
    drilldown: DrilldownOptions | None = DEFAULT_DRILLDOWN,
) -> analysis.Comparison:
    """`sections`: extra blocks (a study's named report sections), each from the comparison and its
    significance table, placed after the per-query wins and losses. `primary`: default the suite's
    (`primary` in its suite config), else the first metric. `drilldown`: which queries the per-query
    drill-down at the end shows (None: no drill-down). `unit`: what the statistics resample (auto |
    cluster | query, experiments.evaluate.statistics). `references`: more rows every run is compared against,
    besides the baseline (one Holm family covers all the comparisons)."""
    dropped: list[RunRecord] = []
    if not keep_repeats:
        runs, dropped = analysis.drop_repeats(runs)
    comp = analysis.build_comparison(runs, baseline=baseline, metrics=metrics, label=label, primary=primary)
    primary = comp.primary
    drilled: list[Block] = []  # first: a query asked for that is not in the runs fails before any work
    if drilldown is not None:
        has_ranking = any(r.ranking is not None for r in comp.runs)
        texts, why = suite_texts(comp.run_by_label[comp.baseline]) if has_ranking else (None, "")
        drilled = drilldown_blocks(comp, drilldown, texts, why)
    refs = [  # a run label, or a variant's first run (as the baseline is chosen)
        analysis._pick_baseline(comp.runs, comp.labels, comp.sweep_values, r) for r in references
    ]
    refs = [r for r in dict.fromkeys(refs) if r != comp.baseline]
    family = analysis.comparisons(comp, refs, test=test, alpha=alpha, seed=seed, unit=unit)
    sig = family[family["reference"] == comp.baseline].drop(columns="reference").reset_index(drop=True)
    sig.attrs.update(family.attrs)
    per_label = analysis.by_label(comp, primary, alpha=alpha, seed=seed, unit=unit)
    label_name = (comp.label_column or "label").removeprefix("label.")
    base_run = comp.run_by_label[comp.baseline]
    n = len(comp.values[primary])
    # Text from runs, configs and the command line is data: md() / code() keep it from becoming markup.
    label_md, primary_md, baseline_md = md(label_name), md(primary), md(comp.baseline)

    blocks: list[Block] = [
        Heading(md(title), 1),
        *_partial_blocks(comp),
        Paragraph(
            f"Generated by `memeval-report` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC from {len(comp.runs)} "
            f"runs{f' ({md(source)})' if source else ''}. Suite {code(base_run.suite_name)} (content hash "
            f"{code(base_run.suite_hash[:12])}), {n} answerable queries. Baseline: **{baseline_md}**."
        ),
        *_suite_provenance(base_run),
        Heading("Commands"),
        Code("\n".join(commands) or "(not recorded)"),
    ]
    if missing:
        blocks.append(
            Paragraph(
                f"**Incomplete: {len(missing)} run(s) asked for are not in this report** (failed or killed "
                "jobs, or reused runs that are no longer finished): "
                + "; ".join(code(m) for m in missing[:20])
                + (f" and {len(missing) - 20} more." if len(missing) > 20 else ".")
            )
        )
    if dropped:
        partial_dropped = any(r.partial is not None for r in dropped)
        blocks.append(
            Paragraph(
                (
                    f"{len(dropped)} run(s) with the same suite and config as another were left out (a whole "
                    "run is kept over a partial merge, whichever came later, then the latest"
                    if partial_dropped
                    else f"{len(dropped)} earlier run(s) with the same suite and config as a later one were "
                    "left out (the latest is kept"
                )
                + "; `--keep-repeats` keeps all): "
                + ", ".join(code(r.source) for r in dropped[:10])
                + (f" and {len(dropped) - 10} more." if len(dropped) > 10 else ".")
            )
        )
    if comp.sweep_param:
        swept = ", ".join(f"{v:g}" for v in comp.sweep_values if np.isfinite(v))
        blocks.append(Paragraph(f"The runs vary {code(comp.sweep_param)}: {swept}."))

    blocks += [Heading("Variants × metrics"), Table(_means_table(comp, sig), "run", markup=True)]
    blocks.append(
        Paragraph(
            f"Mean over the {n} answerable queries (abstention queries have no relevant memory and are "
            f"reported apart by `experiments.run`). **Bold**: best per metric (lowest for noise). "
            f"† significantly better, "
            f"‡ significantly worse than the baseline **{baseline_md}**: {TEST_NAMES[test]} on "
            f"{_units_text(sig)}, seed {seed}; Holm correction across all {sig.attrs['comparisons']} "
            f"comparisons in this report ({md(sig.attrs['family'])}); α = {alpha}."
            + (
                " **†q / ‡q: query-level significance**: the statistics fell back to the query level "
                f"({md(sig.attrs['unit_reason'])}), so these marks count the questions as independent."
                if fell_back(sig)
                else ""
            )
        )
    )
    blocks += _statistics_blocks(comp, family, primary, alpha)
    blocks += [
        Heading(f"{primary_md}: difference from the baseline"),
        Table(_delta_table(comp, sig, primary), "run"),
    ]
    resampled = (
        f"whole clusters: the {sig.attrs['n_clusters']} conversations, each with all its queries"
        if sig.attrs["unit"] == "cluster"
        else "queries"
    )
    blocks.append(
        Paragraph(
            (
                "95% CIs by conversation, calibrated for few clusters (docs/metrics.md): of a mean, the CR2 "
                "t-interval with Bell-McCaffrey degrees of freedom; of a difference, the inverted cluster "
                "sign-flip test (it excludes 0 exactly when the test rejects, and is unbounded when no "
                f"p-value can get below 0.05). Resampled: {resampled}."
                if sig.attrs["unit"] == "cluster"
                else f"95% CIs are percentile bootstrap intervals (10,000 seeded resamples of {resampled}) "
                "of the mean and of the mean paired difference."
            )
            + " Design effect: the variance of the mean paired "
            "difference with its clustering over the variance were the queries independent (1 at query "
            "level; above 1 the queries of one conversation move together). W/T/L: queries where the run "
            "beats / ties / loses to the baseline."
        )
    )

    if comp.sweep_param and all(np.isfinite(comp.sweep_values)) and len(comp.runs) > 1:
        curves = plots.metric_curves(comp, sig)
        blocks += [
            Heading(f"Metrics vs {code(comp.sweep_param)}"),
            Image("curves.png", curves, "metric curves"),
        ]
        if comp.label_column:
            blocks += [
                Heading(f"{primary_md} per {label_md} vs {code(comp.sweep_param)}"),
                Image(safe_filename(f"curves_by_{label_name}") + ".png",
                      plots.label_curves(comp, per_label, primary), f"{primary} per {label_name}"),
            ]  # fmt: skip
    else:
        blocks.append(
            Paragraph("No single numeric parameter varies across the runs, so there are no curves.")
        )

    if len(comp.runs) > 1:
        blocks += [
            Heading(f"{primary_md} per {label_md}: difference from the baseline"),
            Image("heatmap.png", plots.delta_heatmap(comp, per_label, primary, sig), f"delta {primary}"),
        ]
    blocks += [
        Paragraph(f"Mean {primary_md} per {label_md}:"),
        Table(_label_table(comp, per_label, primary), "run"),
    ]
    tested = int((per_label["run"] != comp.baseline).sum())
    blocks.append(
        Paragraph(
            "† / ‡ (outlined and marked in the heat map): significantly better / worse than the baseline "
            f"in that {label_md}, by the paired randomization test on its queries"
            + (
                " (whole conversations sign-flipped where the cell has several queries per conversation)"
                if sig.attrs["unit"] == "cluster"
                else ""
            )
            + f", Holm across all {tested} ({label_md}, run) cells; α = {alpha}. Few queries per "
            f"{label_md}: only large changes show." + _label_survival(comp, per_label, primary, alpha, seed)
        )
    )

    blocks += _wins_losses(comp, sig, primary)
    for section in sections:
        blocks += section(comp, sig)
    blocks += frontier_blocks(comp)  # quality against latency and tokens (compare/frontier_section.py)
    blocks += [
        Heading("Latency"),
        Table(analysis.latency(comp).map(lambda v: v if isinstance(v, str) else _f(v, 2)), "run"),
        Paragraph(
            "Per-query wall time in ms (retrieval and ranking; index build excluded), p50 and p95 over all "
            "queries, and the median per stage. Measured on a shared 2-core machine while other jobs ran: "
            "compare orders of magnitude, not small differences. A run whose retrieval candidates came from "
            "the prefix cache (`hit`) reports the retrieval-stage times recorded when they were computed, "
            "or near zero inside a sweep's process: time the stages after the cached prefix, not those."
        ),
        Heading("Provenance"),
        Table(analysis.provenance(comp), "run"),
    ]
    blocks += drilled
    write(blocks, out_dir, title)
    return comp


def _label_survival(
    comp: analysis.Comparison, per_label: pd.DataFrame, primary: str, alpha: float, seed: int
) -> str:
    """By cluster: which (label, run) cells the query-level tests called significant, and which stay."""
    if "n_clusters" not in per_label.columns or (per_label["n_clusters"] == per_label["n"]).all():
        return ""
    by_query = analysis.by_label(comp, primary, alpha=alpha, seed=seed, unit="query")
    was = by_query[by_query["significant"]]
    cells = [f"{md(r.run)} in {md(r.label)}" for r in was.itertuples()]
    kept = per_label.set_index(["label", "run"])["significant"]
    stays = [c for c, r in zip(cells, was.itertuples(), strict=True) if kept[(r.label, r.run)]]
    if not cells:
        return " With every question independent, no cell was significant either."
    return (
        f" With every question independent, {len(cells)} cell(s) were significant ({', '.join(cells)}); "
        f"by conversation, {len(stays)} of them stay" + (f" ({', '.join(stays)})." if stays else ".")
    )


def _units_text(sig: pd.DataFrame) -> str:
    if sig.attrs["unit"] == "cluster":
        return (
            f"per-query values with whole clusters sign-flipped (the {sig.attrs['n_clusters']} "
            "conversations: questions about one conversation are not independent)"
        )
    reason = sig.attrs.get("unit_reason")
    return f"per-query values (statistics by query: {md(reason)})" if reason else "per-query values"


def _statistics_blocks(
    comp: analysis.Comparison, family: pd.DataFrame, primary: str, alpha: float
) -> list[Block]:
    """What the clustering changes (the query-level verdicts beside the cluster ones, and which
    survive), and, with several references, every run against each of them."""
    blocks: list[Block] = []
    attrs = family.attrs
    if attrs.get("warning"):
        title = "Few clusters" if attrs["unit"] == "cluster" else "Statistics by query"
        blocks.append(Paragraph(f"**{title}** ({md(attrs['unit_reason'])}): {md(attrs['warning'])}."))
    tested = family[family["run"] != family["reference"]]
    if attrs["unit"] == "cluster":
        rows = tested.assign(
            cell=[f"{md(r.run)} vs {md(r.reference)}, {md(r.metric)}" for r in tested.itertuples()]
        ).set_index("cell")
        table = pd.DataFrame(
            {
                "Δ": [f"{d:+.3f}" for d in rows["delta"]],
                "design effect": [_f(v, 2) for v in rows["design_effect"]],
                "p Holm (queries)": [_p(v) for v in rows["p_holm_query"]],
                "significant (queries)": ["yes" if v else "no" for v in rows["significant_query"]],
                "p Holm (clusters)": [_p(v) for v in rows["p_holm"]],
                "significant (clusters)": ["yes" if v else "no" for v in rows["significant"]],
            },
            index=rows.index,
        )
        was = rows["significant_query"]
        survived = rows.index[was & rows["significant"]]
        lost = rows.index[was & ~rows["significant"]]
        summary = (
            f"Of the {int(was.sum())} differences significant with queries treated as independent, "
            f"{len(survived)} survive clustering"
            + (f" ({', '.join(survived)})" if len(survived) else "")
            + (f"; {len(lost)} do not ({', '.join(lost)})" if len(lost) else "")
            + "."
        )
        c = attrs["n_clusters"]
        below = rows["design_effect"] < 1
        if below.any():
            summary += (
                f" {int(below.sum())} of the {len(rows)} design effects are below 1: the conversations "
                "differ less than the questions within one conversation (each asks a similar mix of "
                "questions), so resampling conversations narrows the intervals rather than widening them."
            )
        summary += (
            f" With {c} clusters an exact sign-flip test cannot give p below 2 / 2^{c} = {2 / 2**c:.2g}, "
            "which bounds what Holm can call significant in a large family."
        )
        blocks += [
            Heading("Clustering: which differences survive"),
            Paragraph(
                f"The statistics of this report resample and sign-flip whole conversations "
                f"({attrs['n_clusters']} clusters), not single questions. Beside them, the same tests "
                "with every question independent (the earlier, query-level verdicts), Holm across the "
                f"same {attrs['comparisons']} comparisons; α = {alpha}. " + summary
            ),
            Table(table, "comparison"),
        ]
    if len(attrs["references"]) > 1:
        rows = tested[tested["metric"] == primary]
        higher = higher_is_better(primary)
        cells = rows.assign(
            text=[
                f"{r.delta:+.3f} [{r.delta_ci_low:+.3f}, {r.delta_ci_high:+.3f}]"
                + ("" if not r.significant else "†" if (r.delta > 0) == higher else "‡")
                for r in rows.itertuples()
            ]
        )
        table = cells.pivot(index="run", columns="reference", values="text").reindex(list(comp.labels))
        table = table[list(attrs["references"])].fillna("–")
        table.columns = [f"vs {c}" for c in table.columns]
        blocks += [
            Heading(f"{md(primary)}: every run against each reference"),
            Table(table, "run"),
            Paragraph(
                f"Δ [95% CI] of {md(primary)} against each reference; † / ‡ significantly better / worse "
                f"after Holm across the whole family ({md(attrs['family'])}); α = {alpha}."
            ),
        ]
    return blocks


def fell_back(sig: pd.DataFrame) -> bool:
    """Whether the statistics fell back to the query level although the suite's queries are clustered
    (one cluster holds them all: `unit_warning`), so a significance mark rests on queries being
    independent, which the suite does not claim (a suite declaring `cluster: query` does)."""
    return sig.attrs.get("unit") == "query" and bool(sig.attrs.get("warning"))


def _mark(better: bool, query_level: bool) -> str:
    """† / ‡, with `q` where the significance is query-level only (`fell_back`)."""
    return ("†" if better else "‡") + ("q" if query_level else "")


def _means_table(comp: analysis.Comparison, sig: pd.DataFrame) -> pd.DataFrame:
    table = pd.DataFrame(index=list(comp.labels))
    for metric in comp.metrics:
        part = sig[sig["metric"] == metric].set_index("run").loc[list(comp.labels)]
        higher = higher_is_better(metric)
        best = part["mean"].max() if higher else part["mean"].min()
        cells = []
        for _, row in part.iterrows():
            text = _f(row["mean"])
            text = f"**{text}**" if np.isclose(row["mean"], best, rtol=0, atol=1e-12) else text
            if row["significant"]:
                text += _mark((row["delta"] > 0) == higher, fell_back(sig))
            cells.append(text)
        table[metric] = cells
    return table


def _label_table(comp: analysis.Comparison, per_label: pd.DataFrame, primary: str) -> pd.DataFrame:
    higher = higher_is_better(primary)
    cells = per_label.assign(
        text=[
            _f(r.mean) + ("" if not r.significant else "†" if (r.delta > 0) == higher else "‡")
            for r in per_label.itertuples()
        ]
    )
    table = cells.pivot(index="run", columns="label", values="text").loc[list(comp.labels)]
    counts = per_label.drop_duplicates("label").set_index("label")["n"]
    table.columns = [f"{c} (n={counts[c]})" for c in table.columns]
    return table


def _delta_table(comp: analysis.Comparison, sig: pd.DataFrame, metric: str) -> pd.DataFrame:
    part = sig[sig["metric"] == metric].set_index("run").loc[list(comp.labels)]
    return pd.DataFrame(
        {
            "mean [95% CI]": [f"{_f(r.mean)} [{_f(r.ci_low)}, {_f(r.ci_high)}]" for r in part.itertuples()],
            "Δ [95% CI]": [
                f"{r.delta:+.3f} [{r.delta_ci_low:+.3f}, {r.delta_ci_high:+.3f}]" for r in part.itertuples()
            ],
            "p": [_p(v) for v in part["p_value"]],
            "p Holm": [_p(v) for v in part["p_holm"]],
            "design effect": [_f(v, 2) for v in part["design_effect"]],
            "W/T/L": [f"{r.wins}/{r.ties}/{r.losses}" for r in part.itertuples()],
        },
        index=part.index,
    )


def _wins_losses(comp: analysis.Comparison, sig: pd.DataFrame, primary: str) -> list[Block]:
    blocks: list[Block] = [Heading("Per-query wins and losses")]
    others = sig[(sig["metric"] == primary) & (sig["run"] != comp.baseline)]
    if others.empty:
        return blocks + [Paragraph("Only one run: nothing to compare.")]
    blocks.append(Image("wins_losses.png", plots.wins_losses(sig, comp, primary), "wins and losses"))
    ascending = not higher_is_better(primary)
    best = str(others.sort_values("mean", ascending=ascending, kind="stable")["run"].iloc[0])
    changes = analysis.biggest_changes(comp, primary, best)
    blocks.append(
        Paragraph(
            f"Queries where the best run on {md(primary)}, **{md(best)}**, changed most against the baseline:"
        )
    )
    if changes.empty:
        return blocks + [Paragraph("No query changed.")]
    formatted = changes.copy()
    for column in ("baseline", "run", "delta"):
        formatted[column] = [f"{v:+.3f}" if column == "delta" else _f(v) for v in changes[column]]
    formatted = formatted.rename(columns={"baseline": comp.baseline, "run": best})
    return blocks + [Table(formatted, "query")]
