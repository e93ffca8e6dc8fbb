"""memeval-merge (experiments/merge.py): shards put back together equal the unsharded run, and what cannot
be merged is refused by name.

Real runs in subprocesses (the runner, the memeval launcher's sweep and its automatic merge, the console
script). The tiny two-scope suite is the fast tier; spark25 with a real MLflow store and BEAM 100K are slow.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.merge import (
    MERGED_TAG,
    NOT_COMPARED,
    PARTIAL_SECTION,
    PARTIAL_TAG,
    comparable_metrics,
    comparable_rows,
    main,
)
from experiments.track.sweep_parent import job_failed
from tests.support import CACHE_DIR, REPO, as_written, newest_sweep, page_commands
from tests.sweep_support import job_dirs, write_tiny_suite

BIN = Path(sys.executable).parent


def env() -> dict[str, str]:
    return {
        **os.environ,
        "MLFLOW_TRACKING_URI": "",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }


def memeval_run(cwd: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    flags = [a for a in args if a.startswith("-")]  # `-m` before the overrides
    overrides = [a for a in args if not a.startswith("-")]
    command = [
        sys.executable,
        "-m",
        "experiments.run",
        *flags,
        "progress=false",
        f"cache_dir={cwd / 'cache'}",
    ]
    command += overrides
    proc = subprocess.run(command, cwd=cwd, env=env(), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def memeval_merge(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """The console script, as a user runs it."""
    return subprocess.run(
        [str(BIN / "memeval-merge"), *map(str, args)], cwd=cwd, env=env(), capture_output=True, text=True
    )


def merge_main(capsys, *args) -> tuple[int, str]:
    """`memeval-merge` in this process (its `main`): the exit code and what it said on stderr."""
    code = main([*map(str, args), "--no-tracking"])
    return code, capsys.readouterr().err


def assert_same_run(merged: Path, whole: Path) -> None:
    """The merge's files are the unsharded run's: run.trec, qrels.tsv and ranking.csv byte for byte,
    per_query.csv and metrics.json but for NOT_COMPARED (timings, cache use)."""
    for name in ("run.trec", "qrels.tsv", "ranking.csv"):
        assert (merged / name).read_bytes() == (whole / name).read_bytes(), name
    assert comparable_rows(merged / "per_query.csv") == comparable_rows(whole / "per_query.csv")
    got, want = (json.loads((d / "metrics.json").read_text()) for d in (merged, whole))
    assert comparable_metrics(got) == comparable_metrics(want)
    assert (merged / "config.yaml").read_text() == (whole / "config.yaml").read_text()


# --- the tiny two-scope suite: fast -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    """The tiny suite run whole, as a 2-shard sweep (merged by the sweep), and as shards that do not go
    together: 0/3 and 1/2 of another k1."""
    tmp = tmp_path_factory.mktemp("tiny_merge")
    suite = write_tiny_suite(tmp)
    common = ["suite=jsonl", f"suite.path={suite}", "variant=bm25", "tracking=none"]
    memeval_run(tmp, *common, f"hydra.run.dir={tmp / 'whole'}")
    memeval_run(tmp, "-m", *common, "shard=0/2,1/2", f"hydra.sweep.dir={tmp / 'sweep'}")
    memeval_run(tmp, "-m", *common, "shard=0/3,1/2", "stage.bm25.k1=0.9", f"hydra.sweep.dir={tmp / 'odd'}")
    return tmp


def test_the_sweep_merges_its_shards_into_the_unsharded_run(tiny_runs):
    shards = job_dirs(tiny_runs / "sweep")
    assert [json.loads((d / "metrics.json").read_text())["n_queries"] for d in shards] == [2, 2]
    merged = tiny_runs / "sweep" / "merged" / "0"
    assert_same_run(merged, tiny_runs / "whole")
    tags = json.loads((merged / "tags.json").read_text())
    assert tags[MERGED_TAG] == "2 shards" and "memeval.shard" not in tags


def test_memeval_merge_of_the_shard_folders_is_the_same_run(tiny_runs, tmp_path):
    shards = job_dirs(tiny_runs / "sweep")
    done = memeval_merge(tiny_runs, *reversed(shards), "--out", tmp_path / "merged")  # any order given
    assert done.returncode == 0, done.stderr
    assert_same_run(tmp_path / "merged", tiny_runs / "whole")


def test_memeval_merge_of_a_sweep_that_merged_itself_says_so_and_writes_nothing(tiny_runs, capsys):
    before = sorted(p.name for p in (tiny_runs / "sweep" / "merged").iterdir())
    code = main([str(tiny_runs / "sweep"), "--no-tracking"])  # its merged/0 already holds these shards
    out = capsys.readouterr().out
    assert code == 0
    assert f"already merged: {tiny_runs / 'sweep' / 'merged' / '0'}" in out and "nothing written" in out
    assert sorted(p.name for p in (tiny_runs / "sweep" / "merged").iterdir()) == before
    # Named shard folders with --out are merged as asked: the user chose another folder.
    assert_same_run(tiny_runs / "sweep" / "merged" / "0", tiny_runs / "whole")


# --- what the run folder check refuses (experiments/run_folder/check.py): exit 2, one line ----------------


@pytest.fixture
def shard_copies(tiny_runs, tmp_path) -> list[Path]:
    """The 2-shard sweep's shard folders, copied to be damaged."""
    return [
        shutil.copytree(d, tmp_path / "shards" / d.name, symlinks=True) for d in job_dirs(tiny_runs / "sweep")
    ]


