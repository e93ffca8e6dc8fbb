"""`lexical`: LoCoMo's own answer F1, exactly, with exact match beside it (no model).

Upstream: snap-research/LoCoMo task_eval/evaluation.py, `eval_question_answering` and the helpers it calls
(`normalize_answer`, `f1_score`, `f1`, `exact_match_score`), vendored in tests/upstream/locomo_answer.py and
checked against it on every question of conversations 1-5 (tests/answer/test_lexical_upstream.py):
- an answer is lower-cased, stripped of punctuation, of commas and of the words a/an/the/and, and split on
  whitespace; each token is Porter-stemmed (nltk's PorterStemmer, as upstream); F1 is the Counter overlap;
- categories 2-4 (temporal, open-domain, single-hop): F1 of the whole answer; category 3's gold is cut at its
  first `;`; category 1 (multi-hop): both sides split on commas, each gold part scored by its best predicted
  part, averaged; category 5 (adversarial): 1 when the answer says "no information available" or "not
  mentioned" (case-insensitive), else 0;
- exact match (`answer.lexical.exact_match`): upstream's `exact_match_score`, the normalised token *sets*
  equal (category 3's gold cut as above; category 5 as its F1). A query with no LoCoMo category (another
  suite) is scored as categories 2-4 are.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence
from types import MappingProxyType

import numpy as np

from experiments.answer.types import AnswerItem, Chat, Verdict

# The category label the LoCoMo loader writes (experiments/suites/locomo.py), by upstream's number.
CATEGORY_NUMBER = {"multi-hop": 1, "temporal": 2, "open-domain": 3, "single-hop": 4, "adversarial": 5}
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_PUNCTUATION = frozenset(string.punctuation)
_ABSTAINS = ("no information available", "not mentioned")


def normalize_answer(s: str) -> str:
    """Upstream's normalize_answer: commas out, lower case, punctuation out, a/an/the/and out, spaces
    joined."""
    s = s.replace(",", "").lower()
    s = "".join(ch for ch in s if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", s).split())


def _stemmer():
    from nltk.stem import PorterStemmer  # imported on first use: nltk is slow to import

    global _STEM
    _STEM = PorterStemmer().stem
    return _STEM


_STEM = None


def _tokens(text: str) -> list[str]:
    stem = _STEM or _stemmer()
    return [stem(w) for w in normalize_answer(text).split()]


def f1_score(prediction: str, ground_truth: str) -> float:
    """Token F1 of the stemmed, normalised answers (upstream's f1_score; 0 when nothing is shared)."""
    predicted, gold = _tokens(prediction), _tokens(ground_truth)
    same = sum((Counter(predicted) & Counter(gold)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def multi_answer_f1(prediction: str, ground_truth: str) -> float:
    """Category 1: each comma-separated gold part scored by its best predicted part, averaged (upstream's
    f1)."""
    predictions = [p.strip() for p in prediction.split(",")]
    golds = [g.strip() for g in ground_truth.split(",")]
    return float(
        np.mean([max(f1_score(p, g) for p in predictions) for g in golds])
    )  # np.mean: upstream's sum order


def exact_match(prediction: str, ground_truth: str) -> bool:
    """Upstream's exact_match_score: the normalised answers hold the same set of tokens."""
    return set(normalize_answer(prediction).split()) == set(normalize_answer(ground_truth).split())


def score_answer(answer: str, gold: str | None, category: int | None) -> tuple[float, float]:
    """(F1, exact match) of one answer by LoCoMo's rules for its category (None: scored as 2-4)."""
    if category == 5:
        hit = float(any(phrase in answer.lower() for phrase in _ABSTAINS))
        return hit, hit
    if gold is None:
        raise ValueError("a gold answer is needed")
    if category == 3:
        gold = gold.split(";")[0].strip()
    f1 = multi_answer_f1(answer, gold) if category == 1 else f1_score(answer, gold)
    return float(f1), float(exact_match(answer, gold))


def item_category(item: AnswerItem) -> int | None:
    """The item's LoCoMo category number, from its `category` label (name or number); None when it has
    none."""
    value = item.labels.get("category")
    if value is None:
        return None
    if value in CATEGORY_NUMBER:
        return CATEGORY_NUMBER[value]
    if str(value).strip() in {"1", "2", "3", "4", "5"}:
        return int(str(value).strip())
    raise ValueError(f"query {item.query_id}: unknown LoCoMo category {value!r}")


class LexicalJudge:
    """LoCoMo's answer F1 and exact match; the same under either protocol (upstream's rules are memeval's)."""

    name = "lexical"

    def __init__(
        self,
        *,
        protocol: str = "official",
        prompt_set: str | None = None,
        concurrency: int = 1,
        **options: object,
    ):
        # concurrency is every judge's option; this one makes no calls, so it has nothing to run at once
        if prompt_set is not None:
            raise ValueError(f"answer.judges: the lexical judge takes no prompt set, got {prompt_set!r}")
        if options:
            raise ValueError(f"answer.judges: unknown option(s) for the lexical judge: {sorted(options)}")
        self.protocol = protocol

    def columns(self) -> tuple[str, ...]:
        return ("answer.lexical.f1", "answer.lexical.exact_match")

    def notes(self) -> tuple[str, ...]:
        return (
            "judge lexical: LoCoMo's answer F1 (task_eval/evaluation.py eval_question_answering, "
            "Porter-stemmed "
            "token F1; category 1 split on commas, category 3's gold cut at ';', category 5 scores 'no "
            "information available' / 'not mentioned'); exact match is upstream's token-set equality",
        )

    def judge(self, items: Sequence[AnswerItem], chat: Chat | None = None) -> list[Verdict]:
        verdicts = []
        for item in items:
            category = item_category(item)
            if category != 5 and item.gold is None:
                raise ValueError(f"query {item.query_id}: no gold answer for the lexical judge")
            f1, em = score_answer(item.answer, item.gold, category)
            extra: Mapping[str, float] = MappingProxyType({"exact_match": em})
            verdicts.append(Verdict(score=f1, extra=extra))
        return verdicts
