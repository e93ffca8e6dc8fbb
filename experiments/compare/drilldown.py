"""The report's per-query drill-down: for the queries a run wins or loses most on against the baseline
(and any query asked for by id), the query text, its relevant memories, and each run's top k with
relevance marks and the score columns that put each memory there.

Reads what every run directory holds (`ranking.csv`, experiments.run_folder.ranking) and the memory and
query texts from the suite the runs were made on (loaded from the baseline run's config and checked
against its content hash; without it, ids and scores are still shown). Every id and text is data: the
blocks hold it as table cells or `md()` text, invisible and direction-changing characters are shown as
⟨U+XXXX⟩, and long texts are cut with a mark that says how much was left out.
"""

from __future__ import annotations

import difflib
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from experiments.compare.analysis import Comparison, biggest_changes
from experiments.compare.render import Block, Heading, Paragraph, Table, code, md
from experiments.run_folder.ranking import FIXED
from experiments.suites.load import load_suite
from experiments.track.finished_runs import RunError, RunRecord, higher_is_better

QUERY_CHARS = 400  # a query's text is cut after this many characters
MEMORY_CHARS = 220  # a memory's text in a table cell


@dataclass(frozen=True)
class DrilldownOptions:
    """`n` biggest wins and `n` biggest losses per non-baseline run on the primary metric, plus `queries`."""

    n: int = 3
    queries: tuple[str, ...] = ()


DEFAULT_DRILLDOWN = DrilldownOptions()


@dataclass(frozen=True)
class SuiteTexts:
    """What the drill-down shows from the suite: texts by id, the judgements and the labels."""

    queries: Mapping[str, str]
    memories: Mapping[str, str]
    qrels: Mapping[str, Mapping[str, int]]


def visible(text: object) -> str:
    """Text with every control, format (zero-width, bidi override) and separator character but the plain
    space shown as ⟨U+XXXX⟩: two ids that differ only there look different, and nothing reorders the page.
    Line breaks and tabs become spaces (a table cell is one line)."""
    out = []
    for ch in str(text):
        if ch in "\n\t\r":
            out.append(" ")
        elif ch != " " and unicodedata.category(ch)[0] in "CZ":
            out.append(f"⟨U+{ord(ch):04X}⟩")
        else:
            out.append(ch)
    return "".join(out)


