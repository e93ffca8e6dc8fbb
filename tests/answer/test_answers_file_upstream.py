"""Acceptance check 8 of issue 43: answers from a file, judged by `lexical`, are LoCoMo's answer F1 exactly.

A file of answers for every question of LoCoMo conversations 1-5 (all five categories: seeded perturbations of
the gold answers, tests/answer/test_lexical_upstream.py's `perturbations`) goes through memeval-run with
`answer=file` and no endpoint at all; each question's `answer.lexical.f1` in per_query.csv equals what
upstream's `eval_question_answering` answer lines (tests/upstream/locomo_answer.py, vendored) give for the
same prediction, to 1e-9. Category 5 is scored against its distractor as locomo PR #41 does.
"""

from __future__ import annotations

import csv
import json
import os
import random
import subprocess
import sys

from tests.answer.test_lexical_upstream import perturbations
from tests.support import REPO
from tests.upstream import locomo_answer as upstream


def test_answers_from_a_file_score_as_upstream_on_every_question(locomo_file, tmp_path):
    rng = random.Random(8)
    lines, answers = {}, []
    for sample in json.loads(locomo_file.read_text("utf-8")):
        for j, qa in enumerate(sample["qa"]):
            qa = dict(qa)
            if qa["category"] == 5:
                qa["answer"] = qa["adversarial_answer"]  # locomo PR #41 (upstream raises KeyError as shipped)
            prediction = rng.choice(perturbations(str(qa["answer"]), rng))
            query_id = f"{sample['sample_id']}:q{j}"
            lines[query_id] = {**qa, "prediction": prediction}
            answers.append({"query_id": query_id, "answer": prediction})
    path = tmp_path / "theirs.jsonl"
    path.write_text("".join(json.dumps(a) + "\n" for a in answers), encoding="utf-8")

    proc = subprocess.run(
        [sys.executable, "-m", "experiments.run", "suite=locomo", f"suite.path={locomo_file}",
         "suite.categories=[1,2,3,4,5]", "variant=bm25", "progress=false", "tracking.enabled=false",
         f"hydra.run.dir={tmp_path / 'run'}", f"cache_dir={tmp_path / 'cache'}",
         "answer=file", f"answer.path={path}", "answer.judges=[lexical]"],
        cwd=REPO, capture_output=True, text=True, timeout=900, env={**os.environ, "MLFLOW_TRACKING_URI": ""},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(tmp_path / "run" / "per_query.csv", newline="", encoding="utf-8") as f:
        rows = {row["query_id"]: row for row in csv.DictReader(f)}
    scored = sorted(set(rows) & set(lines))
    # Every question the suite holds was answered from the file and judged (none dropped silently).
    assert len(scored) == len(rows) > 900
    expected = upstream.eval_question_answering_answers([lines[q] for q in scored])
    got = [float(rows[q]["answer.lexical.f1"]) for q in scored]
    assert max(abs(g - e) for g, e in zip(got, expected, strict=True)) <= 1e-9
    assert 0 < sum(e == 0 for e in expected) < len(expected) and any(0 < e < 1 for e in expected)
    assert {lines[q]["category"] for q in scored} == {1, 2, 3, 4, 5}
