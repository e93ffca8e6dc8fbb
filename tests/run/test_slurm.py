"""A real SLURM cluster: `.ci/slurm-up` starts (or finds) a single-node cluster on 127.0.0.1 (munged,
slurmdbd, slurmctld, slurmd), a 4-shard BEAM 100K bm25 sweep goes through Hydra's submitit launcher as
4 SLURM jobs, the sweep merges them (experiments/merge.py), and the merged run is the
unsharded run: run.trec, qrels.tsv and ranking.csv byte for byte, per_query.csv and metrics.json but for
timings. MLflow holds one sweep parent, the merged run below it and the 4 shard jobs below that. A job
cancelled on the cluster fails the sweep naming its state (submitit reads it from the accounting), and a
job larger than the node is refused at submission.

Integration tier; needs root (packages, daemons). Where SLURM cannot start, the tests fail with
slurm-up's own error and never skip: CI must run them (.ci/run starts the cluster before the tests, so
slurm-up here only checks it, in seconds, and stops it at the end). A developer: `make slurm-up`
(docs/slurm.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import mlflow
import pytest

from experiments.merge import MERGED_TAG
from tests.run.test_merge import assert_same_run, check_boost_sweep_in_4_shards, env
from tests.support import REPO, as_written, newest_sweep, page_commands
from tests.sweep_support import job_dirs, write_tiny_suite

pytestmark = [pytest.mark.slow, pytest.mark.integration]

SHARDS = 4


@pytest.fixture(scope="module")
def slurm() -> str:
    """The cluster up (installed and started if it is not): slurm-up's log, which ends with `sinfo`'s line."""
    if os.geteuid() != 0:
        pytest.fail("the SLURM test needs root: .ci/slurm-up installs slurm-wlm and starts its daemons")
    try:
        up = subprocess.run(
            [str(REPO / ".ci" / "slurm-up")], capture_output=True, text=True, timeout=600, check=False
        )
    except subprocess.TimeoutExpired as err:
        pytest.fail(f".ci/slurm-up did not finish in 600 s:\n{err.stdout}\n{err.stderr}")
    if up.returncode != 0:
        pytest.fail(f".ci/slurm-up failed (exit {up.returncode}):\n{up.stdout}\n{up.stderr}")
    return up.stdout


def tiny_sweep(tmp_path, *overrides: str) -> list[str]:
    """A bm25 sweep of the tiny suite through the cluster, untracked: the command line."""
    suite = write_tiny_suite(tmp_path)
    command = [sys.executable, "-m", "experiments.run", "-m", "hydra/launcher=slurm_localhost", "suite=jsonl"]
    command += [f"suite.path={suite}", "variant=bm25", "tracking=none", "progress=false"]
    command += [f"cache_dir={tmp_path / 'cache'}", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    return [*command, *overrides]


def submitted_arrays(folder) -> set[str]:
    """The SLURM job arrays submitit submitted: its folder holds one `<array>_<task>` folder a task."""
    return {p.name.split("_")[0] for p in folder.iterdir() if p.is_dir()} if folder.is_dir() else set()


def page_lines() -> list[str]:
    """docs/slurm.md's commands for the single-node cluster, one a line as a user pastes them."""
    return page_commands("slurm.md", "### Submitting to it")


def test_the_pages_spark25_sweep_and_its_squeue_sacct_line_run_as_written(slurm, tmp_path):
    """docs/slurm.md's first sweep (bm25 and dense on spark25, two SLURM jobs) and its `squeue; sacct ...`
    line, as written (tests.support.as_written): the jobs COMPLETED on the node, by the accounting."""
    (first,) = [c for c in page_lines() if "suite=spark25" in c]
    (look,) = [c for c in page_lines() if c.startswith("squeue")]
    done = as_written(first, tmp_path)
    assert done.returncode == 0, f"{first}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    sweep = newest_sweep(tmp_path)
    variants = [json.loads((d / "metrics.json").read_text())["variant"] for d in job_dirs(sweep)]
    assert variants == ["bm25", "dense"]
    (array,) = submitted_arrays(sweep / ".submitit")
    said = as_written(look, tmp_path)
    assert said.returncode == 0, said.stderr
    tasks = [line.split() for line in said.stdout.splitlines() if line.startswith(f"{array}_")]
    assert sorted(t[0] for t in tasks) == [f"{array}_0", f"{array}_1"]
    assert {t[1] for t in tasks} == {"COMPLETED"}