def clip(text: str, limit: int) -> str:
    """At most `limit` characters (whitespace runs collapsed), then how many more there were."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else f"{flat[:limit].rstrip()} … [+{len(flat) - limit} chars]"


def suite_texts(run: RunRecord) -> tuple[SuiteTexts | None, str]:
    """The suite of `run`, loaded from its recorded config: (texts, "") or (None, why not)."""
    if not run.config.get("suite"):
        return None, f"the run {code(run.source)} recorded no config to find its suite from"
    try:
        suite = load_suite(run.config["suite"])
    except Exception as err:  # missing data on this machine, a loader error: the section still stands
        return None, f"its suite could not be loaded here ({md(type(err).__name__)}: {md(str(err)[:200])})"
    if suite.content_hash != run.suite_hash:
        return None, (
            f"the suite at its recorded path now has content hash {code(suite.content_hash[:12])}, not the "
            f"runs' {code(run.suite_hash[:12])}: its texts would not be the ones ranked"
        )
    return SuiteTexts(
        {q.id: q.text for q in suite.queries}, {m.id: m.text for m in suite.memories}, suite.qrels
    ), ""


def pick_queries(comp: Comparison, options: DrilldownOptions) -> dict[str, list[tuple[str, str, float]]]:
    """query id -> why it is shown: (run, "gain" | "loss" | "asked for", Δ primary), in report order."""
    picked: dict[str, list[tuple[str, str, float]]] = {}
    known = list(comp.run_by_label[comp.baseline].per_query.index)
    unknown = [q for q in options.queries if q not in set(known)]
    if unknown:
        hints = {q: difflib.get_close_matches(q, known, n=3) for q in unknown}
        said = "; ".join(f"{q!r}" + (f" (close: {hints[q]})" if hints[q] else "") for q in unknown)
        raise RunError(f"drill-down: no query with id {said} in the runs")
    for query in options.queries:
        picked.setdefault(query, []).append(("", "asked for", np.nan))
    better = higher_is_better(comp.primary)
    for run in (lab for lab in comp.labels if lab != comp.baseline):
        changes = biggest_changes(comp, comp.primary, run, options.n)
        for query, delta in changes["delta"].items():
            kind = "gain" if (delta > 0) == better else "loss"
            picked.setdefault(str(query), []).append((run, kind, float(delta)))
    return picked


def _mark(grade: object) -> str:
    if grade is None or pd.isna(grade):
        return ""
    grade = int(grade)
    return ("✓" if grade == 1 else f"✓{grade}") if grade > 0 else "✗"


def _number(value: object) -> str:
    if isinstance(value, float | int | np.number) and not isinstance(value, bool):
        return "–" if not np.isfinite(value) else f"{value:.4g}"
    return "–" if value is None or value == "" or pd.isna(value) else visible(clip(str(value), 40))


def _top(run: RunRecord, query: str, k: int, texts: SuiteTexts | None) -> pd.DataFrame:
    rows = run.ranking[(run.ranking["query_id"] == query) & (run.ranking["rank"] <= k)]
    scores = [c for c in run.ranking.columns[len(FIXED) :] if rows[c].notna().any()]
    table = pd.DataFrame(index=pd.Index(rows["rank"].astype(int), name="rank"))
    table["memory"] = [visible(m) for m in rows["memory_id"]]
    table["rel"] = [_mark(g) for g in rows["relevance"]]
    for column in scores:
        table[column] = [_number(v) for v in rows[column]]
    if texts is not None:
        table["text"] = [visible(clip(texts.memories.get(m, ""), MEMORY_CHARS)) for m in rows["memory_id"]]
    return table


def _ranks(run: RunRecord, query: str) -> dict[str, int]:
    rows = run.ranking[run.ranking["query_id"] == query]
    return dict(zip(rows["memory_id"], rows["rank"].astype(int), strict=True))


def drilldown_blocks(
    comp: Comparison, options: DrilldownOptions, texts: SuiteTexts | None, why_no_texts: str = ""
) -> list[Block]:
    picked = pick_queries(comp, options)
    primary, base = comp.primary, comp.baseline
    cutoff = primary.rpartition("@")[2]  # the primary metric's cutoff, else the suite's k
    k = (
        int(cutoff)
        if cutoff.isdigit()
        else int(comp.run_by_label[base].summary.get("suite", {}).get("k") or 10)
    )
    blocks: list[Block] = [Heading("Per-query drill-down")]
    without = [lab for lab, r in comp.run_by_label.items() if r.ranking is None]
    blocks.append(
        Paragraph(
            f"For each run, the {options.n} queries it gained most and lost most on against the baseline "
            f"**{md(base)}** ({md(primary)})"
            + (f", and the {len(options.queries)} asked for by id" if options.queries else "")
            + f": the query, its relevant memories with the rank each run gave them, and the top {k} of the "
            "baseline and of each run it is shown for. rel: ✓ relevant (✓2: grade 2), ✗ judged not "
            "relevant, empty: unjudged. The score columns are the pipeline's own (`score` ranks; the others "
            "are each channel's and stage's contribution, as `ranking.csv` of the run keeps them). Texts "
            "are cut at a mark that says how many characters were left out; ⟨U+XXXX⟩ is an invisible "
            "character in the data."
        )
    )
    if texts is None:
        blocks.append(Paragraph(f"Texts are not shown: {why_no_texts}."))
    if without:
        blocks.append(
            Paragraph(
                "No `ranking.csv` (made before runs recorded their top ranks; re-run to add it): "
                + ", ".join(f"**{md(lab)}**" for lab in without)
                + "."
            )
        )
    if not picked:
        return blocks + [Paragraph("No query changed against the baseline, and none was asked for.")]
    per_query = comp.run_by_label[base].per_query
    labels = [c for c in per_query.columns if c.startswith("label.")]
    for query, reasons in picked.items():
        values = comp.values[primary]
        shown = [base] + list(dict.fromkeys(r for r, _, _ in reasons if r))
        if any(kind == "asked for" for _, kind, _ in reasons):
            shown = list(comp.labels)
        shown = [base] + [lab for lab in shown if lab != base]
        tags = ", ".join(f"{md(c.removeprefix('label.'))} {code(per_query.at[query, c])}" for c in labels)
        blocks.append(Heading(f"Query {code(visible(query))}" + (f" ({tags})" if tags else ""), 3))
        why = []
        for run, kind, delta in reasons:
            why.append("asked for" if not run else f"{kind} of **{md(run)}** (Δ {md(primary)} {delta:+.3f})")
        scores = (
            ", ".join(f"{md(lab)} {values.at[query, lab]:.3f}" for lab in shown)
            if query in values.index
            else "an abstention query: nothing is relevant"
        )
        blocks.append(Paragraph(f"Shown as: {'; '.join(why)}. {md(primary)}: {scores}."))
        if texts is not None:
            text = visible(clip(texts.queries.get(query, ""), QUERY_CHARS))
            blocks.append(Paragraph(f"Query text: {md(text)}"))
        blocks += _relevant(comp, query, shown, texts)
        for lab in shown:
            run = comp.run_by_label[lab]
            if run.ranking is None:
                continue
            top = _top(run, query, k, texts)
            title = f"Top {k} of **{md(lab)}**" + (" (baseline)" if lab == base else "")
            blocks.append(Paragraph(title + (":" if len(top) else ": nothing retrieved.")))
            if len(top):
                blocks.append(Table(top, "rank", text_columns=("text",)))
    return blocks


def _relevant(comp: Comparison, query: str, shown: Sequence[str], texts: SuiteTexts | None) -> list[Block]:
    base = comp.run_by_label[comp.baseline]
    if texts is not None:
        judged = {m: g for m, g in texts.qrels.get(query, {}).items() if g > 0}
    elif base.ranking is not None:  # without the suite: the relevant memories the baseline ranked
        rows = base.ranking[(base.ranking["query_id"] == query) & (base.ranking["relevance"] > 0)]
        judged = dict(zip(rows["memory_id"], rows["relevance"].astype(int), strict=True))
    else:
        judged = {}
    if not judged:
        return [Paragraph("Relevant memories: none.")]
    table = pd.DataFrame(index=pd.Index([visible(m) for m in judged], name="memory"))
    table["grade"] = [str(g) for g in judged.values()]
    for lab in shown:
        run = comp.run_by_label[lab]
        ranks = _ranks(run, query) if run.ranking is not None else {}
        table[f"rank in {lab}"] = [str(ranks[m]) if m in ranks else "–" for m in judged]
    if texts is not None:
        table["text"] = [visible(clip(texts.memories.get(m, ""), MEMORY_CHARS)) for m in judged]
    where = "" if texts is not None else " (those the baseline ranked; the suite is not loaded)"
    return [
        Paragraph(f"Relevant memories{where}; – : not in the run's kept ranks (below its depth):"),
        Table(table, "memory", text_columns=("text",)),
    ]
