"""Instruction-tagging coverage and precision, for every run's metrics.json (EXP-05).

Sits after the pipeline: reads the ingested corpus (annotations set by `instruction_tagging`) and
the suite's qrels. Reports
- coverage: memories tagged `fact_role = "instruction"` (count, share, by role) and the share of the
  instruction_following evidence messages that are tagged;
- precision: the share of tagged memories that really are standing instructions, estimated from
  human judgements of a fixed random sample (datasets/exp05_tagging_judgements/, see its README).
  The sample is stratified by role and drawn from the widest tagging configuration, so the judged
  memories that any narrower configuration tags are a uniform random sample of what it tags; the
  estimate is the role-stratified mean (weights = tagged counts per role) with a 95% normal
  interval (finite-population corrected). A judgement is used only if the memory's text still
  hashes to the judged text.

The `tagging_coverage` report section shows that block for every row of a study.

    python -m experiments.study.questions.tagging sample --suite-path ../shared/beam/100K  # (re)draw it
"""

from __future__ import annotations

import argparse
import csv
import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from experiments.compare.render import Block, Heading, Paragraph, Table
from experiments.shipped_data import shipped_dataset
from experiments.study.sections import SectionContext, register_section
from experiments.suites.beam import load_beam
from experiments.suites.suite import Suite
from retrieval.stages.instruction_tagging import INSTRUCTION, WIDE_MARKERS, InstructionTagging
from retrieval.types import Corpus, Memory

JUDGEMENTS = shipped_dataset("exp05_tagging_judgements") / "beam_100K.tsv"
FIELDS = ("memory_id", "role", "text_sha256", "standing_instruction", "note")


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def load_judgements(path: str | Path = JUDGEMENTS) -> dict[str, dict[str, str]]:
    """memory id -> judgement row; rows with no verdict yet are skipped. Missing file -> {}."""
    path = Path(path)
    if not path.is_file():
        return {}
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    return {r["memory_id"]: r for r in rows if r.get("standing_instruction", "").strip() in ("0", "1")}


def is_tagged(memory: Memory) -> bool:
    return memory.annotations.get("fact_role") == INSTRUCTION


