"""The gate's cost rules, beside its quality rules: bounds on what a run returns and how long it takes.

    cost_rules: ["tokens_returned_p95 <= 2000", "latency_ms_p95 <= 50"]    # in a gate config (YAML)

Each rule names a number of the run's metrics.json `overall` (tokens_returned_p50/p95/mean,
chars_returned_mean, memories_returned_mean, latency_ms_p50/p95), a comparison (<=, <, >=, >) and a bound;
each gets its own verdict line. A rule whose number the run does not have (latency answered from a cache is
null: docs/metrics.md) cannot be judged: the gate says so and exits 2, never passes it silently.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

COST_NAMES = (
    "tokens_returned_p50", "tokens_returned_p95", "tokens_returned_mean", "chars_returned_mean",
    "memories_returned_mean", "latency_ms_p50", "latency_ms_p95",
)  # fmt: skip
_OPS = {"<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt}
_RULE = re.compile(r"^\s*([A-Za-z0-9_]+)\s*(<=|>=|<|>)\s*([-+0-9.eE]+)\s*$")


@dataclass(frozen=True)
class CostRule:
    name: str
    op: str
    bound: float

    def __str__(self) -> str:
        return f"{self.name} {self.op} {self.bound:g}"


@dataclass(frozen=True)
class CostCheck:
    rule: CostRule
    value: float
    passed: bool


def parse_cost_rules(raw: Any, where: str) -> tuple[CostRule, ...]:
    """A gate config's `cost_rules` (a list of `name op bound` strings); ValueError naming file and rule."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ValueError(f"{where}: cost_rules: expected a list such as ['tokens_returned_p95 <= 2000']")
    rules = []
    for n, text in enumerate(raw):
        found = _RULE.match(str(text))
        if not found or found[1] not in COST_NAMES:
            raise ValueError(
                f"{where}: cost_rules[{n}]: {text!r} is not `<name> <=|<|>=|> <number>` with a name among "
                f"{', '.join(COST_NAMES)}"
            )
        try:
            bound = float(found[3])
        except ValueError:
            raise ValueError(f"{where}: cost_rules[{n}]: {found[3]!r} is not a number") from None
        rules.append(CostRule(found[1], found[2], bound))
    return tuple(rules)


def check_costs(rules: Sequence[CostRule], overall: Mapping[str, Any], source: str) -> tuple[CostCheck, ...]:
    """Each rule judged on the run's overall numbers; ValueError (cannot judge) where one is missing."""
    checks = []
    for rule in rules:
        value = overall.get(rule.name)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ValueError(
                f"cost rule {rule}: the run {source} has no {rule.name} (null where the work was answered "
                "from a cache and not timed, absent in runs made before tokens were counted): cannot judge"
            )
        checks.append(CostCheck(rule, float(value), bool(_OPS[rule.op](float(value), rule.bound))))
    return tuple(checks)


def cost_verdict_lines(checks: Sequence[CostCheck], summary: Mapping[str, Any]) -> list[str]:
    """One line per cost rule, with what the number covers (the tokenizer, the latency's stages)."""
    tokenizer = (summary.get("cost") or {}).get("tokenizer", "?")
    out = []
    for c in checks:
        covers = (
            f"tokens by {tokenizer}"
            if c.rule.name.startswith(("tokens", "chars", "memories"))
            else ("per-query wall time of retrieval and ranking, index build excluded")
        )
        out.append(
            f"- **cost {c.rule}: {'pass' if c.passed else 'FAIL'}**: the run's {c.rule.name} is "
            f"{c.value:.4g} ({covers})."
        )
    return out
