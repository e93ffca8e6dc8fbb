"""Rank stage: the adaptive retrieval gate. Some tool calls need no advice at all.

A read-only tool call (Read, Glob, Grep, LS...) with no task context is the agent looking around:
advice there is noise, so the gate returns no candidates. Any other call passes unchanged. In the
system this models the gate runs before retrieval, to save its cost; here it is the first rank stage,
so the cached retrieval prefix stays shared across variants (its latency saving is not measured).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from retrieval.stage import Range, RankStage
from retrieval.stages.intent_route import context_text
from retrieval.types import Candidates, Query


@dataclass(frozen=True, kw_only=True)
class RetrievalGate(RankStage):
    name = "retrieval_gate"
    ranges = {"min_context_chars": Range(ge=0)}
    read_only_tools: Sequence[str] = ("Read", "Glob", "Grep", "LS", "NotebookRead", "View", "list_files")
    min_context_chars: int = 1  # a task context shorter than this (after trimming) counts as none

    def needs_advice(self, query: Query) -> bool:
        tool = str(query.context.get("tool_name") or "")
        read_only = any(re.fullmatch(re.escape(t), tool, re.IGNORECASE) for t in self.read_only_tools)
        has_context = len(context_text(query.context.get("task_context")).strip()) >= self.min_context_chars
        return not read_only or has_context

    def __call__(self, query: Query, candidates: Candidates) -> Candidates:
        if self.needs_advice(query):
            return candidates
        return candidates.select(np.zeros(len(candidates), dtype=bool))