def merge_exit(capsys, *args) -> tuple[int, str]:
    """`memeval-merge` in this process, as the console script exits: a crash is exit 1, not an exception."""
    try:
        code = main([*map(str, args), "--no-tracking"])
    except SystemExit as exit_:
        code = exit_.code
    return code, capsys.readouterr().err


def assert_refused(code: int, err: str, folder: Path, file: str, out: Path) -> None:
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert str(folder) in err and file in err, err
    assert not out.exists()


@pytest.mark.parametrize("file", ["run.trec", "qrels.tsv"])
def test_a_shard_without_its_run_trec_or_qrels_is_refused_naming_folder_and_file(
    shard_copies, tmp_path, capsys, file
):
    (shard_copies[1] / file).unlink()
    code, err = merge_exit(capsys, *shard_copies, "--out", tmp_path / "merged")
    assert_refused(code, err, shard_copies[1], file, tmp_path / "merged")
    assert "missing" in err


def test_a_shard_whose_run_trec_lists_fewer_queries_than_its_per_query_is_refused(
    shard_copies, tmp_path, capsys
):
    shard = next(d for d in shard_copies if (d / "run.trec").read_text())
    (shard / "run.trec").write_text("")  # the file is there, its queries' lines are not
    code, err = merge_exit(capsys, *shard_copies, "--out", tmp_path / "merged")
    assert_refused(code, err, shard, "run.trec", tmp_path / "merged")
    assert "n_returned" in err


def test_an_edited_shard_run_trec_is_refused_naming_the_shard_and_its_queries(shard_copies, tmp_path, capsys):
    shard = next(d for d in shard_copies if (d / "run.trec").read_text())
    qid, q0, doc, rest = (shard / "run.trec").read_text().splitlines(keepends=True)[0].split(" ", 3)
    lines = (shard / "run.trec").read_text().splitlines(keepends=True)
    lines[0] = " ".join((qid, q0, f"{doc}-replaced", rest))  # one document replaced
    (shard / "run.trec").write_text("".join(lines))
    code, err = merge_exit(capsys, *shard_copies, "--out", tmp_path / "merged")
    assert_refused(code, err, shard, "per_query.csv", tmp_path / "merged")
    assert f"queries {qid} (" in err and "run.trec" in err and "field " in err


def _damage(path: Path, how: str) -> None:
    if how == "missing":
        path.unlink()
    elif how == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif how == "not_utf8":
        path.write_bytes(b"\xff\xfe\x00" + path.read_bytes())
    elif how == "directory":
        path.unlink()
        path.mkdir()
    elif how == "symlink_loop":
        path.unlink()
        path.symlink_to(path.name)


