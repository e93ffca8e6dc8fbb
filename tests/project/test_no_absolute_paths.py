"""No committed file names a folder of the machine it was written on (issue 25).

Reports, baselines and docs are read on other machines: a path such as `<checkout>/outputs/...` or
`<tmp>/be/ce2` says nothing there and leaks where a developer worked. Runs and folders are written
relative to the checkout (`outputs/...`, `.memeval_cache/...`, `../shared/beam/...`), and reports
print run sources that way (`experiments.compare.analysis.portable_source`).
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

from experiments.compare.analysis import portable_source
from tests.support import REPO

# This machine's roots: the checkout's parent, the home folder, the temporary folder, and the usual ones.
MACHINE_ROOTS = sorted(
    {
        "/work/",
        "/root/",
        "/home/",
        "/tmp/",
        f"{REPO.parent.as_posix()}/",
        f"{Path.home().as_posix()}/",
        f"{Path(tempfile.gettempdir()).as_posix()}/",
    }
    - {"//"}
)
# An absolute path starts the string or follows something that is not part of a name (`file://` included).
ABSOLUTE = re.compile("(?<![\\w.~$-])(?:" + "|".join(re.escape(r) for r in MACHINE_ROOTS) + ")")
THIS_FILE = Path(__file__).resolve().relative_to(REPO).as_posix()  # it spells the roots out


def tracked_text_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    return [name for name in out.decode().split("\0") if name and name != THIS_FILE]


def test_no_tracked_file_holds_an_absolute_path_of_this_machine():
    found = []
    for name in tracked_text_files():
        path = REPO / name
        if not path.is_file():  # deleted in the working tree, not yet committed
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:  # binary (PNG)
            continue
        text = data.decode("utf-8", "replace")
        if not any(root in text for root in MACHINE_ROOTS):  # a substring scan first: 15 MB of reports
            continue
        for number, line in enumerate(text.splitlines(), 1):
            match = ABSOLUTE.search(line)
            if match:
                found.append(f"{name}:{number}: ...{line[max(0, match.start() - 40) : match.end() + 60]}...")
    assert not found, "absolute paths of this machine in committed files:\n" + "\n".join(found[:30])


def test_the_pattern_catches_what_it_is_for():
    assert ABSOLUTE.search("| /work/wt/x/outputs/studies/a | beam |")
    assert ABSOLUTE.search("--out /tmp/be/ce2")
    assert ABSOLUTE.search("hydra.searchpath=[file:///root/conf]")
    assert not ABSOLUTE.search("outputs/studies/a ../shared/beam/500K $TMPDIR/be/ce2 suite.path=/data/beam")


def test_a_report_prints_run_sources_without_the_machine_s_folders(tmp_path):
    inside = tmp_path / "outputs" / "studies" / "s" / "row"
    assert portable_source(str(inside), cwd=tmp_path) == "outputs/studies/s/row"
    other = "/elsewhere/checkout/outputs/studies/s/row"  # a run another checkout made and a study reused
    assert portable_source(other, cwd=tmp_path) == "outputs/studies/s/row"
    assert portable_source("/elsewhere/folder/run7", cwd=tmp_path) == "…/run7"
    assert portable_source("mlflow:0123abcd", cwd=tmp_path) == "mlflow:0123abcd"
    assert portable_source("outputs/x", cwd=tmp_path) == "outputs/x"
