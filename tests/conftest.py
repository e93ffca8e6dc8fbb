"""Shared fixtures: the real BEAM data beside the checkout, and a tiny two-scope suite."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.suites.suite import Suite
from tests.support import BEAM_DIR, tiny_suite


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
