"""Every command the README shows works as written (issue 25: "every README command copy-pastes").

- The "Three common tasks" block runs, as a user would type it: the installed console scripts, from a
  directory outside the repository, in order (the report reads the sweep the command before it made).
  BEAM is read from the shared copy instead of ../shared/beam.
- Every other command in the text names what exists: a console script in `.venv/bin/` (with its path,
  as the README says to type it), a Makefile target, a module; the memeval ones run (a placeholder such
  as `<its TREC run file>` gets a real file) or, when they would take minutes, compose their config.
- The README's list of console scripts is pyproject.toml's.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from tests.support import BEAM_DIR, CACHE_DIR, REPO, as_written, doc_commands, newest_sweep, page_commands

SCRIPTS = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"])
# What a placeholder in a README command stands for when the test runs it.
PLACEHOLDERS = {
    "<its TREC run file>": str(REPO / "datasets" / "spark25" / "runs" / "bm25.trec"),
    "<its URL>": "http://127.0.0.1:9",  # a live service's address: such a command is only composed (below)
    "<token>": "any",  # the live one-liner's token (the test that runs it: below)
}
# README commands that take minutes or start a server: checked by composing their config instead.
COMPOSE_ONLY = ("memeval-study",)


def inline_commands(page: Path = REPO / "README.md") -> list[str]:
    """A page's inline `code` spans outside code blocks that are commands (they contain a space)."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    spans = re.findall(r"`([^`]+)`", text.replace("\n", " "))
    # after `NAME=value` settings (a value may be a `<placeholder>` with spaces)
    commands = r"([A-Z_]+=(<[^>]*>|\S+) )*(\.venv/bin/|make |python |memeval-|\.ci/)"
    return [s for s in spans if " " in s and re.match(commands, s)]


def readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    block = text.split("## Three common tasks", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    joined = block.replace("\\\n", " ")  # continuation lines
    return [line.strip() for line in joined.splitlines() if line.strip().startswith(".venv/bin/")]


def test_the_readme_lists_every_console_script():
    text = " ".join((REPO / "README.md").read_text().split())
    listed = re.search(r"work from any directory \(([^;)]*)", text)
    assert listed, "the README's sentence listing the console scripts is gone"
    assert set(re.findall(r"`(memeval-[\w-]+)`", listed[1])) == SCRIPTS


def test_every_inline_command_names_what_exists():
    commands = inline_commands()
    assert any(c.startswith(".venv/bin/memeval-study") for c in commands)
    assert_names_what_exists(commands)


def assert_names_what_exists(commands: list[str]) -> None:
    """Each command is typed as the README types it and names something that exists."""
    targets = set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), flags=re.M))
    for command in commands:
        first, *rest = without_assignments(shlex.split(command))
        # A memeval command is typed with its path, as every README command is (no bare `memeval-study`).
        assert not first.startswith("memeval-"), f"{command!r}: write .venv/bin/{first}"
        if first.startswith(".venv/bin/"):
            name = first.removeprefix(".venv/bin/")
            # memeval's own, or a dependency's script (mlflow, chroma) that `make setup` installs there
            assert name in SCRIPTS or (Path(sys.executable).parent / name).is_file(), command
        elif first == "make":
            assert rest[0].split("=")[0] in targets or "=" in rest[0], f"{command!r}: no Makefile target"
        elif first == "python":
            assert rest[0] == "-m" and importlib.util.find_spec(rest[1]), command
        elif first.startswith(".ci/"):
            assert (REPO / first).is_file(), command
        elif first == "export":  # the shell's: a variable a later command reads (a service's token)
            assert rest and all(re.match(r"[A-Z_]+=", r) for r in rest), command
        else:
            raise AssertionError(f"{command!r}: not a command this project ships")


def without_assignments(args: list[str]) -> list[str]:
    """A command's words after its leading `NAME=value` environment assignments (PYTHONPATH=...)."""
    while args and re.match(r"[A-Z_]+=", args[0]):
        args = args[1:]
    return args


