"""Rank stage: the actionability gate. Advice must be something an agent can act on; the rest is dropped.

Four dimensions, each 0 or 1, over the insight's text:
  directive        a directive verb: an imperative opening ("Run ...", "When X, use ...") or a modal
                   ("should", "must", "always", "never", "avoid", "make sure")
  condition        a condition or trigger: when, if, before, after, unless, whenever, once, on error
  specific         names a tool, file, flag, call or pattern: a path or extension, `backticks`, --flags,
                   call(), snake_case / CamelCase identifiers, or a well-known tool name
  not_observation  is not an observation: not a retweet (RT @, "(eng: N)"), a log line ([TAG: ...]),
                   a user quote ("User prefers ...", "Now, can we ..."), a bare URL or reference, a bare
                   code snippet or statement (`NAME = ...`, a lone `call(...)`), or a fragment of
                   fewer than `min_words` words (a placeholder)
score = weighted sum (default 0.4, 0.2, 0.2, 0.2); an observation scores 0 whatever else it has
(`observation_veto`), since an RT that quotes a directive is still not advice. Items below `threshold`
(default 0.3) are dropped, not demoted; the score is kept in the column `actionability`. Fallback:
if fewer than `min_results` (default 3) pass, the best-scoring dropped ones are let back
(retrieval/stages/fallback.py). All patterns are generic English and tooling vocabulary.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from retrieval.stage import Range, RankStage
from retrieval.stages.fallback import keep_or_relax
from retrieval.types import Candidates, Query

_VERBS = (
    "add|adopt|align|always|apply|ask|assert|avoid|batch|benchmark|break|bump|cache|call|cap|check|cite|"
    "clean|close|commit|compare|confirm|consider|copy|create|cross-check|debug|default|define|delete|"
    "document|double-check|drop|ensure|escape|extract|favor|favour|fetch|filter|fix|follow|format|grep|"
    "guard|handle|include|inspect|install|isolate|keep|lead|limit|lint|list|load|lock|log|look|make|"
    "measure|mention|merge|migrate|mock|monitor|move|name|never|note|open|pass|pin|post|prefer|profile|"
    "prompt|put|quote|read|rebuild|record|reduce|refactor|remove|rename|replace|reply|reproduce|"
    "re-run|rerun|reset|restart|retry|return|reuse|review|revert|rewrite|run|save|scan|schedule|search|"
    "separate|set|share|show|skim|skip|sort|split|start|state|stay|stop|store|summarize|summarise|"
    "switch|tag|test|thread|trace|track|try|update|use|validate|verify|wait|watch|wrap|write"
)
DEFAULT_PATTERNS: Mapping[str, str] = {
    # Imperative at the start, or right after an opening condition clause ("When X, run ...").
    "directive": rf"(^|[.:;!]\s+|^[^.]{{0,120}}?,\s*|^\W*)(don'?t |do not )?({_VERBS})\b"
    r"|\b(should|must|need to|needs to|make sure|be sure to|remember to|always|never|avoid|prefer)\b",
    "condition": r"\b(when|whenever|if|before|after|unless|once|while|until|in case|on (any |an? )?"
    r"\w*\s*(error|failure|exception)|for (any|every|each))\b",
    "specific": r"(?-i:\b[A-Z][a-z]+[A-Z]\w+\b)"
    r"|[\w-]+\.(py|js|jsx|ts|tsx|json|ya?ml|toml|md|txt|sh|cfg|ini|sql|html|css|lock)\b|`[^`]+`"
    r"|(^|\s)--?[a-z][\w-]+|\w+\(\)|\b[a-z]+_[a-z_]+\b|/\w+/|\b(git|pytest|npm|pip|"
    r"docker|bash|grep|curl|ruff|mypy|eslint|jest|ssh|sql|regex|http|api|json|yaml|cli)\b",
    # (?-i:...) keeps the log-tag test case-sensitive: "[DEPTH: 3]" is a log line, "[see below]" is not.
    "observation": r"^\s*rt @|\(eng:\s*\d|^\s*\[(?-i:[A-Z][A-Z_ ]*)[:=\]]"
    r"|^\s*(the )?user (prefers|wants|likes|dislikes|asked|said|says|is|was)\b"
    r"|^\s*[\x22“]?(now|ok|okay|so|hey|also),?\s+(can|could|would|should) (we|you)\b"
    r"|^\s*[\x22“].*[\x22”]\s*$|^\s*((see|ref|source|via|link)\W*)?(https?://|www\.)\S+\s*$"
    r"|^\s*(def |class \w+[:(]|import \w|from [\w.]+ import |const |let |var |function\s*\w*\(|#include"
    r"|\$ |>>> |```)"
    # A bare statement: an assignment (`NAME = ...`, `x.y += ...`) or a lone call `f(...)` / `f(...);`.
    r"|^\s*[A-Za-z_][\w.\[\]'\x22]*\s*[+\-*/]?=\s*[^=\s]|^\s*[A-Za-z_][\w.]*\(.*\)\s*;?\s*$",
}
DEFAULT_WEIGHTS: Mapping[str, float] = {
    "directive": 0.4,
    "condition": 0.2,
    "specific": 0.2,
    "not_observation": 0.2,
}


def _matches(pattern: str, texts: np.ndarray) -> np.ndarray:
    compiled = re.compile(pattern, re.IGNORECASE)
    return np.fromiter((compiled.search(t) is not None for t in texts), dtype=bool, count=len(texts))


@dataclass(frozen=True, kw_only=True)
class ActionabilityGate(RankStage):
    name = "actionability"
    ranges = {"threshold": Range(), "weights": Range(), "min_words": Range(ge=0), "min_results": Range(ge=0)}
    threshold: float = 0.3
    weights: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    patterns: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_PATTERNS))
    observation_veto: bool = True
    min_words: int = 4
    min_results: int = 3

    def dimensions(self, texts: np.ndarray) -> dict[str, np.ndarray]:
        """Each dimension, 0 or 1, for each text."""
        words = np.fromiter((len(t.split()) for t in texts), dtype=np.int64, count=len(texts))
        observation = _matches(self.patterns["observation"], texts) | (words < self.min_words)
        return {
            "directive": _matches(self.patterns["directive"], texts).astype(float),
            "condition": _matches(self.patterns["condition"], texts).astype(float),
            "specific": _matches(self.patterns["specific"], texts).astype(float),
            "not_observation": (~observation).astype(float),
        }

    def score(self, texts: np.ndarray) -> np.ndarray:
        dims = self.dimensions(texts)
        total = sum(self.weights.get(name, 0.0) * value for name, value in dims.items())
        if self.observation_veto:
            total = np.where(dims["not_observation"] > 0, total, 0.0)
        return np.asarray(total, dtype=float)

    def __call__(self, query: Query, candidates: Candidates) -> Candidates:
        scores = self.score(candidates.attribute("text"))
        scored = Candidates(candidates.corpus, candidates.index, {**candidates.columns, self.name: scores})
        return keep_or_relax(scored, scores >= self.threshold, scores, self.min_results, self.name)