@pytest.mark.parametrize("how", ["missing", "truncated", "not_utf8", "directory", "symlink_loop"])
@pytest.mark.parametrize("file", ["config.yaml", "per_query.csv", "metrics.json"])
def test_an_unreadable_merge_input_exits_2_with_one_line_naming_folder_and_file(
    shard_copies, tmp_path, capsys, file, how
):
    _damage(shard_copies[1] / file, how)
    code, err = merge_exit(capsys, *shard_copies, "--out", tmp_path / "merged")
    if (file, how) == ("metrics.json", "missing"):  # a shard that did not finish: listed with the others
        assert code == 2 and f"shard 1/2 did not finish ({shard_copies[1]} has no metrics.json)" in err
        return
    assert_refused(code, err, shard_copies[1], file, tmp_path / "merged")


def test_a_run_trec_linked_to_another_shards_is_refused(shard_copies, tmp_path, capsys):
    (shard_copies[1] / "run.trec").unlink()
    (shard_copies[1] / "run.trec").symlink_to(shard_copies[0] / "run.trec")
    code, err = merge_exit(capsys, *shard_copies, "--out", tmp_path / "merged")
    assert_refused(code, err, shard_copies[1], "run.trec", tmp_path / "merged")
    assert "symlink to another folder's file" in err


def test_a_missing_shard_is_named_and_nothing_is_written(tiny_runs, tmp_path, capsys):
    first = job_dirs(tiny_runs / "sweep")[0]
    code, err = merge_main(capsys, first, "--out", tmp_path / "merged")
    assert code == 2
    assert "shards missing: 1/2" in err and "--allow-partial" in err
    assert not (tmp_path / "merged").exists() and not list(tmp_path.iterdir())


def test_shards_of_different_n_are_refused(tiny_runs, tmp_path, capsys):
    odd = job_dirs(tiny_runs / "odd")  # 0/3 and 1/2
    code, err = merge_main(capsys, *odd, "--out", tmp_path / "merged")
    assert code == 2 and "split the suite differently" in err
    assert "0/3" in err and "1/2" in err


def test_shards_of_different_configs_are_refused_naming_the_setting(tiny_runs, tmp_path, capsys):
    ours, other = job_dirs(tiny_runs / "sweep")[0], job_dirs(tiny_runs / "odd")[1]  # 0/2, and 1/2 at k1=0.9
    code, err = merge_main(capsys, ours, other, "--out", tmp_path / "merged", "--allow-partial")
    assert code == 2 and "stage.bm25.k1" in err
    assert not (tmp_path / "merged").exists()


def test_a_failed_shard_is_named(tiny_runs, tmp_path, capsys):
    ours, failed = (shutil.copytree(d, tmp_path / d.name) for d in job_dirs(tiny_runs / "sweep"))
    (failed / "metrics.json").unlink()
    job_failed(
        failed, {}, RuntimeError("out of memory"), run_name="tiny-bm25", tags={}
    )  # as a job records it
    code, err = merge_main(capsys, ours, failed, "--out", tmp_path / "merged")
    assert code == 2
    assert "shard 1/2 failed" in err and "out of memory" in err


def test_allow_partial_merges_what_is_there_and_says_so(tiny_runs, tmp_path, capsys):
    first = job_dirs(tiny_runs / "sweep")[0]
    code, err = merge_main(capsys, first, "--out", tmp_path / "merged", "--allow-partial")
    assert code == 0, err
    metrics = json.loads((tmp_path / "merged" / "metrics.json").read_text())
    tags = json.loads((tmp_path / "merged" / "tags.json").read_text())
    assert metrics[PARTIAL_SECTION]["missing"] == ["1/2"] and metrics["n_queries"] == 2
    assert "missing 1/2" in tags[PARTIAL_TAG]


def test_a_whole_run_is_not_taken_for_a_shard(tiny_runs, tmp_path, capsys):
    code, err = merge_main(capsys, tiny_runs / "whole", "--out", tmp_path / "merged")
    assert code == 2 and "is not a shard" in err


