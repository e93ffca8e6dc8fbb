"""Ingest stage: contextual enrichment. The text an index embeds gets the insight's context prepended.

    embed_text = "[<category>] [domain:<action_domain>] <text>"

Each bracket comes from a memory attribute (`fields`: attribute -> label prefix); a missing value
drops its bracket, and a memory with none of them is left unchanged. `Corpus.texts()` returns
`embed_text`, so both BM25 and the dense channel index the enriched text; the memory's own `text`
(what the agent is shown, and what noise and MMR look at) is untouched. Run it after
action_domain classification, so the domain is there to prepend.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from retrieval.stage import IngestStage
from retrieval.types import Memory


@dataclass(frozen=True, kw_only=True)
class ContextualEnrichment(IngestStage):
    name = "enrichment"
    fields: Mapping[str, str] = field(default_factory=lambda: {"category": "", "action_domain": "domain:"})

    def prefix(self, memory: Memory) -> str:
        parts = []
        for attribute, label in self.fields.items():
            value = memory.get(attribute)
            if value not in (None, ""):
                parts.append(f"[{label}{value}]")
        return " ".join(parts)

    def __call__(self, memories: Sequence[Memory]) -> list[Memory]:
        out = []
        for memory in memories:
            prefix = self.prefix(memory)
            out.append(memory.annotate(embed_text=f"{prefix} {memory.text}") if prefix else memory)
        return out
