"""`memeval-conform`: behavioural checks of a memory service, as a Hydra app (conf/conform.yaml).

    memeval-conform system=memeval_serve system.base_url=http://127.0.0.1:8000
    memeval-conform system=memeval_serve system.mode=replay system.cassette=RUN/cassette.jsonl

The system is composed as `memeval-run variant=system` composes it (conf/system/), and its adapter built
the same way; every exchange goes through a cassette (the run folder's cassette.jsonl, or
`system.cassette`), so `system.mode=replay` judges again with no service. Exit 0 / 1 / 2: runner.py.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from experiments.configure.app import Job, hydra_app
from experiments.configure.app_settings import ConformSettings
from experiments.configure.compose import answer_help
from experiments.configure.setup import setup
from experiments.exit_codes import EXIT_BAD_INPUT, console_script


def settings_of(conform_node: Mapping[str, Any]) -> Any:
    """The `conform` node as Settings, each value of its field's type (else CannotJudge naming the key)."""
    import dataclasses

    from experiments.conform.probe import Settings
    from experiments.conform.runner import CannotJudge

    node = {k: v for k, v in conform_node.items() if k != "checks"}
    for field in dataclasses.fields(Settings):
        kind = {"int": int, "float": (int, float), "str": str, "bool": bool}[str(field.type)]
        value = node.get(field.name, field.default)
        if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
            raise CannotJudge(f"conform.{field.name}: expected {field.type}, got {value!r}")
    return Settings(**node)


def conform(settings: ConformSettings, run_dir: Path, choice: str) -> int:
    """Build the adapter, run the checks, write the folder, log to MLflow; the exit code."""
    from hydra.utils import instantiate

    from experiments.conform.runner import exit_code, open_cassette, run_suite, select, write_folder

    checks = settings.conform.get("checks")
    select(checks)  # an unknown check id, a mistyped setting: named before anything is opened
    probe_settings = settings_of(settings.conform)
    replay = settings.system.get("mode") == "replay"
    if replay and not settings.system.get("cassette"):
        raise _cannot_judge("system.mode=replay needs the recorded cassette: system.cassette=PATH")
    cassette = open_cassette(
        Path(settings.system.get("cassette") or run_dir / "cassette.jsonl"), replay=replay
    )
    system = instantiate(settings.system["adapter"], _convert_="all")
    started_ms = int(time.time() * 1000)
    try:
        report = run_suite(
            system, cassette, replay=replay, settings=probe_settings, only=checks, system_name=choice
        )
    finally:
        if not replay:
            system.close()
    write_folder(run_dir, report)
    counts = report["counts"]
    print(
        f"{choice}: {counts['pass']} pass, {counts['fail']} fail, {counts['not_applicable']} not applicable"
    )
    for check in report["checks"]:
        if check["status"] == "fail":
            print(f"  FAIL {check['id']}: {check['reason'][:200]}")
    print(f"wrote {run_dir}/conformance.json and conformance.md")
    if settings.tracking.enabled:
        _track(settings, run_dir, choice, report, started_ms)
    return exit_code(report)


def _track(
    settings: ConformSettings, run_dir: Path, choice: str, report: dict[str, Any], started_ms: int
) -> None:
    from hydra.utils import instantiate

    from experiments.track.mlflow_tracker import provenance_tags, service_tags

    tracker = instantiate(settings.tracking.tracker)
    metrics = {f"conform.{status}": float(n) for status, n in report["counts"].items()}
    for check in report["checks"]:
        if check["status"] != "not_applicable":
            metrics[f"check.{check['id']}"] = float(check["status"] == "pass")
        for name, value in (check["details"].get("timings") or {}).items():
            if isinstance(value, int | float):
                metrics[f"timing.{check['id']}.{name}"] = float(value)
    tags = {
        **provenance_tags("memeval-conform"),
        **service_tags(settings.system, choice),
        "memeval.conform.verdict": report["verdict"],
        "memeval.conform.timings": report["run"]["timings"],
    }
    params = {"system": choice, "adapter": report["adapter"], "mode": report["run"]["mode"]}
    params.update({f"conform.{k}": str(v) for k, v in report["settings"].items()})
    tracker.log(
        run_name=f"conform-{choice}",
        params=params,
        metrics=metrics,
        tags=tags,
        run_dir=run_dir,
        config_text=settings.config_text,
        started_ms=started_ms,
    )


def _cannot_judge(message: str) -> Exception:
    from experiments.conform.runner import CannotJudge

    return CannotJudge(message)


def _discard(_err: BaseException, job: Job) -> None:
    """A config that does not resolve leaves no folder (console_script says why, exit 2)."""
    from experiments.run.outputs import discard_if_unused

    discard_if_unused(job.output_dir)


@hydra_app("conform", ConformSettings.from_config, refused=_discard)
def run_app(settings: ConformSettings, job: Job) -> None:
    from experiments.conform.probe import ReplayMiss
    from experiments.conform.runner import CannotJudge
    from experiments.systems.protocol import LiveSystemError
    from experiments.track.mlflow_tracker import TrackingError

    choice = job.choices.get("system") or "system"
    run_dir = job.output_dir
    from experiments.run.outputs import discard_if_unused

    try:
        code = conform(settings, run_dir, choice)
    except (CannotJudge, ReplayMiss, LiveSystemError, TrackingError) as err:
        print(f"error: cannot judge: {err}", file=sys.stderr)
        discard_if_unused(run_dir)  # a refusal leaves no folder (a verdict written is kept)
        sys.exit(EXIT_BAD_INPUT)
    except BaseException:  # a config that does not build (console_script says which, exit 2)
        discard_if_unused(run_dir)
        raise
    sys.exit(code)


@console_script
def main() -> None:
    """`memeval-conform`: the Hydra app, or its help text at once (without Hydra's slow group listing)."""
    if not answer_help("conform", sys.argv[1:]):
        setup()
        run_app()


if __name__ == "__main__":
    main()
