"""A run folder's ranking in other harnesses' shapes, so a run scored here can be re-scored by theirs.

    memeval-export RUN_DIR --to json -o ranks.json          question id -> [[id, score], ...]
    memeval-export RUN_DIR --to longmemeval -o retrievallog  LongMemEval's retrieval output (jsonl)

Both are read back by the ranked_file channel (retrieval/retrievers/ranked_file.py); a run exported and
read back (with the run's variant name as its tag) writes its own run.trec byte for byte: the ranking and
the scores come from run.trec itself, ordered as trec_eval orders it, scores as their shortest repr.

The LongMemEval shape is the one src/retrieval/run_retrieval.py writes, one question a line:
`retrieval_results.ranked_items[*].corpus_id` in rank order, with each item's `text` and, beyond upstream,
its `score` (upstream's scripts ignore it). On a LongMemEval suite under protocol=official the ids are
upstream's corpus ids (turn `<session>_<n>` or session ids, `noans` where upstream renames), so upstream's
evaluate_retrieval scores the file as it scores its own runs; elsewhere they are memeval's memory ids.
`metrics` is left empty, as upstream's scoring fills it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from experiments.evaluate.metrics.official_longmemeval import LongMemEvalScorer
from experiments.exit_codes import EXIT_BAD_INPUT, RULE, ArgumentParser, console_script
from retrieval.pipeline import PipelineConfigError
from retrieval.retrievers.trec_run import parse_run, trec_eval_order

SHAPES = ("json", "longmemeval")


def ranked_with_scores(run_trec: Path) -> dict[str, list[tuple[str, float]]]:
    """run.trec's (id, score) per query, ranked as trec_eval ranks them (the order memeval wrote)."""
    lines = parse_run(run_trec, run_trec.read_bytes())
    return {q: [(ln.doc_id, ln.score) for ln in trec_eval_order(found)] for q, found in lines.items()}


def to_json(ranked: dict[str, list[tuple[str, float]]]) -> str:
    return (
        json.dumps({q: [[mid, score] for mid, score in hits] for q, hits in ranked.items()}, indent=1) + "\n"
    )


def to_longmemeval(ranked: dict[str, list[tuple[str, float]]], suite: Any) -> str:
    """One LongMemEval retrieval line per question (module docstring); `suite` gives texts and, on an
    official LongMemEval suite, upstream's corpus ids."""
    scorer = suite.scorer if isinstance(suite.scorer, LongMemEvalScorer) else None
    texts = {m.id: m.text for m in suite.memories}
    questions = {q.id: q.text for q in suite.queries}
    lines = []
    for qid, hits in ranked.items():
        corpus = scorer.corpus.get(qid, ()) if scorer else ()
        position = scorer.position.get(qid, {}) if scorer else {}
        items = [
            {
                "corpus_id": corpus[position[mid]] if mid in position else mid,
                "text": texts.get(mid, ""),
                "score": s,
            }
            for mid, s in hits
        ]
        results = {
            "query": questions.get(qid, ""),
            "ranked_items": items,
            "metrics": {"session": {}, "turn": {}},
        }
        lines.append(
            json.dumps({"question_id": qid, "question": questions.get(qid, ""), "retrieval_results": results})
        )
    return "".join(f"{line}\n" for line in lines)


def run_suite(run_dir: Path) -> Any:
    """The suite a run folder's config.yaml names, loaded as the run loaded it."""
    import yaml

    from experiments.suites.load import load_suite

    config = yaml.safe_load((run_dir / "config.yaml").read_text())  # written resolved (run/app.py)
    return load_suite(config["suite"])


def export(run_dir: Path, shape: str) -> str:
    ranked = ranked_with_scores(run_dir / "run.trec")
    return to_json(ranked) if shape == "json" else to_longmemeval(ranked, run_suite(run_dir))


@console_script
def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(
        prog="memeval-export",
        description="Write a run folder's ranking as a JSON mapping or LongMemEval's retrieval output.",
        epilog=RULE,
    )
    parser.add_argument("run_dir", type=Path, help="a finished run folder (its run.trec and config.yaml)")
    parser.add_argument("--to", choices=SHAPES, required=True, help="the shape to write")
    parser.add_argument("-o", "--output", type=Path, help="the file to write (default: stdout)")
    args = parser.parse_args(argv)
    from experiments.run_folder.check import RunFolderError, check_whole_run

    if not (args.run_dir / "metrics.json").is_file():
        print(f"error: {args.run_dir}: not a finished run folder (no metrics.json)", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    try:  # the one check every reader of a finished run passes it through (missing, edited, partial)
        check_whole_run(args.run_dir)
        text = export(args.run_dir, args.to)
    except (PipelineConfigError, RunFolderError) as err:  # a malformed run.trec: file and line named
        print(f"error: {err}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    if args.output is None:
        sys.stdout.write(text)
        return
    tmp = args.output.with_name(f".{args.output.name}.tmp")  # never a half-written file
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(args.output)


if __name__ == "__main__":
    main()