def test_not_compared_names_only_timings_and_cache_use():
    assert set(NOT_COMPARED) == {"metrics.json", "per_query.csv"}
    assert not any("@" in key or "ci95" in key for keys in NOT_COMPARED.values() for key in keys)


@pytest.mark.slow
def test_merged_per_query_latency_is_each_shards_own(tmp_path):
    """memeval-merge carries each query's latency_ms (and its per-stage ms.* columns) from its shard: measured
    in the run that reports them, never left blank (issue 41). spark25 in 2 shards, untracked."""
    import pandas as pd

    common = ["suite=spark25", "variant=bm25", "tracking=none"]
    memeval_run(tmp_path, "-m", *common, "shard=0/2,1/2", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    shards = job_dirs(tmp_path / "sweep")
    done = memeval_merge(tmp_path, *shards, "--out", tmp_path / "merged", "--no-tracking")
    assert done.returncode == 0, done.stderr

    def table(folder: Path) -> pd.DataFrame:  # as written: text, a blank cell kept as ""
        return pd.read_csv(folder / "per_query.csv", dtype=str, keep_default_na=False, index_col="query_id")

    parts = pd.concat([table(d) for d in shards])
    for merged in (table(tmp_path / "merged"), table(tmp_path / "sweep" / "merged" / "0")):  # and the sweep's
        timed = ["latency_ms", *(c for c in merged.columns if c.startswith("ms."))]
        assert len(timed) > 1 and sorted(merged.index) == sorted(parts.index) and len(merged) == 25
        for column in timed:
            assert (merged[column] != "").all(), f"{column} blank in the merge"
            assert merged[column].to_dict() == parts[column].to_dict(), column
        assert (merged["latency_ms"].astype(float) > 0).all()


# --- spark25 and BEAM 100K, tracked: slow ------------------------------------------------------------------


def store(folder: Path) -> str:
    import mlflow

    folder.mkdir(parents=True, exist_ok=True)
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    mlflow.MlflowClient(tracking_uri=uri).search_experiments()  # created once, before any job
    return uri


def tracked_runs(uri: str, experiment: str) -> list:
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"no experiment {experiment} in {uri}"
    return client.search_runs([found.experiment_id], max_results=1000)


@pytest.mark.slow
def test_spark25_in_4_shards_merges_into_the_unsharded_run_with_the_shards_below_it_in_mlflow(tmp_path):
    uri = store(tmp_path / "store")
    common = [
        "variant=hybrid",
        f"tracking.tracker.uri={uri}",
        "tracking.tracker.experiment=spark25",
        f"encoder.cache_dir={CACHE_DIR / 'embeddings'}",
    ]
    memeval_run(tmp_path, *common, f"hydra.run.dir={tmp_path / 'whole'}")
    memeval_run(tmp_path, "-m", *common, "shard=0/4,1/4,2/4,3/4", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    merged = tmp_path / "sweep" / "merged" / "0"
    assert_same_run(merged, tmp_path / "whole")  # spark25 is one scope: shards 1-3 are empty
    every = tracked_runs(uri, "spark25")
    (merged_run,) = [r for r in every if r.data.tags.get(MERGED_TAG)]
    shards = [r for r in every if "memeval.shard" in r.data.tags]
    assert sorted(r.data.tags["memeval.shard"] for r in shards) == ["0/4", "1/4", "2/4", "3/4"]
    assert {r.data.tags["mlflow.parentRunId"] for r in shards} == {merged_run.info.run_id}
    (whole,) = [r for r in every if r.data.tags.get("memeval.run_dir") == str((tmp_path / "whole").resolve())]
    assert merged_run.data.params == whole.data.params  # the same settings: shard null
    # every logged metric but the run's circumstances (latency, peak memory): what the merge reproduces
    quality = {
        k: v
        for k, v in whole.data.metrics.items()
        if "latency" not in k and k.split(".")[0] not in NOT_COMPARED["metrics.json"]
    }
    assert "resource.peak_rss_mb" in whole.data.metrics and "resource.peak_rss_mb" not in quality
    assert {k: merged_run.data.metrics[k] for k in quality} == quality


@pytest.mark.slow
def test_beam_100k_in_4_shards_merges_into_the_unsharded_run(tmp_path, beam_suite):
    """docs/running_at_scale.md's BEAM 100K sweep and its merge of `run0 ... run3` by hand, as written
    (tests.support.as_written), each equal to the unsharded run of the same command."""
    from experiments.shards import scope_sizes

    block = page_commands("running_at_scale.md", "## Sharding")
    (sweep_line,) = [c for c in block if "suite=beam" in c and "hydra/launcher" not in c]
    (by_hand,) = [c for c in block if c.startswith(".venv/bin/memeval-merge run0 ")]
    assert " -m " in sweep_line and " shard=0/4,1/4,2/4,3/4" in sweep_line
    whole = sweep_line.replace(" -m ", " ").replace(" shard=0/4,1/4,2/4,3/4", "") + " hydra.run.dir=whole"
    for command in (whole, sweep_line):
        done = as_written(command, tmp_path)
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    sweep = newest_sweep(tmp_path)
    shards = [json.loads((d / "metrics.json").read_text()) for d in job_dirs(sweep)]
    loads = [s["suite"]["memories"] for s in shards]
    assert all(loads) and max(loads) - min(loads) <= max(scope_sizes(beam_suite).values())
    assert sum(s["n_queries"] for s in shards) == len(beam_suite.queries)
    assert_same_run(sweep / "merged" / "0", tmp_path / "whole")
    for i, job in enumerate(job_dirs(sweep)):  # the shards as `memeval-run shard=i/4 ...` left them
        (tmp_path / f"run{i}").symlink_to(job, target_is_directory=True)
    done = as_written(by_hand, tmp_path)
    assert done.returncode == 0, f"{by_hand}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    assert_same_run(tmp_path / "outputs" / "merged" / "hybrid", tmp_path / "whole")


@pytest.mark.slow
def test_a_boost_sweep_in_4_shards_is_a_parent_with_a_merged_child_per_weight_and_a_holm_report(tmp_path):
    # docs/running_at_scale.md's boost sweep and its two reports, as written (the default launcher);
    # tests/run/test_slurm.py: docs/slurm.md's, on SLURM
    block = page_commands("running_at_scale.md", "## Sharding")
    check_boost_sweep_in_4_shards(
        tmp_path, [c for c in block if "variant=exp05" in c or "--name boost_sharded" in c]
    )


def check_boost_sweep_in_4_shards(tmp_path: Path, commands: list[str]) -> None:
    """A page's `memeval-run -m ... variant=exp05 stage.instruction_boost.weight=0,0.1,0.2 shard=0/4,...,3/4`
    and its `memeval-report` lines, as written (tests.support.as_written), in a fresh folder with its own
    MLflow store: one parent, three merged children (the shards below each), and each report compares the
    three with Holm."""
    sweep_line, *reports = commands
    assert "variant=exp05" in sweep_line and " stage.instruction_boost.weight=0,0.1,0.2 " in sweep_line
    assert sweep_line.endswith(" shard=0/4,1/4,2/4,3/4") and reports
    assert all(r.startswith(".venv/bin/memeval-report --name ") for r in reports)
    # One weight unsharded, as the page's command sets it: its merge is the same run, the `tagging` run
    # report (whole corpus) included.
    whole = ".venv/bin/memeval-run variant=exp05 stage.instruction_boost.weight=0.1 hydra.run.dir=whole"
    for command in (sweep_line, whole):
        done = as_written(command, tmp_path)
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    sweep_dir = newest_sweep(tmp_path)
    (merged,) = [
        d for d in (sweep_dir / "merged").iterdir() if "weight: 0.1" in (d / "config.yaml").read_text()
    ]
    assert_same_run(merged, tmp_path / "whole")
    assert "tagging" in json.loads((merged / "metrics.json").read_text())
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"  # as_written's store
    every = [
        r
        for r in tracked_runs(uri, "memeval")
        if "mlflow.parentRunId" in r.data.tags or "memeval.sweep_key" in r.data.tags
    ]
    (parent,) = [r for r in every if "memeval.sweep_key" in r.data.tags]
    children = [r for r in every if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(r.info.run_name for r in children) == [
        "exp05 weight=0",
        "exp05 weight=0.1",
        "exp05 weight=0.2",
    ]
    assert all(r.data.tags[MERGED_TAG] == "4 shards" and r.info.status == "FINISHED" for r in children)
    for child in children:
        below = [r for r in every if r.data.tags.get("mlflow.parentRunId") == child.info.run_id]
        assert sorted(r.data.tags["memeval.shard"] for r in below) == ["0/4", "1/4", "2/4", "3/4"]
        weight = child.data.params["stage.instruction_boost.weight"]
        assert {r.data.params["stage.instruction_boost.weight"] for r in below} == {weight}
    assert len(every) == 1 + 3 + 12
    import mlflow

    finished = mlflow.MlflowClient(tracking_uri=uri).get_run(parent.info.run_id)
    assert finished.info.status == "FINISHED"
    assert finished.data.tags["memeval.best_child"].split(" (")[0] in {r.info.run_name for r in children}

    for command in reports:
        report = as_written(command, tmp_path)
        assert report.returncode == 0, f"{command}\n{report.stderr[-3000:]}"
        name = command.split("--name ", 1)[1].split()[0]
        text = (tmp_path / "reports" / name / "report.md").read_text()
        assert "Holm correction" in text and "3 runs" in report.stdout, command
        for weight in ("weight=0.1", "weight=0.2"):
            assert weight in text, command


@pytest.mark.slow
def test_a_rerun_sharded_sweep_reports_its_merged_runs_not_the_shards_it_reused(tmp_path):
    """A re-run sweep's skipped shard jobs tag the parent with the shard runs they reused; the merged runs
    stand for them, so a report of the sweep reads the merged runs only (a shard is of another suite)."""
    suite = write_tiny_suite(tmp_path)
    uri = store(tmp_path / "store")
    command = ["suite=jsonl", f"suite.path={suite}", "variant=bm25", f"tracking.tracker.uri={uri}"]
    command += ["tracking.tracker.experiment=rerun", "stage.bm25.k1=1.2,1.5", "shard=0/2,1/2"]
    memeval_run(tmp_path, "-m", *command, f"hydra.sweep.dir={tmp_path / 'sweep'}")
    again = memeval_run(tmp_path, "-m", *command, f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert again.stdout.count("skipped: config") == 4
    report = subprocess.run(
        [str(BIN / "memeval-report"), "--name", "rerun", "--sweep-dir", str(tmp_path / "sweep")]
        + ["--out-root", str(tmp_path / "reports"), "--drilldown", "0"],
        cwd=tmp_path, env=env(), capture_output=True, text=True,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    assert "2 runs" in report.stdout


@pytest.mark.slow
def test_merging_a_tracked_sweep_again_leaves_its_merged_child_with_its_shards(tmp_path, capsys, monkeypatch):
    """`memeval-merge multirun/<time>` on a sweep that merged itself: said, nothing written, and the shard
    runs stay below the sweep's merged child in MLflow (a second merge used to re-parent them)."""
    suite = write_tiny_suite(tmp_path)
    uri = store(tmp_path / "store")
    command = ["suite=jsonl", f"suite.path={suite}", "variant=bm25", f"tracking.tracker.uri={uri}"]
    command += ["tracking.tracker.experiment=again", "shard=0/2,1/2", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    memeval_run(tmp_path, "-m", *command)

    def shards_below() -> dict[str, str]:
        every = tracked_runs(uri, "again")
        (merged,) = [r for r in every if r.data.tags.get(MERGED_TAG)]
        shards = [r for r in every if "memeval.shard" in r.data.tags]
        return {
            r.data.tags["memeval.shard"]: r.data.tags["mlflow.parentRunId"] == merged.info.run_id
            for r in shards
        }

    assert shards_below() == {"0/2": True, "1/2": True}
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "")  # the shards' own config names the store
    assert main([str(tmp_path / "sweep")]) == 0  # tracking on, as a user runs it
    assert "already merged" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "sweep" / "merged").iterdir()) == ["0"]
    assert shards_below() == {"0/2": True, "1/2": True}
