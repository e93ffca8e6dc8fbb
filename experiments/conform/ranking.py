"""The ranking contract: k is honoured, scores are finite and non-increasing, a ranking is repeatable."""

from __future__ import annotations

import math

from experiments.conform.check import Check, Outcome, failed, not_applicable, passed
from experiments.conform.probe import Exchange, Probe
from retrieval.types import Memory

NO_SCORES = "the service returns no scores: its order is its ranking"


def ranked_scope(probe: Probe, n: int = 8) -> tuple[dict[str, str], list[Memory]]:
    """A scope of `n` memories that all hold the word `probe.token("all")`, and some of them (1 in 2, 1
    in 3) the words "even" and "third" as well, so scores differ; beside n + 2 fillers (Probe.fillers)."""
    scope = probe.scope({"user": "ranked"})
    every, even, third = probe.token("all"), probe.token("even"), probe.token("third")
    memories = []
    for j in range(n):
        words = [probe.token(f"m{j}"), every] + [even] * (j % 2 == 0) + [third] * (j % 3 == 0)
        memories.append(probe.memory(scope, f"m{j}", " ".join(words) + f" item {j}"))
    probe.store(scope, [*probe.fillers(scope, n + 2), *memories])
    return scope, memories


def queries(probe: Probe) -> list[str]:
    every, even, third = probe.token("all"), probe.token("even"), probe.token("third")
    return [every, f"{every} {even}", f"{every} {third} {even}"]


class RankingKHonoured(Check):
    """k is honoured: never more than k hits, and fewer only when the scope holds fewer matching
    memories (k = 1, 3, 5 on a word 8 memories of the scope hold; k = 10: at least those 8)."""

    def run(self, probe: Probe) -> Outcome:
        scope, memories = ranked_scope(probe)
        wrong = []
        for k in (1, 3, 5, 10):
            found = probe.search(scope, probe.token("all"), k, step=f"k{k}")
            expected = min(k, len(memories))
            if len(found.ids) > k:
                wrong.append(f"k={k}: {len(found.ids)} hits ({found.step})")
            elif len(found.ids) < expected:
                wrong.append(
                    f"k={k}: {len(found.ids)} hits where the scope holds {len(memories)} ({found.step})"
                )
        if wrong:
            return failed("k not honoured: " + "; ".join(wrong), wrong=wrong)
        return passed("k = 1, 3, 5 answered with exactly k hits, k = 10 with 8 to 10")


def _scored(probe: Probe) -> tuple[list[Exchange], list[float | None]]:
    scope, _ = ranked_scope(probe)
    asked = [probe.search(scope, q, 10, step=f"q{i}") for i, q in enumerate(queries(probe))]
    return asked, [h.score for e in asked for h in e.hits]


class RankingScoresFinite(Check):
    """Every score given is a finite number (no NaN, no infinity)."""

    def run(self, probe: Probe) -> Outcome:
        asked, scores = _scored(probe)
        if all(s is None for s in scores):
            return not_applicable(NO_SCORES)
        bad = [
            f"{h.id}: {h.score!r} ({e.step})"
            for e in asked
            for h in e.hits
            if h.score is not None and not math.isfinite(h.score)
        ]
        if bad:
            return failed("scores that are not finite: " + "; ".join(bad[:5]), bad=bad)
        return passed(f"{len(scores)} scores, all finite")


class RankingScoresNonIncreasing(Check):
    """Scores never increase down a ranking (each pair of finite neighbours)."""

    def run(self, probe: Probe) -> Outcome:
        asked, scores = _scored(probe)
        if all(s is None for s in scores):
            return not_applicable(NO_SCORES)
        rises = []
        for e in asked:
            pairs = zip(e.hits, e.hits[1:], strict=False)
            rises += [
                f"{a.id} {a.score} < {b.id} {b.score} ({e.step})"
                for a, b in pairs
                if a.score is not None
                and b.score is not None
                and math.isfinite(a.score)
                and math.isfinite(b.score)
                and b.score > a.score
            ]
        if rises:
            return failed("a score rises down the ranking: " + "; ".join(rises[:5]), rises=rises)
        return passed("scores never rise down a ranking")


class RankingSameQuerySameRanking(Check):
    """The same query asked twice gives the same ranking (unless the service is declared
    non-deterministic: conform.nondeterministic=true)."""

    def run(self, probe: Probe) -> Outcome:
        if probe.settings.nondeterministic:
            return not_applicable("declared non-deterministic (conform.nondeterministic=true)")
        scope, _ = ranked_scope(probe)
        differ = []
        for i, q in enumerate(queries(probe)):
            first, second = (probe.search(scope, q, 10, step=f"q{i}.{n}") for n in ("first", "second"))
            if first.ids != second.ids:
                differ.append(f"{first.step}: {first.ids} then {second.ids}")
        if differ:
            return failed("the same query ranked differently: " + "; ".join(differ), differ=differ)
        return passed(f"{len(queries(probe))} queries asked twice, the same ranking each time")
