"""Granularity: what one memory is (a turn, a round, a session), as a suite option of conversation suites.

A conversation loader builds its suite a turn (one message) per memory, then `regroup` makes the other
units from it, so evidence maps up the same way for every benchmark:
- `turn`: one message per memory (unchanged);
- `round`: a user turn with the replies that follow it, up to the next user turn. In conversations with no
  `user` role (LoCoMo: two named speakers) the session's first speaker plays the user;
- `session`: a whole session.
A unit's text is its turns' texts, one per line; its id is `<session id>` or `<session id>#r<n>`, its
`created_at` its first turn's. A unit's grade for a query is the highest grade of its judged turns (a
session holding an evidence turn is relevant), so granularity changes what is scored, never which
evidence there is. Turns are taken in suite order: loaders give each conversation's turns in order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from types import MappingProxyType

from experiments.suites.suite import Problem, Suite, SuiteError
from retrieval.types import Memory

GRANULARITIES = ("turn", "round", "session")


def check_granularity(granularity: str, where: str = "suite.granularity") -> None:
    if granularity not in GRANULARITIES:
        raise SuiteError(
            [
                Problem(
                    "suite config",
                    None,
                    where,
                    f"must be one of {', '.join(GRANULARITIES)}, got {granularity!r}",
                )
            ]
        )


def _units(
    memories: tuple[Memory, ...], granularity: str, session_of: Callable[[Memory], str]
) -> list[list[Memory]]:
    """The turns of each unit, in order (a unit never crosses a session or a scope)."""
    sessions: dict[tuple[str, str], list[Memory]] = {}
    for m in memories:
        sessions.setdefault((m.scope_key, session_of(m)), []).append(m)
    if granularity == "session":
        return list(sessions.values())
    units: list[list[Memory]] = []
    for turns in sessions.values():
        user = "user" if any(t.role == "user" for t in turns) else turns[0].role
        current: list[Memory] = []
        for turn in turns:
            if turn.role == user and current:
                units.append(current)
                current = []
            current.append(turn)  # turns before a session's first user turn make a round of their own
        units.append(current)
    return units


def regroup(suite: Suite, granularity: str, session_of: Callable[[Memory], str]) -> Suite:
    """The suite with a memory per `granularity` unit and its qrels mapped up (max grade); `turn`: itself.

    `session_of(turn)` names the turn's session with an id unique in its scope (it becomes the unit's id).
    """
    check_granularity(granularity)
    if granularity == "turn":
        return replace(suite, tags={**suite.tags, "granularity": "turn"})
    unit_of: dict[str, str] = {}
    memories: list[Memory] = []
    counts: dict[str, int] = {}
    for turns in _units(suite.memories, granularity, session_of):
        session = session_of(turns[0])
        if granularity == "session":
            unit_id = session
        else:
            counts[session] = counts.get(session, 0) + 1
            unit_id = f"{session}#r{counts[session]}"
        first = turns[0]
        memories.append(
            Memory(
                id=unit_id,
                text="\n".join(t.text for t in turns),
                scope=first.scope,
                created_at=first.created_at,
                role=first.role if len({t.role for t in turns}) == 1 else None,
                metadata=MappingProxyType(
                    {**first.metadata, "granularity": granularity, "turns": [t.id for t in turns]}
                ),
            )
        )
        unit_of.update((t.id, unit_id) for t in turns)
    qrels: dict[str, Mapping[str, int]] = {}
    for qid, judged in suite.qrels.items():
        mapped: dict[str, int] = {}
        for mid, grade in judged.items():
            unit = unit_of[mid]
            mapped[unit] = max(grade, mapped.get(unit, grade))
        qrels[qid] = mapped
    return replace(
        suite,
        memories=tuple(memories),
        qrels=qrels,
        tags={**suite.tags, "granularity": granularity},
        description=f"{suite.description} ({granularity} granularity)",
    )
