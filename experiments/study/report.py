"""A study's report: the comparison report (experiments.compare.build_report) plus the plan's sections.

Last step of a study: `Experiment` returned the compared rows; this writes reports/<study>/report.md,
index.html and the plots, with the command that produced them, and the plan's named sections (plug-ins
from experiments.study.sections) after the generic tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from experiments.compare.analysis import Comparison
from experiments.compare.assemble import build_report
from experiments.compare.render import Block, Code, Heading, Paragraph, Table, code, md, write
from experiments.study.experiment import StudyResult, SuiteResults
from experiments.study.plan import Section
from experiments.study.sections import SectionContext, resolve_section


def _section(result: StudyResult, section: Section):
    function = resolve_section(section.name)
    stats = result.plan.stats

    def blocks(comp: Comparison, sig: pd.DataFrame) -> list[Block]:
        ctx = SectionContext(
            comp, sig, comp.primary, stats.alpha, stats.seed, dict(section.options), study=result
        )
        return function(ctx)

    return blocks


def write_report(
    result: StudyResult | SuiteResults, out_dir: str | Path, *, commands: Sequence[str] = ()
) -> Path:
    """reports/<study>/report.md + index.html (+ PNGs) for a finished study; returns the folder.

    A study of several suites writes one report per suite into <study>/<suite id>/ and, at the top,
    the primary metric of every row on every suite with links to them."""
    if isinstance(result, SuiteResults):
        return _write_suites(result, Path(out_dir), commands)
    plan, out = result.plan, Path(out_dir)
    about = plan.description.strip().rstrip(".")
    description = f"study plan `{plan.name}`" + (f": {about}" if about else "")
    build_report(
        result.runs,
        out,
        title=plan.title,
        baseline=result.baseline,
        metrics=plan.metrics,
        primary=plan.primary,
        label=plan.label,
        test=plan.stats.test,
        alpha=plan.stats.alpha,
        seed=plan.stats.seed,
        unit=plan.stats.unit,
        references=[
            result.labels[[r.name for r in plan.rows].index(b)]
            for b in plan.references
            if b in [r.name for r in plan.rows]
        ],
        commands=commands,
        source=description,
        keep_repeats=True,
        sections=[_section(result, s) for s in plan.sections],
        drilldown=plan.drilldown if plan.drilldown.n or plan.drilldown.queries else None,
    )
    return out


def _write_suites(result: SuiteResults, out: Path, commands: Sequence[str]) -> Path:
    plan = result.plan
    for suite_id, sub in result.results:
        write_report(sub, out / suite_id, commands=commands)
    primary = plan.primary or result.results[0][1].primary  # the first suite's when the plan names none
    table = pd.DataFrame(
        {suite_id: sub.table()[primary] for suite_id, sub in result.results},
        index=[r.name for r in plan.rows],
    ).fillna("–")
    links = ", ".join(f"[{md(i)}]({i}/report.md)" for i, _ in result.results)
    blocks: list[Block] = [
        Heading(md(plan.title), 1),
        Paragraph(md(plan.description) if plan.description else f"Study plan {code(plan.name)}."),
        Heading("Commands"),
        Code("\n".join(commands) or "(not recorded)"),
        Heading(f"{md(primary)} per suite"),
        Table(table, "row"),
        Paragraph(
            f"Mean {md(primary)} over each suite's answerable queries; † / ‡ significantly better / worse "
            f"than the baseline **{md(plan.baseline)}** on that suite (Holm across that suite's report; "
            "– : the row does not run on that suite). One report per suite, with every metric, CIs, "
            f"per-label tables, wins and losses and the plan's sections: {links}."
        ),
    ]
    write(blocks, out, plan.title)
    return out
