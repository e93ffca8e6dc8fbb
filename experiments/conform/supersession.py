"""Supersession and must-not: after an update that replaces a fact, the new memory ranks above the old.

A small suite of facts, each stated, then restated with a later `created_at` ("... now ..."). The
question about a fact judges the current memory relevant (grade 1) and the superseded one must-not
(grade -1), and is scored with the harness's own harm@k (experiments/evaluate/metrics/harm.py).
"""

from __future__ import annotations

import numpy as np

from experiments.conform.check import Check, Outcome, failed, passed
from experiments.conform.probe import Probe
from experiments.evaluate.metrics import parse_metric

# (subject, old value, new value): the question asks where the subject lives
FACTS = (
    ("Alice", "Paris", "Berlin"),
    ("Bob", "Lisbon", "Oslo"),
    ("Carmen", "Quito", "Lima"),
    ("Dmitri", "Kyiv", "Riga"),
)
HARM_K = 3


class SupersessionCurrentAboveSuperseded(Check):
    """After a fact is restated with a later date, a question about it ranks the current memory above
    the superseded one (and finds it within k); harm@3 of the superseded memories is reported."""

    def run(self, probe: Probe) -> Outcome:
        scope = probe.scope({"user": "facts"})
        memories = []
        for i, (who, old, new) in enumerate(FACTS):
            name = f"{who} {probe.token(who)}"  # a made-up surname: no other memory is about them
            memories += [
                probe.memory(scope, f"{i}.old", f"{name} lives in {old}.", created_at="2024-01-01T09:00:00Z"),
                probe.memory(
                    scope,
                    f"{i}.new",
                    f"{name} moved, and lives in {new} now.",
                    created_at="2024-06-01T09:00:00Z",
                ),
            ]
        probe.store(scope, memories)
        harm = parse_metric(f"harm@{HARM_K}")
        wrong, harms = [], {}
        for i, (who, _, _) in enumerate(FACTS):
            found = probe.search(scope, f"Where does {who} {probe.token(who)} live?", 10, step=f"ask.{i}")
            current, superseded = probe.mid(f"{i}.new"), probe.mid(f"{i}.old")
            grades = np.array(
                [[1 if m == current else -1 if m == superseded else 0 for m in found.ids] + [0] * HARM_K],
                dtype=np.int64,
            )
            harms[found.step] = float(
                harm(np.clip(grades, 0, None), np.array([1]), np.array([[1]]), grades)[0]
            )
            if current not in found.ids:
                wrong.append(f"{found.step}: the current memory did not come back ({found.ids})")
            elif superseded in found.ids and found.ids.index(superseded) < found.ids.index(current):
                wrong.append(f"{found.step}: the superseded memory ranks above the current one ({found.ids})")
        details = {f"harm@{HARM_K}": harms, f"mean harm@{HARM_K}": float(np.mean(list(harms.values())))}
        if wrong:
            return failed("; ".join(wrong), **details)
        return passed(f"the current memory first for {len(FACTS)} restated facts", **details)
