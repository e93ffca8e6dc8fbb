"""Studies as configs: a plan (experiments/conf/study/*.yaml) names the rows a study compares, the
suite, the baseline, metrics, statistics and report sections; one call runs it and writes its report.

    python -m experiments.study study=boost_beam100k         # memeval-study study=boost_beam100k

plan.py reads and checks a plan; experiment.py runs its rows through `experiments.run` and compares
them (`Experiment`, the notebook API); report.py writes the report; sections.py holds the registry
of domain report sections (built-in ones in plugins/, a module per domain); cli.py is the Hydra app.
"""

from experiments.study.experiment import Experiment, StudyResult, SuiteResults, run_plan
from experiments.study.plan import PlanError, Row, StudyPlan, load_plan
from experiments.study.report import write_report
from experiments.study.sections import SectionContext, register_section

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
