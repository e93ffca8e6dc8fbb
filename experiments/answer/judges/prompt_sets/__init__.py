"""The LLM judge's prompt sets: how each benchmark asks a judge model about an answer, and how it reads the
reply.

A prompt set is a module here holding one `PROMPT_SET` (a `PromptSet`): `calls` builds the chat calls for one
answer (one for a yes/no judge, one per rubric item for BEAM), `parse` reads one reply as upstream reads it,
`combine` makes the item's score from its calls' scores. `experiments.answer.judges.llm` finds them by name.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from experiments.answer.types import AnswerItem

Messages = list[dict[str, str]]


@dataclass(frozen=True)
class Parsed:
    """One reply read: its score (None: unparsed), and whether it was a plain label (nothing but the
    label)."""

    score: float | None
    plain: bool


class PromptSet(Protocol):
    name: str
    column: str  # the per-query column's last part: `correct` (0/1) or `score` (graded)

    def calls(self, item: AnswerItem, protocol: str) -> list[tuple[Messages, Mapping[str, object]]]: ...

    def parse(self, reply: str, item: AnswerItem, protocol: str) -> Parsed: ...

    def combine(self, scores: Sequence[float], item: AnswerItem, protocol: str) -> float: ...

    def notes(self, protocol: str) -> tuple[str, ...]: ...


def gold_of(item: AnswerItem, prompt_set: str) -> str:
    """The item's gold answer; ValueError naming the query when it has none (before any call is made)."""
    if item.gold is None:
        raise ValueError(
            f"query {item.query_id}: the {prompt_set} prompt set needs a gold answer (none given)"
        )
    return item.gold


def prompt_set_names() -> tuple[str, ...]:
    return tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.ispkg))


def find_prompt_set(name: str) -> PromptSet:
    known = prompt_set_names()
    if name not in known:
        raise KeyError(f"answer.judges: unknown prompt set {name!r} (known: {', '.join(known)})")
    return importlib.import_module(f"{__name__}.{name}").PROMPT_SET
