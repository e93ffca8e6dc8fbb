"""A sweep whose jobs a finished run answered says so on the console, whatever the launcher (issue 41: a
SLURM sweep whose jobs were all skipped printed nothing; their lines were in .submitit/)."""

from __future__ import annotations

import json

from hydra.utils import instantiate
from omegaconf import OmegaConf

from experiments.configure.compose import compose_config


def _sweep(tmp_path, skipped: int, ran: int):
    for i in range(skipped + ran):
        (tmp_path / str(i) / ".hydra").mkdir(parents=True)
        note = "skipped.json" if i < skipped else "metrics.json"
        (tmp_path / str(i) / note).write_text(json.dumps({}))
    (tmp_path / ".submitit").mkdir()  # not a job
    return OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}, "overrides": {"task": []}}})


def _callback():
    """The callback as conf/config.yaml wires it into every memeval-run sweep."""
    cfg = compose_config(["tracking=none"], hydra_node=True)
    return instantiate(cfg.hydra.callbacks.skipped_jobs)


def test_a_sweep_whose_jobs_were_all_skipped_says_so(tmp_path, capsys):
    _callback().on_multirun_end(_sweep(tmp_path, skipped=3, ran=0))
    said = capsys.readouterr().out
    assert said.startswith("all 3 jobs were skipped") and "0/skipped.json" in said and "resume=false" in said


def test_some_skipped_are_counted_and_none_skipped_says_nothing(tmp_path, capsys):
    _callback().on_multirun_end(_sweep(tmp_path / "a", skipped=1, ran=2))
    assert capsys.readouterr().out.startswith("1 of 3 jobs were skipped")
    _callback().on_multirun_end(_sweep(tmp_path / "b", skipped=0, ran=2))
    assert capsys.readouterr().out == ""