@pytest.mark.slow
def test_the_inline_memeval_commands_run_from_another_directory(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    for command in inline_commands():
        for placeholder, value in PLACEHOLDERS.items():
            command = command.replace(placeholder, value)
        words = shlex.split(command)
        args = without_assignments(words)
        if not args[0].startswith(".venv/bin/memeval-"):
            continue
        assert "<" not in command, f"{command!r}: a placeholder this test does not know"
        env = {**env, **dict(w.split("=", 1) for w in words[: len(words) - len(args)])}
        args[0] = str(Path(sys.executable).parent / args[0].rsplit("/", 1)[1])
        if args[0].endswith(COMPOSE_ONLY) or "variant=system" in args or "suite=beam" in args:
            args.append("--cfg=job")  # minutes of BEAM work, or a live service: only that it composes
        if args[0].endswith("memeval-serve"):
            args.append(
                "--help"
            )  # it would serve until stopped (tests/live/test_live_serve.py runs it for real)
        done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    assert not (tmp_path / "reports").exists()  # nothing of the README's writes over committed reports


def test_memeval_report_help_states_its_default_baseline(capsys):
    from experiments.compare.cli import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "see README" not in text and "the `baseline` or `hybrid` variant" in text


@pytest.mark.slow
def test_the_readme_shows_the_three_tasks():
    scripts = {shlex.split(c)[0].rsplit("/", 1)[1] for c in readme_commands()}
    assert scripts == {"memeval-run", "memeval-gate", "memeval-report"}


@pytest.mark.slow
def test_every_readme_command_runs_from_another_directory(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    env.pop("GITHUB_STEP_SUMMARY", None)
    sweep_dir = None
    for command in readme_commands():
        args = shlex.split(re.sub(r"#.*$", "", command))
        args[0] = str(Path(sys.executable).parent / args[0].rsplit("/", 1)[1])
        args = [a.replace("../shared/beam", str(BEAM_DIR)) for a in args]
        if args[-1].startswith("multirun/<time>"):
            assert sweep_dir is not None, "the report command needs the sweep the README ran before it"
            args[-1] = str(sweep_dir)
        if args[0].endswith(("memeval-run", "memeval-gate")):  # the shared embedding cache, as other runs use
            args.append(f"encoder.cache_dir={CACHE_DIR / 'embeddings'}")
        done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        if "-m" in args:
            sweeps = sorted((tmp_path / "multirun").iterdir())
            sweep_dir = sweeps[-1]
    assert (tmp_path / "reports" / "my_sweep" / "report.md").is_file()


# --- docs/live_systems.md: every command typed with its path, each composed or run ----------------------

LIVE_PAGE = REPO / "docs" / "live_systems.md"
# Where a live-system command's placeholder points when it is composed: a service address, the page's own
# Python package (its section runs for real in tests/live/test_live_python_adapter.py), a sweep folder.
LIVE_PLACEHOLDERS = {
    "<its URL>": "http://127.0.0.1:9",
    "~/my-store": str(REPO),
    "multirun/<time>": "multirun",
}
# Options and overrides that name where a command writes; each such place must be ignored by git.
WRITES = re.compile(r"^(?:system\.cassette|hydra\.run\.dir|--baseline-dir|--out-root|--state-dir|--path)[= ]")


def live_commands() -> list[str]:
    return doc_commands(LIVE_PAGE.read_text()) + inline_commands(LIVE_PAGE)


def test_every_live_systems_command_names_what_exists():
    commands = live_commands()
    assert len(commands) >= 20
    assert_names_what_exists(commands)


@pytest.mark.slow
def test_every_live_systems_command_composes_or_answers_its_help(tmp_path):
    """memeval-run and memeval-study commands compose their config (`--cfg=job`: their services are not up
    here; tests/live/test_live_*.py run each section for real); every other memeval script answers --help."""
    compose_or_help(live_commands(), LIVE_PLACEHOLDERS, tmp_path)


def first_point(override: str) -> str:
    """A sweep override (`key=a,b,c`) as its first value (`key=a`); anything else as it is."""
    key, sep, value = override.partition("=")
    if sep and value.startswith("range("):  # Hydra's range(start, stop[, step]): its first value
        return f"{key}={value[6:].split(',')[0]}"
    return f"{key}={value.split(',')[0]}" if sep and "," in value and not value.startswith("[") else override


def test_what_the_documented_commands_write_is_ignored_by_git():
    """Working files of the README's and live_systems.md's commands never show as untracked: each place
    they write (cassettes, run folders, baselines, reports) is ignored by git."""
    written = []
    for command in readme_commands() + live_commands():
        args = without_assignments(shlex.split(re.sub(r"\s*&$", "", re.sub(r"#.*$", "", command))))
        for i, arg in enumerate(args):
            if WRITES.match(arg):
                written.append(arg.split("=", 1)[1] if "=" in arg else args[i + 1])
        if args[0].endswith("memeval-report") and "--out-root" not in args:
            written.append(f"reports/{args[args.index('--name') + 1]}/report.md")
        if args[0].endswith("memeval-gate") and "--refresh" in args and "--baseline-dir" not in args:
            written.append(f"reports/baselines/{args[1]}-{args[2]}.json")
    assert "outputs/cassettes/candidate.jsonl" in written  # the CI replay's cassette is one the page records
    for path in written:
        ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=REPO)
        assert ignored.returncode == 0, f"{path}: written by a documented command, not ignored by git"


# --- docs/slurm.md and docs/running_at_scale.md: every command names what exists and composes -------------

SCALE_PAGES = (REPO / "docs" / "slurm.md", REPO / "docs" / "running_at_scale.md")
CLUSTER_TOOLS = ("squeue", "sacct", "export")  # SLURM's own tools and the shell's `export`: not ours
SCALE_PLACEHOLDERS = {
    "multirun/<time>": "multirun",
    "/data/beam": str(BEAM_DIR),
    "../shared/beam": str(BEAM_DIR),
}


def scale_commands() -> list[str]:
    commands = []
    for page in SCALE_PAGES:
        for line in doc_commands(page.read_text()) + inline_commands(page):
            commands += [c.strip() for c in line.split(";") if c.strip().split()[0] not in CLUSTER_TOOLS]
    return commands


def test_every_slurm_and_scale_command_names_what_exists():
    commands = scale_commands()
    assert "make slurm-up" in commands and not any("sudo" in c for c in commands)
    assert_names_what_exists(commands)
    # a generated suite is written where git ignores it (outputs/), never into data/ inside the checkout
    assert not any(re.search(r"(^|\s|=)data/", c) for c in commands), commands


def test_make_slurm_up_runs_as_root_and_asks_sudo_only_as_a_user(tmp_path):
    """`make slurm-up` as docs/slurm.md writes it: as root (a container: no sudo there) it calls .ci/slurm-up,
    as a user it calls it through sudo (`make -n`: what it would run)."""
    fake = tmp_path / "bin"  # an `id` that says who runs make
    fake.mkdir()
    for uid, expected in ((0, ".ci/slurm-up"), (1000, "sudo .ci/slurm-up")):
        (fake / "id").write_text(f"#!/bin/sh\necho {uid}\n")
        (fake / "id").chmod(0o755)
        # as a user types it: not inside `make test` (whose MAKELEVEL/MAKEFLAGS make a sub-make print
        # "Entering directory" lines; CI runs this test that way)
        outer = {"MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES", "MAKE_TERMOUT", "MAKE_TERMERR"}
        env = {k: v for k, v in os.environ.items() if k not in outer}
        env["PATH"] = f"{fake}:{os.environ['PATH']}"
        done = subprocess.run(["make", "-n", "slurm-up"], cwd=REPO, env=env, capture_output=True, text=True)
        assert done.returncode == 0 and done.stdout.strip() == expected, (uid, done.stdout, done.stderr)


@pytest.mark.slow
def test_every_slurm_and_scale_command_composes_or_answers_its_help(tmp_path):
    """memeval-run commands compose their config as the sweep's first point (their SLURM cluster is not up
    here: tests/run/test_slurm.py submits for real), every other memeval script answers --help, every
    `python -m` module imports."""
    compose_or_help(scale_commands(), SCALE_PLACEHOLDERS, tmp_path)


def run_each(commands: list[str], cwd: Path) -> list[subprocess.CompletedProcess]:
    """Each command as written (tests.support.as_written), in order: exit 0 each."""
    done = []
    for command in commands:
        done.append(as_written(command, cwd))
        assert done[-1].returncode == 0, f"{command}\n{done[-1].stdout[-2000:]}\n{done[-1].stderr[-3000:]}"
    return done


@pytest.mark.slow
def test_the_sharding_commands_of_running_at_scale_run_as_written(tmp_path):
    """docs/running_at_scale.md's "Sharding" block on the default suite (spark25), as written, in order, from
    a fresh folder: the joblib sweep, the `range` sweep, and `memeval-merge multirun/<time>` on it (the sweep
    merged itself: said, exit 0), and the page's `memeval-merge multirun/<time> --allow-partial` too. Run
    elsewhere, as written (tests/run/test_merge.py): the BEAM 100K hybrid sweep and the merge of
    `run0 ... run3`, against the unsharded run; the exp05 boost sweep and its two reports. Not run:
    the `hydra/launcher=slurm` line (BEAM 10M and 4-CPU jobs: a real cluster; composed above, and
    tests/run/test_slurm.py runs docs/slurm.md's lines on the single-node cluster)."""
    block = page_commands("running_at_scale.md", "## Sharding")
    (joblib,) = [c for c in block if "hydra/launcher=joblib" in c]
    (ranged,) = [c for c in block if "range(0,4)" in c]
    (merge,) = [c for c in block if c == ".venv/bin/memeval-merge multirun/<time>"]
    elsewhere = [
        c for c in block
        if "suite=beam" in c or "variant=exp05" in c or "--name boost_sharded" in c or " run0 " in c
    ]  # fmt: skip
    assert len(elsewhere) == 6 and len(block) == 9, block  # a new line: run it here or say where
    run_each([joblib], tmp_path)
    sweep = newest_sweep(tmp_path)
    assert [
        json.loads((sweep / str(i) / "metrics.json").read_text())["shard"]["shard"] for i in range(4)
    ] == [f"{i}/4" for i in range(4)]
    assert (sweep / "merged" / "0" / "metrics.json").is_file()  # merged by the sweep itself
    first_merge = (sweep / "merged" / "0" / "run.trec").read_bytes()
    time.sleep(1)  # Hydra names a sweep's folder by the second
    run_each([ranged], tmp_path)
    assert newest_sweep(tmp_path) != sweep
    sweep = newest_sweep(tmp_path)
    assert (sweep / "merged" / "0" / "run.trec").read_bytes() == first_merge  # the same shards, one run
    page = REPO / "docs" / "running_at_scale.md"
    (partial,) = [
        c for c in inline_commands(page) if c.endswith("memeval-merge multirun/<time> --allow-partial")
    ]
    for said in run_each([merge, partial], tmp_path):
        merged = (sweep / "merged" / "0").relative_to(tmp_path)  # as the command named the sweep
        assert f"already merged: {merged} " in said.stdout and "nothing written" in said.stdout, said.stdout
    assert sorted(p.name for p in (sweep / "merged").iterdir()) == ["0"]


def compose_or_help(commands: list[str], placeholders: dict[str, str], tmp_path: Path) -> None:
    """Each command, its placeholders filled: memeval-run and memeval-study compose their config as the
    sweep's first point, with Hydra's node (what `--cfg=all` composes; in this process: a process per
    command cost ~2 s of CPU each, and the scripts' own start is run by the tests of each page's
    sections), any other memeval script answers --help; exit 0 each. Commands that come to the same
    arguments (`memeval-gate ... --help`, five times on a page) run once."""
    from experiments.configure.compose import compose_config

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    ran: set[tuple[str, ...]] = set()
    for command in commands:
        for placeholder, value in placeholders.items():
            command = command.replace(placeholder, value)
        args = without_assignments(shlex.split(re.sub(r"\s*&$", "", command)))
        name = args[0].rsplit("/", 1)[-1]
        if name not in SCRIPTS:
            continue  # make, python -m, chroma, uvicorn: named above, started for real by their tests
        if name in ("memeval-run", "memeval-study"):  # a sweep composes as its first point
            flags = {i for i, a in enumerate(args) if a in ("-m", "--cfg") or (i and args[i - 1] == "--cfg")}
            overrides = [first_point(a) for i, a in enumerate(args[1:], 1) if i not in flags]
            try:
                compose_config(overrides, "config" if name == "memeval-run" else "run_study", hydra_node=True)
            except Exception as err:  # noqa: BLE001 - any composition error fails the command, named
                pytest.fail(f"{command}\ndoes not compose: {type(err).__name__}: {err}")
            continue
        args = [str(Path(sys.executable).parent / name), "--help"]
        if tuple(args) in ran:
            continue
        ran.add(tuple(args))
        done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"


@pytest.mark.slow
def test_the_readmes_live_one_liner_runs_against_memeval_serve_on_the_default_suite(tmp_path):
    """Issue 41: `system=atomicmemory` needed an undocumented token, then sent no user id on spark25 (its
    scope is `project`). As the README writes it, against a memeval-serve of the default variant, from
    another folder: exit 0, no scope leak, and the in-process run's ranking."""
    from tests.live.test_live_serve import served

    (line,) = [c for c in inline_commands() if "system=atomicmemory" in c]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    common = [f"encoder.cache_dir={CACHE_DIR / 'embeddings'}", "progress=false"]
    script = str(Path(sys.executable).parent / "memeval-run")
    reference = [script, "hydra.run.dir=in_process", *common, "tracking=none"]
    done = subprocess.run(reference, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    with served() as (url, _):
        words = shlex.split(line.replace("<its URL>", url).replace("<token>", "any"))
        args = without_assignments(words)
        env.update(w.split("=", 1) for w in words[: len(words) - len(args)])
        args = [script, *args[1:], "hydra.run.dir=live", *common]
        done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{line}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    metrics = json.loads((tmp_path / "live" / "metrics.json").read_text())
    assert metrics["scope_leaks"] == 0 and metrics["system"]["memories_ingested"] == 306
    assert (tmp_path / "live" / "run.trec").read_text().replace("system", "hybrid") == (
        tmp_path / "in_process" / "run.trec"
    ).read_text()
