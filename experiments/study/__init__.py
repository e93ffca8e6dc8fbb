"""Studies as configs: a plan (conf/study/*.yaml) names the rows a study compares, the
suite, the baseline, metrics, statistics and report sections; one call runs it and writes its report.

    python -m experiments.study study=boost_beam100k         # memeval-study study=boost_beam100k

plan.py reads and checks a plan; experiment.py runs its rows through `experiments.run` and compares
them (`Experiment`, the notebook API); report.py writes the report; sections.py holds the registry
of domain report sections (built-in ones in plugins/, a module per domain); cli.py is the Hydra app.
"""

import importlib

# Each name is imported from its module on first use: running and reporting pull in pandas and
# matplotlib, which `memeval-study --help` (cli.py, inside this package) should not wait for.
_HOMES = {
    "Experiment": "experiment",
    "StudyResult": "experiment",
    "SuiteResults": "experiment",
    "run_plan": "experiment",
    "PlanError": "plan",
    "Row": "plan",
    "StudyPlan": "plan",
    "load_plan": "plan",
    "write_report": "report",
    "SectionContext": "sections",
    "register_section": "sections",
}


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)


__all__ = [
    "Experiment",
    "PlanError",
    "Row",
    "SectionContext",
    "StudyPlan",
    "StudyResult",
    "SuiteResults",
    "load_plan",
    "register_section",
    "run_plan",
    "write_report",
]
