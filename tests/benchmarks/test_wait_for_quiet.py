"""Benchmarks first wait (bounded) for a quiet machine, then measure either way and say which
(experiments/benchmarks/pipeline.py `wait_for_quiet`, `wait_note`)."""

from __future__ import annotations

import time

from experiments.benchmarks.pipeline import wait_for_quiet, wait_note


def _loads(*values: float):
    """A load average source that reads `values` in turn (the last one from then on)."""
    seen = list(values)

    def load() -> tuple[float, float, float]:
        value = seen.pop(0) if len(seen) > 1 else seen[0]
        return (value, value, value)

    return load


def test_a_quiet_machine_is_measured_at_once_and_the_report_says_nothing():
    started = time.monotonic()
    wait = wait_for_quiet(300, below=1.0, load=_loads(0.4))
    assert time.monotonic() - started < 1.0
    assert wait["quiet"] and wait["waited_s"] == 0 and wait["load_1min"] == 0.4
    assert wait_note(wait) == ""


def test_it_waits_until_the_load_falls(capsys):
    wait = wait_for_quiet(30, below=1.0, poll_s=0.05, load=_loads(3.0, 2.5, 0.8))
    assert wait["quiet"] and wait["load_1min"] == 0.8 and 0.05 <= wait["waited_s"] < 30
    assert capsys.readouterr().out.count("waiting for a quiet machine: 1-minute load") == 2
    assert "(reached; load 0.80 when measuring began)" in wait_note(wait)


def test_the_wait_is_bounded_and_a_busy_machine_is_measured_anyway():
    started = time.monotonic()
    wait = wait_for_quiet(0.3, below=1.0, poll_s=0.05, load=_loads(5.0))
    assert 0.3 <= time.monotonic() - started < 5
    assert not wait["quiet"] and wait["load_1min"] == 5.0
    assert "not reached: measured anyway; load 5.00" in wait_note(wait)


def test_no_wait_asked_means_no_wait_and_no_note():
    wait = wait_for_quiet(0, below=1.0, load=_loads(9.0))
    assert not wait["quiet"] and wait["waited_s"] < 1
    assert wait_note(wait) == ""


def test_the_default_threshold_is_half_the_cores():
    import os

    wait = wait_for_quiet(0, load=_loads(0.0))
    assert wait["threshold"] == len(os.sched_getaffinity(0)) / 2
