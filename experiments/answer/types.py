"""What the answer stage hands its judges, and what a judge gives back."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

_EMPTY: Mapping[str, str] = MappingProxyType({})

# One chat call: (messages in the OpenAI chat format, sampling parameters such as max_tokens) -> reply text.
# The runtime's implementation goes through the endpoint and the cassette; a judge never opens a connection.
Chat = Callable[[Sequence[Mapping[str, str]], Mapping[str, object]], str]


@dataclass(frozen=True)
class AnswerItem:
    """One question to judge: the gold answer (and rubric), the labels, and the answer under test."""

    query_id: str
    question: str
    answer: str
    gold: str | None = None
    rubric: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    adversarial: str | None = None  # LoCoMo category 5: the distractor answer, kept apart from the gold


@dataclass(frozen=True)
class Verdict:
    """A judge's verdict on one answer. `score` is None when the reply could not be parsed (`unparsed`)."""

    score: float | None
    unparsed: bool = False
    raw: tuple[str, ...] = ()  # the judge's replies as received (LLM judges); () for lexical judges
    extra: Mapping[str, float] = field(default_factory=lambda: _EMPTY)  # e.g. {"exact_match": 1.0}
