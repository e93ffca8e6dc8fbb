"""Ingest stage: classify each insight into an action domain, for the ones the learner left unlabelled.

Domains: code, depth_training, x_social, user_context, system, general. An advisory layer uses them to
route (retrieval/stages/intent_route.py): an Edit should not be advised by a retweet or a training log.

Rules are ordered (field, regex) pairs, first match wins, over the memory's text and its `source` and
`category` metadata; nothing matched means `general`. The defaults are generic markers of each class
(log prefixes like `[DEPTH: ...]`, `RT @`, "the user prefers", code and shell vocabulary, file
extensions), not words of any one suite. A memory whose metadata already has `action_domain` is kept
as it is (the learner's label wins); the others get the annotation `action_domain`, plus
`action_domain_rule` (which rule fired) so a report can explain a routing decision.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from retrieval.stage import IngestStage
from retrieval.types import Memory

DOMAINS = ("code", "depth_training", "x_social", "user_context", "system", "general")

_CODE_WORDS = (
    r"\.(py|js|jsx|ts|tsx|go|rs|java|rb|cpp|hpp|cs|php|swift|kt)\b|\b(function|functions|class|classes|"
    r"method|import|imports|module|refactor\w*|variable|type hints?|typescript|python|javascript|lint\w*|"
    r"pytest|unit tests?|tests?|assert\w*|exception|traceback|stack trace|null|undefined|async|await|"
    r"regex|compil\w+|bug|debug\w*|code|codebase|diff|edit|syntax|api|json|schema|dependency|dependencies)\b"
)
_SYSTEM_WORDS = (
    r"\b(bash|shell|terminal|command line|cli|git|commit|branch|deploy\w*|docker\w*|kubernetes|k8s|ci|"
    r"pipeline|server|env|environment|permissions?|process|port|install\w*|pip|npm|yarn|cron|service|"
    r"config\w*|database|migration|logs?|disk|memory usage|timeout|restart|sudo|path|venv)\b"
)
_SOCIAL_WORDS = r"^\s*rt @|\(eng:|\b(tweets?|retweet\w*|twitter|hashtags?|x\.com|followers|engagement)\b"

DEFAULT_RULES: tuple[tuple[str, str, str], ...] = (
    # Training/reasoning logs: a bracketed all-caps log prefix, or a training source.
    ("depth_training", "text", r"^\s*\[(depth|level|step|epoch|iter\w*)\s*[:=]"),
    ("depth_training", "source", r"depth|training|trainer|self[-_ ]?play"),
    ("x_social", "text", r"^\s*rt @|\(eng:\s*\d"),
    ("x_social", "source", r"(^|[_\-\s])x([_\-\s]|$)|twitter|tweet|social"),
    # What a user said or prefers: reported speech, or a verbatim conversational request.
    ("user_context", "text", r"^\s*(the )?user (prefers|wants|likes|dislikes|asked|said|is|was|says)\b"),
    ("user_context", "text", r'^\s*["“]?(now|ok|okay|so|hey|also),?\s+(can|could|would|should) (we|you)\b'),
    ("user_context", "category", r"user|preference"),
    ("x_social", "text", _SOCIAL_WORDS),
    ("code", "text", _CODE_WORDS),
    ("system", "text", _SYSTEM_WORDS),
    ("code", "source", r"code|coding|programming|engineering"),
)


@dataclass(frozen=True, kw_only=True)
class ActionDomainClassifier(IngestStage):
    name = "action_domain"
    rules: Sequence[Sequence[str]] = DEFAULT_RULES
    default_domain: str = "general"

    def config_problems(self) -> list[tuple[str, str]]:
        return [
            (f"rules[{i}]", f"an action_domain rule must be [domain, text|source|category, regex]: {rule!r}")
            for i, rule in enumerate(self.rules)
            if isinstance(rule, str) or len(rule) != 3 or rule[1] not in ("text", "source", "category")
        ]

    def classify(self, memory: Memory) -> tuple[str, int]:
        """(domain, index of the rule that fired; -1 for the default)."""
        for number, (domain, field_name, pattern) in enumerate(self.rules):
            value = memory.text if field_name == "text" else memory.metadata.get(field_name)
            if isinstance(value, str) and re.search(pattern, value, re.IGNORECASE):
                return domain, number
        return self.default_domain, -1

    def __call__(self, memories: Sequence[Memory]) -> list[Memory]:
        out = []
        for memory in memories:
            if memory.metadata.get("action_domain"):
                out.append(memory)  # the learner's own label is kept; memory.get() reads it from metadata
                continue
            domain, rule = self.classify(memory)
            out.append(memory.annotate(action_domain=domain, action_domain_rule=rule))
        return out
