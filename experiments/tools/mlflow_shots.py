"""`make mlflow-shots`: screenshots of what a researcher sees in the MLflow UI, for the README.

    python -m experiments.tools.mlflow_shots                   # writes docs/img/mlflow-*.png
    python -m experiments.tools.mlflow_shots --keep shots/    # and keeps the store, runs and raw shots

Into a fresh SQLite store it runs a 3-point sweep (spark25, exp05, boost weight 0, 0.2, 0.35) and a
study of the same weights, as a user does (memeval-run -m, memeval-study), starts `mlflow ui` on
127.0.0.1, and takes each page with headless Chromium (Debian's `chromium` package; `--chromium` names
another binary), giving the React app a virtual-time budget to fetch and render. Pages: the experiment
as it opens (its runs table: the experiment carries `mlflow.experimentKind`), a sweep child, the compare
page of the three children, and the study report's index.html in the artifact viewer. Each PNG is
resized to `--width` and stored as a 256-colour palette image (a UI screenshot loses nothing visible).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
from PIL import Image

from experiments import PROJECT_ROOT

WEIGHTS = "0,0.2,0.35"
REPORT_HTML = "report/index.html"  # where memeval-study logs the report under its parent run
ML_WORKFLOW = "machine_learning"  # the UI's "Model training" switch
# Long pages are taken in a taller window: a child's metrics and params, a figure of the study report.
# The runs table is short (a row per parent: children fold under it) and is taken in a lower one.
HEIGHT = {"mlflow-runs": 560, "mlflow-child": 2000, "mlflow-study-report": 2600}
STUDY = """\
title: Instruction-boost weight on spark25
description: exp05 at three boost weights against weight 0 (the sweep beside it, as a study).
suite: {name: spark25}
variant: exp05
sweep:
  stage.instruction_boost.weight: [0, 0.2, 0.35]
baseline: stage.instruction_boost.weight=0
metrics: [nDCG@10, P@5, R@10, RR]
primary: nDCG@10
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> None:
    print("$ " + " ".join(args[:1] + args[1:]), flush=True)
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(
            f"failed ({done.returncode}): {' '.join(args)}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        )


def make_runs(work: Path, uri: str, env: dict[str, str]) -> None:
    """The sweep and the study, into `uri`, with the checkout's embedding cache (cheap once warm)."""
    bin_dir = Path(sys.executable).parent
    embeddings = f"encoder.cache_dir={PROJECT_ROOT / '.memeval_cache' / 'embeddings'}"
    _run(
        [str(bin_dir / "memeval-run"), "-m", "variant=exp05", f"stage.instruction_boost.weight={WEIGHTS}",
         "progress=false", f"cache_dir={work / 'cache'}", embeddings, f"tracking.tracker.uri={uri}",
         f"hydra.sweep.dir={work / 'sweep'}"],
        work, env,
    )  # fmt: skip
    (work / "conf" / "study").mkdir(parents=True, exist_ok=True)
    (work / "conf" / "study" / "boost_spark25.yaml").write_text(STUDY)
    # Its own cache: the sweep's finished runs would answer the study's rows otherwise.
    _run(
        [str(bin_dir / "memeval-study"), f"--config-dir={work / 'conf'}", "study=boost_spark25",
         f"tracking.tracker.uri={uri}", f"cache_dir={work / 'cache2'}", f"runs_root={work / 'studies'}",
         f"output_dir={work / 'study_report'}"],
        work, env,
    )  # fmt: skip


def pages(uri: str) -> dict[str, str]:
    """Name -> the UI's route (after `#`) for each screenshot."""
    import mlflow  # ~4.5 s to import: only finding the runs to show needs it

    client = mlflow.MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("memeval")
    eid = experiment.experiment_id
    (sweep,) = client.search_runs([eid], "tags.`memeval.sweep_key` != ''")
    children = client.search_runs([eid], f"tags.`mlflow.parentRunId` = '{sweep.info.run_id}'")
    children = sorted(children, key=lambda r: r.info.run_name)
    (study,) = client.search_runs([eid], "tags.`memeval.study` = 'boost_spark25'")
    child = children[-1]
    compare = urllib.parse.urlencode(
        {"runs": json.dumps([c.info.run_id for c in children]), "experiments": json.dumps([eid])}
    )
    # MLflow 3.17's UI takes the experiment's page kind from its GenAI / Model training switch (kept per
    # browser, default GenAI), not from the experiment's `mlflow.experimentKind` tag; `workflowType` in
    # the URL sets the switch.
    ml = f"workflowType={ML_WORKFLOW}"
    return {
        "mlflow-runs": f"/experiments/{eid}?{ml}",
        "mlflow-child": f"/experiments/{eid}/runs/{child.info.run_id}?{ml}",
        "mlflow-compare": f"/compare-runs?{compare}&{ml}",
        "mlflow-study-report": f"/experiments/{eid}/runs/{study.info.run_id}/artifacts/{REPORT_HTML}?{ml}",
    }


def serve(uri: str, work: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """`mlflow ui` on a free 127.0.0.1 port, once it answers."""
    port = _free_port()
    mlflow_bin = Path(sys.executable).parent / "mlflow"
    log = (work / "mlflow-ui.log").open("w")
    server = subprocess.Popen(
        [str(mlflow_bin), "ui", "--backend-store-uri", uri, "--host", "127.0.0.1", "--port", str(port)],
        cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2) as answer:
                if answer.status == 200:
                    return server, base
        except OSError:
            time.sleep(1)
    server.terminate()
    sys.exit(f"mlflow ui did not answer on {base} within 120 s (log: {work / 'mlflow-ui.log'})")


def shoot(chromium: str, url: str, out: Path, size: str, budget_ms: int) -> None:
    """One page, rendered by headless Chromium after `budget_ms` of virtual time."""
    with tempfile.TemporaryDirectory(prefix="memeval-chromium-") as profile:
        subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--user-data-dir={profile}", f"--window-size={size}", f"--virtual-time-budget={budget_ms}",
             f"--screenshot={out}", url],
            check=True, capture_output=True, timeout=180,
        )  # fmt: skip


