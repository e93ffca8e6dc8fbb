"""The suite options every conversation loader (BEAM, LoCoMo, LongMemEval) takes, applied in one order.

    loader (a memory per turn) -> errata (experiments/suites/errata.py) -> granularity (granularity.py)
        -> dataset identity tags (identity.py) -> check_suite

Errata come first because they name turns; granularity then maps the corrected evidence up.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from experiments.evaluate.metrics.official import PROTOCOLS
from experiments.suites.errata import apply_errata
from experiments.suites.granularity import regroup
from experiments.suites.identity import dataset_tags
from experiments.suites.suite import Problem, Suite, SuiteError, check_suite
from retrieval.types import Memory


def check_protocol(
    protocol: str, granularity: str, errata: str | Path | None, *, memeval_only: tuple[str, str] | None = None
) -> None:
    """SuiteError for a `suite.protocol` that is not one, or for what upstream does not do under `official`:
    round granularity, errata, and the loader's own `memeval_only` problem (field, why)."""
    problem = None
    if protocol not in PROTOCOLS:
        problem = ("suite.protocol", f"must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
    elif protocol == "official" and granularity == "round":
        problem = ("suite.granularity", "upstream retrieves turns or sessions: round is protocol=memeval's")
    elif protocol == "official" and errata:
        problem = (
            "suite.errata",
            "upstream scores its answer key as it is: errata need suite.protocol=memeval",
        )
    elif protocol == "official" and memeval_only:
        problem = memeval_only
    if problem is not None:
        raise SuiteError([Problem("suite config", None, *problem)])


def finish(
    suite: Suite,
    *,
    granularity: str,
    session_of: Callable[[Memory], str],
    errata: str | Path | None,
    files: Sequence[tuple[str, str | Path]],
) -> Suite:
    """`suite` (a memory per turn) with its errata applied, regrouped, tagged with its files, and checked."""
    if errata:
        suite = apply_errata(suite, errata)
    suite = regroup(suite, granularity, session_of)
    suite = replace(suite, tags={**suite.tags, **dataset_tags(files)})
    check_suite(suite, files={"suite": "suite config (suite.k)"})
    return suite
