"""Shared fixtures: the real BEAM data beside the checkout, a generated BEAM-format suite, and a tiny
two-scope suite.

The fast tier needs nothing outside the repository: a test that asks for the real BEAM data
(`beam_100k`, `beam_suite`) is in the slow tier, marked here, so `make test-fast` passes without
../shared. Fast tests of the BEAM format read `beam_synth_dir`, written by the project's generator.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.configure.setup import setup
from experiments.suites.suite import Suite
from tests.support import BEAM_DIR, LOCOMO, tiny_suite

# The stage nodes and resolvers, as every entry point sets them up: for tests that compose with Hydra's
# own loader (compose_config sets them up itself).
setup()

# Fixtures reading benchmark data from ../shared: a test using one is slow (the fast tier needs nothing
# outside the repository).
REAL_BEAM_FIXTURES = frozenset({"beam_100k", "beam_suite", "locomo_file"})


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: the mark must already be there
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if REAL_BEAM_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    # The long tests first, each file's in their order: the short ones then fill the workers' last
    # minutes, so a run does not end waiting on one long test while the other worker is idle (Makefile).
    items.sort(key=lambda item: not any(item.get_closest_marker(m) for m in ("slow", "integration")))


@pytest.fixture(scope="session")
def beam_synth_dir(tmp_path_factory) -> Path:
    """Two generated conversations in BEAM's folder layout (experiments/suites/generators/beam_synth.py)."""
    from experiments.suites.generators.beam_synth import generate

    out = tmp_path_factory.mktemp("beam_synth")
    generate(out, n_conversations=2, messages_per_conversation=120, seed=0)
    return out


@pytest.fixture(scope="session")
def beam_100k() -> Path:
    path = BEAM_DIR / "100K"
    if not path.is_dir():  # a missing dataset is a failure, never a silent skip
        pytest.fail(f"BEAM data not found at {path}; set MEMEVAL_BEAM_DIR to the folder holding 100K/")
    return path


@pytest.fixture(scope="session")
def beam_suite(beam_100k):
    from experiments.suites.beam import load_beam

    return load_beam(beam_100k)


@pytest.fixture
def tiny() -> Suite:
    return tiny_suite()


@pytest.fixture(scope="session")
def locomo_file() -> Path:
    if not LOCOMO.is_file():  # a missing dataset is a failure, never a silent skip
        pytest.fail(f"LoCoMo data not found at {LOCOMO}")
    return LOCOMO


@pytest.fixture(autouse=True)
def _a_process_memo_of_its_own():
    """Each test starts with an empty process memo (retrieval.reuse.process_memo): the jobs of one
    multirun share it, and a pytest worker is one process for many tests, so another test's candidates
    would answer this one's first job (its latency then not measured)."""
    from retrieval.reuse import process_memo

    process_memo.cache_clear()
    yield


@pytest.fixture(autouse=True)
def _statistics_warnings_said_afresh():
    """Each test hears the statistics' once-per-process warnings (statistics.warn_once) afresh."""
    from experiments.evaluate.statistics import _WARNED

    _WARNED.clear()
    yield
