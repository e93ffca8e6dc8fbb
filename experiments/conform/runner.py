"""Run the conformance checks against one adapter and write the run folder.

    conformance.json  the verdict: each check's id, what it asks, pass / fail / not_applicable, the reason,
                      what it measured and its evidence (every exchange: request, ids returned, the service's
                      time, measured or replayed); `run` holds what describes this execution only (mode,
                      wall time, the service's identity): a replay gives the same file but `run`
    conformance.md    the same as a table
    cassette.jsonl    every exchange (when the run recorded into its folder): `system.mode=replay
                      system.cassette=<it>` judges again with no service

Exit codes (experiments/exit_codes.py): 0 every applicable check passed, 1 one failed, 2 cannot judge (the
service down at start, a replay the cassette cannot answer; a bad config is Hydra's exit 2).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.conform.check import Check, Outcome, check_classes, failed
from experiments.conform.probe import OperationFailed, Probe, Recorder, Settings
from experiments.exit_codes import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK
from experiments.systems.cassette import Cassette
from experiments.systems.protocol import MemorySystem

FORMAT = "memeval-conformance/1"
MARK = {"pass": "pass", "fail": "**FAIL**", "not_applicable": "n/a"}


class CannotJudge(RuntimeError):
    """The suite could not be judged (exit 2): a bad selection, an existing cassette to record into."""


def select(only: Sequence[str] | None) -> list[type[Check]]:
    """The checks to run: all, or those `only` names (an unknown id is an error listing the known)."""
    checks = list(check_classes())
    if not only:
        return checks
    known = {c.id: c for c in checks}
    unknown = [name for name in only if name not in known]
    if unknown:
        raise CannotJudge(f"conform.checks: unknown check(s) {unknown}; known: {', '.join(known)}")
    return [known[name] for name in only]


def open_cassette(path: Path, *, replay: bool) -> Cassette:
    """The cassette: a replay's must exist; a recording starts a new one (never mixed with another run's)."""
    if not replay and path.exists() and path.stat().st_size > 0:
        raise CannotJudge(
            f"{path}: the cassette exists; memeval-conform records a new one (remove it, or replay it with "
            "system.mode=replay)"
        )
    return Cassette(path, writable=not replay)


def run_check(cls: type[Check], recorder: Recorder, settings: Settings) -> dict[str, Any]:
    """One check's entry of conformance.json (a failed operation it needed fails it, naming it)."""
    probe = Probe(recorder, cls.id, settings)
    try:
        outcome = cls().run(probe)
    except OperationFailed as err:
        outcome = failed(
            f"the service failed a call the check needs ({err.exchange.step}): {err.exchange.error}"
        )
    return entry(cls, outcome, probe)


def entry(cls: type[Check], outcome: Outcome, probe: Probe) -> dict[str, Any]:
    exchanges = sorted(probe.exchanges, key=lambda e: e.step)  # threads append in any order
    return {
        "id": cls.id,
        "group": cls.group,
        "asks": cls.asks(),
        "status": outcome.status,
        "reason": outcome.reason,
        "details": outcome.details,
        "evidence": [e.evidence() for e in exchanges],
    }


def run_suite(
    system: MemorySystem,
    cassette: Cassette,
    *,
    replay: bool,
    settings: Settings,
    only: Sequence[str] | None = None,
    system_name: str = "",
) -> dict[str, Any]:
    """Every selected check against `system` (checked available first, unless replayed): conformance.json's
    content. Raises LiveSystemError when the service is down, ReplayMiss when the cassette lacks a call."""
    checks = select(only)
    started = time.perf_counter()
    if not replay:
        check = getattr(system, "check_available", None)
        if callable(check):
            check()
    recorder = Recorder(system, cassette, replay=replay)
    results = [run_check(cls, recorder, settings) for cls in checks]
    counts = {status: sum(r["status"] == status for r in results) for status in MARK}
    identity = getattr(system, "service_identity", None)
    return {
        "format": FORMAT,
        "system": system_name,
        "adapter": f"{type(system).__module__}.{type(system).__qualname__}",
        "settings": _fields(settings),
        "verdict": "fail" if counts["fail"] else "pass",
        "counts": counts,
        "checks": results,
        "run": {
            "mode": "replay" if replay else "record",
            "timings": "replayed from the cassette" if replay else "measured",
            "wall_s": round(time.perf_counter() - started, 3),
            "cassette": str(cassette.path),
            "cassette_sha256": cassette.digest,
            "service": identity() if callable(identity) and not replay else {},
        },
    }


def _fields(settings: Settings) -> dict[str, Any]:
    return {name: getattr(settings, name) for name in settings.__dataclass_fields__}


def exit_code(report: dict[str, Any]) -> int:
    return EXIT_FAILED if report["counts"]["fail"] else EXIT_OK


def markdown(report: dict[str, Any]) -> str:
    """conformance.md: the verdict, then one row per check."""
    counts = report["counts"]
    lines = [
        f"# Conformance: {report['system'] or report['adapter']}",
        "",
        f"{counts['pass']} pass, {counts['fail']} fail, {counts['not_applicable']} not applicable "
        f"({len(report['checks'])} checks; timings {report['run']['timings']}).",
        "",
        "| check | result | why |",
        "|---|---|---|",
    ]
    for check in report["checks"]:
        why = (check["reason"] or "").replace("|", "\\|").replace("\n", " ")
        lines.append(f"| `{check['id']}` | {MARK[check['status']]} | {why[:300]} |")
    return "\n".join(lines) + "\n"


def write_folder(run_dir: Path, report: dict[str, Any]) -> None:
    """conformance.md, then conformance.json, each written whole (a temporary file, renamed)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    for name, text in (
        ("conformance.md", markdown(report)),
        ("conformance.json", json.dumps(report, indent=2, ensure_ascii=False, allow_nan=False) + "\n"),
    ):
        tmp = run_dir / f".{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, run_dir / name)


def verdict_only(report: dict[str, Any]) -> dict[str, Any]:
    """conformance.json without what describes one execution (`run`, each exchange's timing label): what a
    replay must reproduce."""
    out = {k: v for k, v in report.items() if k != "run"}
    out["checks"] = [
        {**c, "evidence": [{k: v for k, v in e.items() if k != "timing"} for e in c["evidence"]]}
        for c in report["checks"]
    ]
    return out


__all__ = [
    "EXIT_BAD_INPUT",
    "CannotJudge",
    "exit_code",
    "markdown",
    "run_suite",
    "verdict_only",
    "write_folder",
]