def assistant_panel_left(image) -> int | None:
    """Where the UI's assistant panel begins (it takes the right of every page), or None: the first
    column from the right, past the page's margin, that is page background from 15% to 85% of the height."""
    pixels = np.asarray(image.convert("RGB")).astype(int)
    height, width, _ = pixels.shape
    background = pixels[height // 2, 2]  # the sidebar's margin
    band = pixels[int(height * 0.15) : int(height * 0.85)]
    empty = (np.abs(band - background).max(axis=2) <= 3).all(axis=0)
    return next((x for x in range(width - 40, width // 2, -1) if empty[x]), None)


def shrink(raw: Path, out: Path, width: int) -> None:
    """`raw` without the assistant panel, at `width` pixels wide, as a palette PNG."""
    with Image.open(raw) as image:
        page = image.convert("RGB")
        page = page.crop((0, 0, assistant_panel_left(page) or page.width, page.height))
        height = round(page.height * width / page.width)
        small = page.resize((width, height), Image.LANCZOS)
        small.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(out, optimize=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mlflow_shots", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=PROJECT_ROOT / "docs" / "img")
    parser.add_argument(
        "--keep",
        type=Path,
        help="work folder to keep (default: a temporary one); its runs are reused next time",
    )
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    parser.add_argument("--width", type=int, default=1200, help="width of the committed PNGs")
    parser.add_argument("--window", default="1600,1000", help="browser window, WIDTH,HEIGHT")
    parser.add_argument("--budget-ms", type=int, default=20000, help="virtual time the page gets to render")
    parser.add_argument("--tries", type=int, default=2, help="takes of each page; the fullest is kept")
    args = parser.parse_args(argv)
    if shutil.which(args.chromium) is None:
        print(f"error: no {args.chromium!r} (apt-get install chromium, or give --chromium)", file=sys.stderr)
        return 2
    work = Path(args.keep or tempfile.mkdtemp(prefix="memeval-shots-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["HF_HUB_OFFLINE"] = "1"
    uri = f"sqlite:///{work / 'mlflow.db'}"
    if not (work / "study_report" / "index.html").is_file():  # a kept folder's runs are taken again
        make_runs(work, uri, env)
    server, base = serve(uri, work, env)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        for name, route in pages(uri).items():
            raw = work / f"{name}.raw.png"
            size = args.window if name not in HEIGHT else f"{args.window.split(',')[0]},{HEIGHT[name]}"
            # The page's data arrive while virtual time runs, so a take can miss some (the study report's
            # frame came out blank once in three): the fullest of `--tries` takes, by PNG size, is kept.
            takes = []
            for take in range(args.tries):
                takes.append(work / f"{name}.take{take}.png")
                shoot(args.chromium, f"{base}/#{route}", takes[-1], size, args.budget_ms)
            shutil.copyfile(max(takes, key=lambda t: t.stat().st_size), raw)
            shrink(raw, args.out / f"{name}.png", args.width)
            print(f"{args.out / (name + '.png')}: {base}/#{route}")
    finally:
        server.terminate()
        server.wait(timeout=30)
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
