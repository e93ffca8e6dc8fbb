"""A deliberately broken memory service (tests/broken_memory_service.py) fails exactly the checks its
break breaks and passes every other: each check can fail, and its failure names its evidence."""

from __future__ import annotations

import pytest

from experiments.conform.check import check_classes
from tests.broken_memory_service import Breaks, BrokenMemoryService
from tests.conform.conform_support import conform_run, statuses

ISOLATION = {c.id for c in check_classes() if c.group == "isolation"}
BROKEN = {  # the break -> the checks it must fail (and only these)
    "pool_scopes": ISOLATION | {"failure.unknown_scope_empty", "failure.concurrent_clients"},
    "ignore_reset": {"lifecycle.reset_empties_scope"},
    "duplicate_reingest": {"lifecycle.reingest_no_duplicates"},
    "over_k": {"ranking.k_honoured"},
    "nan_scores": {"ranking.scores_finite"},
    "slow_visibility": {"lifecycle.visible_within"},
}
VALUES = {"slow_visibility": 0.6}  # seconds, against conform.visible_within_s=0.3


def test_the_honest_service_passes_every_check(tmp_path):
    with BrokenMemoryService() as service:
        code, report = conform_run(tmp_path, f"system.base_url={service.url}")
    assert statuses(report, "pass") == {c.id for c in check_classes()} and code == 0
    assert len(report["checks"]) >= 20


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_a_broken_service_fails_exactly_the_checks_it_breaks(broken, tmp_path):
    with BrokenMemoryService(Breaks(**{broken: VALUES.get(broken, True)})) as service:
        code, report = conform_run(tmp_path, f"system.base_url={service.url}", "conform.visible_within_s=0.3")
    assert statuses(report, "fail") == BROKEN[broken]
    assert code == 1 and statuses(report, "not_applicable") == set()
    for check in report["checks"]:
        if check["status"] == "fail":  # each failure names the exchange that shows it
            steps = {e["step"] for e in check["evidence"]}
            assert any(step in check["reason"] for step in steps), check["reason"]