def test_beam_100k_in_4_slurm_jobs_merges_into_the_unsharded_run(slurm, tmp_path, beam_100k):
    """docs/slurm.md's BEAM 100K sweep as written, and the unsharded run of the same command."""
    assert "SLURM is up" in slurm
    (sweep_line,) = [c for c in page_lines() if "suite=beam" in c]
    sweep_line = " ".join(sweep_line.split())
    shards = " shard=" + ",".join(f"{i}/{SHARDS}" for i in range(SHARDS))
    assert sweep_line.endswith(shards) and " hydra/launcher=slurm_localhost " in sweep_line
    whole = sweep_line.replace(" -m", "").replace(" hydra/launcher=slurm_localhost", "").replace(shards, "")
    for command in (f"{whole} hydra.run.dir=whole", sweep_line):
        done = as_written(command, tmp_path)
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    sweep = newest_sweep(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"  # as_written's store

    # The jobs ran as SLURM jobs: one array of 4 tasks, each COMPLETED on the node, per the accounting.
    (array,) = submitted_arrays(sweep / ".submitit")
    accounted = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-o", "JobID,State,NodeList", "-j", array],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert sorted(accounted) == [f"{array}_{i}|COMPLETED|localhost" for i in range(SHARDS)]
    assert [json.loads((d / "metrics.json").read_text())["shard"]["shard"] for d in job_dirs(sweep)] == [
        f"{i}/{SHARDS}" for i in range(SHARDS)
    ]

    assert_same_run(sweep / "merged" / "0", tmp_path / "whole")

    # MLflow: the whole run; the sweep's parent, the merged run its one child, the 4 shards below that.
    client = mlflow.MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("memeval")
    every = client.search_runs([experiment.experiment_id], max_results=100)
    (parent,) = [r for r in every if "memeval.sweep_key" in r.data.tags]
    (merged,) = [r for r in every if r.data.tags.get(MERGED_TAG)]
    assert merged.data.tags["mlflow.parentRunId"] == parent.info.run_id
    below = [r for r in every if r.data.tags.get("mlflow.parentRunId") == merged.info.run_id]
    assert sorted(r.data.tags["memeval.shard"] for r in below) == [f"{i}/{SHARDS}" for i in range(SHARDS)]
    assert len(every) == 1 + 1 + 1 + SHARDS
    assert all(r.info.status == "FINISHED" for r in every)


def test_a_job_cancelled_on_the_cluster_fails_the_sweep_naming_its_state(slurm, tmp_path):
    """submitit learns a job's end from its result file or, when the job died without one, from `sacct`:
    the cluster's accounting (slurmdbd) is what turns a cancelled job into an error rather than a wait
    that never ends."""
    command = tiny_sweep(tmp_path, "stage.bm25.k1=1.2,1.5")
    proc = subprocess.Popen(
        command, cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        submitted, deadline = tmp_path / "sweep" / ".submitit", time.monotonic() + 120
        while not (arrays := submitted_arrays(submitted)):  # a job's folder is named once sbatch answered
            assert proc.poll() is None and time.monotonic() < deadline, "the sweep submitted nothing"
            time.sleep(0.2)
        subprocess.run(["scancel", *arrays], check=True)  # both tasks, as they start (imports take seconds)
        out, _ = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode != 0
    assert "CANCELLED" in out and "has not produced any output" in out, out[-3000:]


def test_a_job_larger_than_the_node_is_refused_at_submission(slurm, tmp_path):
    """EnforcePartLimits=ALL: sbatch refuses a job no node can run, so the sweep stops with SLURM's reason
    instead of waiting on a job pending for ever (Reason=PartitionConfig)."""
    cpus = int(subprocess.run(["sinfo", "-h", "-o", "%c"], capture_output=True, text=True, check=True).stdout)
    command = tiny_sweep(tmp_path, f"hydra.launcher.cpus_per_task={cpus + 1}")
    done = subprocess.run(command, cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "Batch job submission failed: More processors requested than permitted" in done.stderr


def test_a_boost_sweep_of_3_weights_in_4_shards_on_slurm_is_a_parent_with_a_merged_child_per_weight(
    slurm, tmp_path
):
    """Issue #36's acceptance: 3 boost weights x 4 shards through the submitit launcher (12 SLURM jobs) give
    one MLflow parent, a merged child per weight with its shards below it, and a Holm report."""
    commands = [c for c in page_lines() if "variant=exp05" in c or "--name boost" in c]
    assert "hydra/launcher=slurm_localhost" in commands[0]
    check_boost_sweep_in_4_shards(tmp_path, commands)  # docs/slurm.md's lines, as written
