"""A study's report: the comparison report (experiments.report.build_report) plus the plan's sections.

Last step of a study: `Experiment` returned the compared rows; this writes reports/<study>/report.md,
index.html and the plots, with the command that produced them, and the plan's named sections (plug-ins
from experiments.study.sections) after the generic tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from experiments.report.analysis import Comparison
from experiments.report.build import build_report
from experiments.report.render import Block
from experiments.study.experiment import StudyResult
from experiments.study.plan import Section
from experiments.study.sections import SectionContext, resolve_section


def _section(result: StudyResult, section: Section):
    function = resolve_section(section.name)
    stats = result.plan.stats

    def blocks(comp: Comparison, sig: pd.DataFrame) -> list[Block]:
        ctx = SectionContext(comp, sig, comp.primary, stats.alpha, stats.seed, dict(section.options))
        return function(ctx)

    return blocks


def write_report(result: StudyResult, out_dir: str | Path, *, commands: Sequence[str] = ()) -> Path:
    """reports/<study>/report.md + index.html (+ PNGs) for a finished study; returns the folder."""
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
        commands=commands,
        source=description,
        keep_repeats=True,
        sections=[_section(result, s) for s in plan.sections],
        drilldown=plan.drilldown if plan.drilldown.n or plan.drilldown.queries else None,
    )
    return out