def wilson(p: float, n: float, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a proportion p observed on n items."""
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return float(max(0.0, centre - half)), float(min(1.0, centre + half))


def precision_estimate(tagged: list[Memory], judgements: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
    """Role-stratified precision of the tagged set from the judged sample (None where nothing judged)."""
    strata: dict[str, dict[str, Any]] = {}
    for memory in tagged:
        s = strata.setdefault(str(memory.role), {"tagged": 0, "verdicts": []})
        s["tagged"] += 1
        row = judgements.get(memory.id)
        if row is not None and row["text_sha256"] == text_sha256(memory.text):
            s["verdicts"].append(int(row["standing_instruction"]))
    total = sum(s["tagged"] for s in strata.values())
    by_role, estimate, variance, covered = {}, 0.0, 0.0, 0
    for role, s in sorted(strata.items()):
        n, big_n = len(s["verdicts"]), s["tagged"]
        p = float(np.mean(s["verdicts"])) if n else None
        by_role[role] = {"tagged": big_n, "judged": n, "precision": p}
        if n:
            w = big_n / total
            covered += big_n
            estimate += w * p
            fpc = (big_n - n) / (big_n - 1) if big_n > 1 else 0.0
            variance += w * w * p * (1 - p) / n * fpc
    complete = total > 0 and covered == total
    judged = sum(v["judged"] for v in by_role.values())
    # Wilson interval at the design's effective sample size (the judged count when the variance is
    # 0, e.g. every judged memory agreed), so a perfect sample still gets an honest interval.
    n_eff = estimate * (1 - estimate) / variance if variance > 0 else judged
    return {
        "precision": estimate if complete else None,
        "precision_ci95": list(wilson(estimate, n_eff)) if complete and n_eff > 0 else None,
        "precision_judged": int(judged),
        "precision_by_role": by_role,
    }


def tagging_report(
    suite: Suite, corpus: Corpus, judgements: Mapping[str, Mapping[str, str]] | None = None
) -> dict[str, Any]:
    """The `tagging` block of metrics.json (zeros when no tagging stage ran)."""
    judgements = load_judgements() if judgements is None else judgements
    tagged = [m for m in corpus.memories if is_tagged(m)]
    tagged_ids = {m.id for m in tagged}
    evidence = {
        mid
        for q in suite.queries
        if q.labels.get("ability") == "instruction_following"
        for mid, grade in suite.qrels.get(q.id, {}).items()
        if grade > 0
    }
    by_role: dict[str, int] = {}
    for m in tagged:
        by_role[str(m.role)] = by_role.get(str(m.role), 0) + 1
    return {
        "tagged": len(tagged),
        "tagged_share": len(tagged) / len(corpus) if len(corpus) else 0.0,
        "tagged_by_role": by_role,
        "instruction_evidence": len(evidence),
        "instruction_evidence_tagged": len(evidence & tagged_ids),
        "instruction_evidence_tagged_share": len(evidence & tagged_ids) / len(evidence) if evidence else None,
        **precision_estimate(tagged, judgements),
    }


def draw_sample(memories: list[Memory], per_role: Mapping[str, int], seed: int) -> list[Memory]:
    """A seeded random sample of the given memories, `per_role[role]` of each role, in id order."""
    rng = np.random.default_rng(seed)
    chosen = []
    for role, k in sorted(per_role.items()):
        pool = sorted((m for m in memories if m.role == role), key=lambda m: m.id)
        picks = rng.choice(len(pool), size=min(k, len(pool)), replace=False)
        chosen += [pool[i] for i in sorted(picks)]
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sample = sub.add_parser("sample", help="draw the judgement sample (verdicts left empty)")
    sample.add_argument("--suite-path", default="../shared/beam/100K")
    sample.add_argument("--user", type=int, default=50)
    sample.add_argument("--assistant", type=int, default=30)
    sample.add_argument("--seed", type=int, default=5)
    sample.add_argument("--out", default=str(JUDGEMENTS))
    args = parser.parse_args()
    suite = load_beam(args.suite_path)
    # The widest configuration (wide markers, any role): every narrower one tags a subset of it.
    widest = InstructionTagging(markers=WIDE_MARKERS, roles=None)
    tagged = [m for m in widest(suite.memories) if is_tagged(m)]
    picked = draw_sample(tagged, {"user": args.user, "assistant": args.assistant}, args.seed)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as fh:
        writer = csv.writer(fh, delimiter="\t", lineterminator="\n")
        writer.writerow(FIELDS)
        for m in picked:
            writer.writerow([m.id, m.role, text_sha256(m.text), "", ""])
    print(f"{len(picked)} of {len(tagged)} tagged memories written to {out}")


if __name__ == "__main__":
    main()


@register_section("tagging_coverage")
def tagging_coverage(ctx: SectionContext) -> list[Block]:
    """Per row, the `tagging` block of its metrics.json: coverage and judged precision."""
    rows = {}
    for name, run in ctx.comparison.run_by_label.items():
        t = run.summary.get("tagging") or {}
        share, precision, ci = (
            t.get("instruction_evidence_tagged_share"),
            t.get("precision"),
            t.get("precision_ci95"),
        )
        rows[name] = {
            "memories tagged": str(t.get("tagged", 0)),
            "share of IF evidence tagged": "n/a" if share is None else f"{share:.3f}",
            "precision [95% CI]": "n/a (no judged memory is tagged)"
            if precision is None
            else f"{precision:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]",
            "judged in sample": str(t.get("precision_judged", 0)),
        }
    return [
        Heading("Tagging coverage and precision"),
        Paragraph(
            "Memories the `instruction_tagging` stage tagged as standing instructions, the share of the "
            "instruction_following evidence among them, and precision: the role-stratified estimate from the "
            "judged random sample in `datasets/exp05_tagging_judgements/` (see its README), Wilson 95% "
            "interval; n/a where a tagged memory's role has no judged memory (e.g. another BEAM tier)."
        ),
        Table(pd.DataFrame.from_dict(rows, orient="index"), "run"),
    ]
