"""Instruction tagging (ingest): mark memories that state a standing instruction.

Sits first in the pipeline (memories -> memories). A memory whose text contains one of `markers`
(case-insensitive, matched at the start of a word so `never ` does not fire inside `whenever `; with
`anchor: sentence` only at the start of a sentence or clause, where an imperative stands), and
whose role is in `roles` (None = any role), gets two annotations:
- `fact_role = "instruction"`: what `instruction_boost` looks for;
- `importance_score`: a number in [0, 1], floored at `importance_floor` (0.95). `Memory.importance`
  stays the suite's own label (critical/high/medium/low); a stage's number never overwrites it.
Untagged memories are returned unchanged (the same objects), so tagging costs nothing downstream.

`fact_role` is reserved (retrieval.types.RESERVED_METADATA_KEYS): the JSONL loader rejects it in a
suite's metadata, and this stage raises on a memory that carries it anyway (a suite built in code),
because a pre-tagged dataset would make the stage's effect unmeasurable.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from retrieval.stage import IngestStage, Range
from retrieval.types import RESERVED_METADATA_KEYS, Memory

INSTRUCTION_MARKERS = (
    "always ",
    "never ",
    "from now on",
    "please remember",
    "make sure to",
    "don't forget",
    "do not forget",
    "every time",
    "whenever you",
    "going forward",
    "in the future",
    "remember to",
)
# A wider marker list (also "do not", "prefer", "I'd like you to"), selectable as `markers`.
WIDE_MARKERS = (*INSTRUCTION_MARKERS, "do not ", "prefer ", "i'd like you to")
INSTRUCTION = "instruction"


ANCHORS = {
    "word": r"\b",  # anywhere, at the start of a word
    "sentence": r"(?:\A|[.!?:;\n])\s*",  # only where a sentence or clause starts: the imperative mood
}


def marker_pattern(markers: Sequence[str], anchor: str = "word") -> re.Pattern[str]:
    """One case-insensitive regex for the markers, each anchored at a word (or sentence) start."""
    if not markers:
        raise ValueError("instruction_tagging needs at least one marker")
    if anchor not in ANCHORS:
        raise ValueError(f"unknown anchor {anchor!r}; use one of {sorted(ANCHORS)}")
    return re.compile(ANCHORS[anchor] + "(?:" + "|".join(re.escape(m) for m in markers) + ")", re.IGNORECASE)


@dataclass(frozen=True, kw_only=True)
class InstructionTagging(IngestStage):
    name = "instruction_tagging"
    ranges = {"importance_floor": Range()}
    markers: Sequence[str] = INSTRUCTION_MARKERS
    roles: Sequence[str] | None = ("user",)
    anchor: str = "word"
    importance_floor: float = 0.95

    def memory_fields(self) -> tuple[str, ...]:
        return () if self.roles is None else ("role",)

    def is_instruction(self, memory: Memory, pattern: re.Pattern[str] | None = None) -> bool:
        if self.roles is not None and memory.role not in self.roles:
            return False
        return (pattern or marker_pattern(self.markers, self.anchor)).search(memory.text) is not None

    def __call__(self, memories: Sequence[Memory]) -> list[Memory]:
        pattern = marker_pattern(self.markers, self.anchor)
        out = []
        for memory in memories:
            reserved = RESERVED_METADATA_KEYS & set(memory.metadata)
            if reserved:
                raise ValueError(
                    f"memory {memory.id}: metadata sets reserved key(s) {sorted(reserved)}; "
                    "they are written by ingest stages only"
                )
            if not self.is_instruction(memory, pattern):
                out.append(memory)
                continue
            prior = memory.annotations.get("importance_score")
            prior = float(prior) if isinstance(prior, (int, float)) else 0.0
            out.append(
                memory.annotate(fact_role=INSTRUCTION, importance_score=max(prior, self.importance_floor))
            )
        return out
