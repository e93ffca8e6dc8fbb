"""A sweep says on its console how many of its jobs a finished run answered (resume=auto), whatever the
launcher: under SLURM a job's own `skipped: ...` line goes to `.submitit/`, so a sweep whose every job was
skipped printed nothing at all (issue 41).

Wired in conf/config.yaml (`hydra.callbacks.skipped_jobs`); it reads only the jobs' folders: a job that a
finished run answered leaves `skipped.json` (experiments/run/outputs.py: write_skipped).
"""

from __future__ import annotations

from pathlib import Path

from experiments.track.sweep_end import SweepEndCallback

SKIP_NOTE = "skipped.json"


def skipped_summary(sweep_dir: Path) -> str | None:
    """`all 4 jobs were skipped ...` / `2 of 4 jobs ...`, or None when no job was skipped. A job is a
    folder of the sweep that Hydra set up (its `.hydra/`)."""
    jobs = [d for d in sorted(sweep_dir.iterdir()) if (d / ".hydra").is_dir()] if sweep_dir.is_dir() else []
    skipped = [d for d in jobs if (d / SKIP_NOTE).is_file()]
    if not skipped:
        return None
    share = (
        f"all {len(jobs)} jobs were"
        if len(skipped) == len(jobs)
        else f"{len(skipped)} of {len(jobs)} jobs were"
    )
    return (
        f"{share} skipped: a finished run of the same config and suite answered each "
        f"({', '.join(d.name + '/' + SKIP_NOTE for d in skipped[:5])}{' ...' if len(skipped) > 5 else ''} "
        "name it; resume=false runs them again)"
    )


class SkippedJobsCallback(SweepEndCallback):
    def sweep_ended(self, sweep_dir: Path, overrides: list[str]) -> None:
        said = skipped_summary(sweep_dir)
        if said:
            print(said, flush=True)
