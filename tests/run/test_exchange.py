"""Other harnesses' outputs scored as they are (retrieval/retrievers/ranked_file.py) and any run exported in
their shapes (experiments/run_folder/exchange.py): a real run exported to a JSON mapping and to LongMemEval's
retrieval output, read back as the ranked_file channel, writes its own run.trec byte for byte; an id the
suite does not hold keeps its rank as a non-relevant hit; bad files are errors naming file and field."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.configure.build import build_pipeline
from experiments.configure.compose import compose_config, yaml_text
from experiments.configure.settings import load_suite_from_config
from experiments.run.app import execute
from experiments.run_folder.exchange import export
from experiments.run_folder.trec import write_run
from retrieval.pipeline import PipelineConfigError
from tests.support import DATA

EDGES = DATA / "longmemeval" / "longmemeval_official_edges.json"


def _run(overrides: list[str], folder: Path, tag: str):
    cfg = compose_config([*overrides, "cache_dir=null", "tracking=none", "progress=false"])
    suite = load_suite_from_config(cfg)
    output, evaluation = execute(cfg, suite, build_pipeline(cfg))
    folder.mkdir(parents=True, exist_ok=True)
    write_run(output.ranked, folder / "run.trec", tag=tag)
    from omegaconf import OmegaConf

    (folder / "config.yaml").write_text(yaml_text(OmegaConf.to_container(cfg, resolve=True)))
    return output, evaluation


CASES = {
    "spark25-hybrid": ["suite=spark25", "variant=hybrid"],  # RRF: many ties, lowered when written
    "longmemeval-turn": ["suite=longmemeval", f"suite.path={EDGES}", "variant=bm25", "depth=1000"],
    "longmemeval-session": [
        "suite=longmemeval",
        f"suite.path={EDGES}",
        "suite.granularity=session",
        "variant=bm25",
        "depth=1000",
    ],  # fmt: skip
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("shape", ["json", "longmemeval"])
def test_a_run_exported_and_read_back_writes_its_own_run_trec_byte_for_byte(case, shape, tmp_path):
    _run(CASES[case], tmp_path / "original", tag="orig")
    exported = tmp_path / f"ranks.{shape}"
    exported.write_text(export(tmp_path / "original", shape))
    top_n = ["stage.ranked_file.top_n=1000"] if "depth=1000" in CASES[case] else []
    suite_only = [o for o in CASES[case] if not o.startswith("variant=")]
    _run(
        [*suite_only, "variant=ranked_file", f"stage.ranked_file.path={exported}",
         f"stage.ranked_file.format={shape}", *top_n],
        tmp_path / "read_back", tag="orig",
    )  # fmt: skip
    original = (tmp_path / "original" / "run.trec").read_bytes()
    assert original and (tmp_path / "read_back" / "run.trec").read_bytes() == original


def test_an_unknown_id_keeps_its_rank_as_a_non_relevant_hit(tmp_path):
    suite = load_suite_from_config(compose_config(["suite=spark25"]))
    relevant = {q: [m for m, g in judged.items() if g > 0] for q, judged in suite.qrels.items()}
    qid = next(q for q, ms in relevant.items() if ms)
    ranks = tmp_path / "ranks.json"
    ranks.write_text(json.dumps({qid: ["someone-elses-id", relevant[qid][0]]}))  # no scores: 1/rank
    output, evaluation = _run(
        ["suite=spark25", "variant=ranked_file", f"stage.ranked_file.path={ranks}", "metrics=[RR,P@5]",
         "objective=RR"],
        tmp_path / "run", tag="other",
    )  # fmt: skip
    (ranked,) = [r for r in output.ranked if r.query_id == qid]
    assert ranked.memory_ids == ("someone-elses-id", relevant[qid][0])
    assert evaluation.per_query.loc[qid, "RR"] == 0.5  # the relevant memory at rank 2, not promoted to 1
    assert evaluation.metrics["scope_leaks"] == 1  # the foreign id is counted
    assert "someone-elses-id 1" in (tmp_path / "run" / "run.trec").read_text()


@pytest.mark.parametrize(
    ("text", "shape", "names"),
    [
        ('{"code-01": ["ins-0001", "ins-0001"]}', "json", ["question code-01", "ins-0001 is ranked twice"]),
        ('{"code-01": [["ins-0001", "NaN"]]}', "json", ["question code-01[0][1]", "finite number"]),
        ('{"code-01": [', "json", ["not JSON"]),
        ('{"question_id": "code-01"}\n', "longmemeval", [":1:", "retrieval_results.ranked_items"]),
        ('{"nobody": ["ins-0001"]}', "json", ["question nobody is not in the suite"]),
    ],
)
def test_a_bad_file_is_an_error_naming_file_and_field(text, shape, names, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text(text)
    with pytest.raises(PipelineConfigError) as err:
        _run(["suite=spark25", "variant=ranked_file", f"stage.ranked_file.path={bad}",
              f"stage.ranked_file.format={shape}"], tmp_path / "run", tag="x")  # fmt: skip
    assert str(bad) in str(err.value) and all(n in str(err.value) for n in names), str(err.value)


def test_memeval_run_exits_2_on_a_bad_file_and_export_refuses_a_folder_that_is_no_run(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    done = subprocess.run(
        [sys.executable, "-m", "experiments.run", "suite=spark25", "variant=ranked_file", "tracking=none",
         f"stage.ranked_file.path={bad}", f"hydra.run.dir={tmp_path / 'run'}", "cache_dir=null"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2 and str(bad) in done.stderr, done.stderr[-2000:]
    done = subprocess.run(
        [sys.executable, "-m", "experiments.run_folder.exchange", str(tmp_path), "--to", "json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2 and "not a finished run folder" in done.stderr


def test_a_file_with_foreign_ids_is_never_answered_from_the_candidate_cache(tmp_path):
    ranks = tmp_path / "ranks.json"
    ranks.write_text(json.dumps({"code-01": ["someone-elses-id", "ins-0001"]}))
    cfg = compose_config(
        ["suite=spark25", "variant=ranked_file", f"stage.ranked_file.path={ranks}", "tracking=none",
         f"cache_dir={tmp_path / 'cache'}", "progress=false"]
    )  # fmt: skip
    suite = load_suite_from_config(cfg)
    first, _ = execute(cfg, suite, build_pipeline(cfg))
    again, _ = execute(cfg, suite, build_pipeline(cfg))  # a cache hit would skip the build: no foreign row
    assert not again.prefix_cache_hit
    assert [r.memory_ids for r in again.ranked] == [r.memory_ids for r in first.ranked]


def test_export_refuses_a_partial_merge_and_an_edited_run_with_exit_2_and_one_line(tmp_path, capsys):
    """memeval-export reads a folder through the one run-folder check: a partial merge (memeval-merge
    --allow-partial) and a run.trec edited after the run are refused, naming folder and file."""
    import shutil

    from experiments.run_folder.exchange import main
    from tests.sweep_support import sharded_tiny_runs

    runs = sharded_tiny_runs(tmp_path)
    edited = shutil.copytree(runs["whole"], tmp_path / "edited")
    lines = (edited / "run.trec").read_text().splitlines(keepends=True)
    qid, q0, doc, rest = lines[0].split(" ", 3)
    lines[0] = " ".join((qid, q0, f"{doc}-replaced", rest))
    (edited / "run.trec").write_text("".join(lines))
    for folder, file, said in [
        (runs["partial"], "metrics.json", "partial merge"),
        (edited, "per_query.csv", "run.trec"),
    ]:
        with pytest.raises(SystemExit) as exit_:
            main([str(folder), "--to", "json"])
        err = capsys.readouterr().err
        assert exit_.value.code == 2, err
        assert len(err.strip().splitlines()) == 1 and str(folder) in err and file in err and said in err, err
