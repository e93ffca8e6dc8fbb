"""One run scored under each protocol and granularity memeval knows, with the spread: how much of a
published difference is convention.

    python -m experiments.compare.protocols RUN_DIR          (memeval-report --protocols RUN_DIR)

The run's ranking (its run.trec) is scored, not re-run: under `suite.protocol` official and memeval, at
turn and session granularity, and on LoCoMo with categories 1-4 and 1-5. A turn ranking becomes a session
ranking as upstream's session view makes it (each turn's session, first appearance kept: the session
suite's memories list their turns); a session ranking cannot become a turn one, so those rows are
absent and said so. Each cell is the mean over the queries that setting scores (its answerable queries;
under official, upstream's own question set); `spread` is each metric's max - min over the settings.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from experiments.evaluate.metrics.official import check_metrics
from experiments.evaluate.table import metric_columns
from experiments.exit_codes import EXIT_BAD_INPUT, ArgumentParser, console_script
from experiments.run_folder.check import RunFolderError, check_whole_run
from experiments.run_folder.trec import read_run

CATEGORY_SETS = {"1-4": [1, 2, 3, 4], "1-5": [1, 2, 3, 4, 5]}


def settings(suite_config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every (protocol, granularity[, categories]) the run's suite config has options for."""
    axes: dict[str, list[Any]] = {}
    if "protocol" in suite_config:
        axes["protocol"] = ["official", "memeval"]
    if "granularity" in suite_config:
        axes["granularity"] = ["turn", "session"]
    if "categories" in suite_config:
        axes["categories"] = list(CATEGORY_SETS)
    return [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())]


def _ranking_for(suite: Any, ranking: Mapping[str, list[str]], own: str, target: str) -> dict | None:
    if own == target:
        return dict(ranking)
    if own != "turn" or target != "session":
        return None
    session_of = {t: m.id for m in suite.memories for t in m.metadata.get("turns", ())}
    return {
        q: list(dict.fromkeys(session_of[t] for t in ids if t in session_of)) for q, ids in ranking.items()
    }


def score_under(run_dir: Path) -> tuple[pd.DataFrame, list[str]]:
    """(a row per setting, a column per metric, plus `spread`), and the notes on settings left out. The
    folder is read through the one run-folder check (experiments/run_folder/check.py): a folder with a file
    missing or edited, or a partial merge, is a RunFolderError naming folder and file."""

    from experiments.suites.load import load_suite

    checked = check_whole_run(run_dir)
    config = checked.config
    suite_config = dict(config["suite"])
    # the suite's primary metric (its benchmark's headline: recall_all@5 on LongMemEval) and the run's own
    metrics = list(
        dict.fromkeys(
            [*([suite_config["primary"]] if suite_config.get("primary") else []), *config["metrics"]]
        )
    )
    ranking = read_run(run_dir / "run.trec", checked.texts["run.trec"].encode())  # the bytes checked
    own = str(suite_config.get("granularity", "turn"))
    rows, notes = {}, []
    for setting in settings(suite_config):
        name = ", ".join(f"{k}={v}" for k, v in setting.items())
        values = {**setting}
        if "categories" in setting:
            values["categories"] = CATEGORY_SETS[setting["categories"]]
        try:
            suite = load_suite({**suite_config, **values})
        except Exception as err:  # a setting the loader refuses for this suite (e.g. round under official)
            notes.append(f"{name}: not available ({str(err).splitlines()[0][:120]})")
            continue
        run = _ranking_for(suite, ranking, own, str(setting.get("granularity", own)))
        if run is None:
            notes.append(f"{name}: a {own} ranking cannot be scored at {setting['granularity']} granularity")
            continue
        usable = [m for m in metrics if _scorable(suite.scorer, m)]
        # averaged as the run averages them (experiments/evaluate/table.py): over the answerable queries
        ids = [q.id for q in suite.queries if not suite.is_abstention(q.id)]
        columns = metric_columns(suite.scorer, suite.qrels, run, usable, ids)
        rows[name] = {m: float(np.nanmean(columns[m])) if m in columns else np.nan for m in metrics}
    table = pd.DataFrame.from_dict(rows, orient="index")
    if len(table):
        table.loc["spread"] = table.max() - table.min()
    return table, notes


def _scorable(scorer: Any, metric: str) -> bool:
    try:
        check_metrics(scorer, [metric])
    except ValueError:
        return False
    return True


@console_script
def main(argv: Sequence[str] | None = None) -> None:
    parser = ArgumentParser(prog="memeval-protocols", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="a finished run folder (run.trec, config.yaml)")
    args = parser.parse_args(argv)
    try:
        table, notes = score_under(args.run_dir)
    except RunFolderError as err:  # one line naming the folder and the file
        print(f"error: {err}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    print(table.to_string(float_format=lambda v: f"{v:.4f}"))
    for note in notes:
        print(f"note: {note}")


if __name__ == "__main__":
    main()
