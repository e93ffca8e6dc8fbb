"""Rank stage: route a tool call to an intent family, and keep only insights of that family's domains.

    query.context {tool_name, tool_input, task_context} -> intent family -> allowed action domains

The plan this models routes *before* retrieval; here it is a filter on the fused candidates by the
memory's `action_domain` (set by the suite or by retrieval/stages/action_domain.py). That is the same
thing as long as the retrievers' `top_n` reaches well past the cut (the spark variants keep 100 per
channel over a pool of a few hundred insights), and it keeps the retrieval prefix shared and cached
across variants. `general` is always allowed; a memory with no domain counts as `general`.

Fallback: if fewer than `min_pool` candidates (default 20) survive, the routing is relaxed to all
domains (the candidates pass unchanged, flagged in the column `intent_route_relaxed`). A query with
no tool context, or one no rule matches, is not routed.

Rules are (family, tool-name regex, context regex) triples, first match wins; an empty regex matches
anything; the context is the tool input and task context as text. The defaults name tool kinds
(editors, shells, web tools, social tools, readers) and error vocabulary, nothing suite-specific.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from retrieval.stage import Range, RankStage
from retrieval.types import Candidates, Query

_SHELL = r"^(bash|shell|sh|terminal|run_command|exec\w*|powershell)$"
_ERRORS = (
    r"error|exception|traceback|failed|failing|failure|crash\w*|exit (code|status) [1-9]|segfault|"
    r"panic|\bbug\b|broken|not found|cannot|can't|undefined|denied|timed? ?out"
)
_SOCIAL = r"\b(tweet\w*|retweet\w*|twitter|x\.com|post(ing)? (on|to) x|reply to @|hashtags?)\b"

DEFAULT_INTENTS: tuple[tuple[str, str, str], ...] = (
    # X-platform tools: XPost, x_reply, TweetCompose... (the X prefix is case-sensitive: "Xargs" is not one)
    ("social", r"tweet|twitter|social|(?-i:^X[A-Z])|(^|_)x(_|$)", ""),
    ("research", r"^web_?(search|fetch)$|browse\w*|search_web|fetch_url", ""),
    ("code_edit", r"^(edit|write|multi_?edit|notebook_?edit|str_replace\w*|create_file|apply_patch)$", ""),
    ("debugging", _SHELL, _ERRORS),
    ("shell", _SHELL, ""),
    ("social", "", _SOCIAL),
    ("explore", r"^(read|glob|grep|ls|list_?files|view|search_files|find)$", ""),
)
DEFAULT_DOMAINS: Mapping[str, Sequence[str]] = {
    "code_edit": ("code", "system"),
    "debugging": ("code", "system"),
    "shell": ("system", "code"),
    "research": (),
    "social": ("x_social",),
    "explore": ("code", "system"),
}


def context_text(value: Any) -> str:
    """A tool input or task context (string, mapping, list) flattened to one string."""
    if value is None:
        return ""
    if isinstance(value, Mapping):
        return " ".join(context_text(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return " ".join(context_text(v) for v in value)
    return str(value)


@dataclass(frozen=True, kw_only=True)
class IntentRouter(RankStage):
    name = "intent_route"
    ranges = {"min_pool": Range(ge=0)}
    intents: Sequence[Sequence[str]] = DEFAULT_INTENTS
    domains: Mapping[str, Sequence[str]] = field(default_factory=lambda: dict(DEFAULT_DOMAINS))
    always_allowed: Sequence[str] = ("general",)
    min_pool: int = 20

    def intent(self, query: Query) -> str | None:
        """The intent family of a query's tool call; None when there is no tool context or no rule fits."""
        tool = str(query.context.get("tool_name") or "")
        text = " ".join(context_text(query.context.get(k)) for k in ("tool_input", "task_context"))
        if not tool and not text.strip():
            return None
        for family, tool_pattern, context_pattern in self.intents:
            if tool_pattern and not re.search(tool_pattern, tool, re.IGNORECASE):
                continue
            if context_pattern and not re.search(context_pattern, text, re.IGNORECASE):
                continue
            return family
        return None

    def allowed_domains(self, query: Query) -> frozenset[str] | None:
        family = self.intent(query)
        if family is None or family not in self.domains:
            return None
        return frozenset(self.domains[family]) | frozenset(self.always_allowed)

    def __call__(self, query: Query, candidates: Candidates) -> Candidates:
        allowed = self.allowed_domains(query)
        if allowed is None:
            return candidates
        domains = candidates.attribute("action_domain")
        keep = np.array([(d or "general") in allowed for d in domains], dtype=bool)
        relaxed = int(keep.sum()) < self.min_pool
        flags = np.full(len(candidates), relaxed)
        out = Candidates(
            candidates.corpus, candidates.index, {**candidates.columns, "intent_route_relaxed": flags}
        )
        return out if relaxed else out.select(np.flatnonzero(keep))
