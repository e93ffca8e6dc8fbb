"""Test-local stand-ins for developer F's modules (judges, prompts, aggregates, agreement, PPI), installed
only where the real module cannot be imported: before F's branch is merged, the answer stage's own
tests run against these; after it, against F's real modules (`install` then changes nothing).

Nothing here is asserted on as a judge or a prompt: the tests check the runtime's plumbing (calls,
cassettes, files, columns), never a judge's verdict value against upstream.
"""

from __future__ import annotations

import importlib
import re
import sys
import types
from collections import Counter

import numpy as np

from experiments.answer.types import Verdict


def _tokens(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9 ]", " ", text.lower()).split()


class LexicalJudge:
    """Token-overlap F1 and exact match (a plain SQuAD-style F1, not LoCoMo's exact scorer)."""

    name = "lexical"

    def __init__(self, *, protocol: str = "memeval", prompt_set: str | None = None):
        self.protocol = protocol

    def columns(self):
        return ("answer.lexical.f1", "answer.lexical.exact_match")

    def judge(self, items, chat=None):
        out = []
        for item in items:
            gold, answer = _tokens(item.gold or ""), _tokens(item.answer)
            common = sum((Counter(gold) & Counter(answer)).values())
            f1 = 0.0 if not common else 2 * common / (len(gold) + len(answer))
            out.append(Verdict(f1, extra={"exact_match": float(gold == answer)}))
        return out


class YesNoJudge:
    """An LLM judge through `chat`: 'yes' in the reply is right (LongMemEval's parse)."""

    name = "llm"

    def __init__(self, *, protocol: str = "memeval", prompt_set: str | None = None):
        self.prompt_set = prompt_set

    def columns(self):
        return ("answer.llm.correct",)

    def judge(self, items, chat):
        out = []
        for item in items:
            prompt = (
                f"Question: {item.question}\nGold: {item.gold}\nResponse: {item.answer}\nCorrect? yes or no"
            )
            reply = chat([{"role": "user", "content": prompt}], {"max_tokens": 10})
            out.append(Verdict(1.0 if "yes" in reply.lower() else 0.0, raw=(reply,)))
        return out


_JUDGES = {j.name: j for j in (LexicalJudge, YesNoJudge)}


def answer_messages(query, memories, *, benchmark, protocol, seed, template=None):
    context = "\n".join(f"{m.created_at or ''}: {m.text}" for m in memories)
    text = (template or "{context}\n\nQuestion: {question} Short answer:").format(
        question=query.text, context=context, now=query.now or ""
    )
    return [{"role": "user", "content": text}]


def upstream_aggregates(benchmark, items, verdicts):
    return {
        k: float(np.mean([v.score for v in vs if v.score is not None] or [np.nan]))
        for k, vs in verdicts.items()
    }


def judge_agreement(scores, clusters, labels=None):
    return {"judges": sorted(scores)}


def ppi_block(judged, labelled_mask, labels, clusters, alpha=0.05):
    return {"n_labelled": int(np.sum(labelled_mask))}


_MODULES = {
    "experiments.answer.judges": {
        "find_judge": lambda name: _JUDGES[name],
        "judge_names": lambda: tuple(sorted(_JUDGES)),
    },
    "experiments.answer.prompts": {"answer_messages": answer_messages},
    "experiments.answer.aggregates": {"upstream_aggregates": upstream_aggregates},
    "experiments.answer.agreement": {"judge_agreement": judge_agreement},
    "experiments.evaluate.ppi": {"ppi_block": ppi_block},
}


def install() -> list[str]:
    """Put a stand-in in sys.modules for each of F's modules that does not import; returns their names."""
    installed = []
    for name, attrs in _MODULES.items():
        try:
            importlib.import_module(name)
        except ImportError:
            module = types.ModuleType(name, "test-local stand-in (tests/answer/standins.py)")
            module.__dict__.update(attrs)
            sys.modules[name] = module
            installed.append(name)
    return installed


def run_main() -> None:
    """`python -c 'from tests.answer.standins import run_main; run_main()' <overrides>`: memeval-run with
    the stand-ins installed (a subprocess cannot inherit them otherwise)."""
    install()
    from experiments.run.app import main

    main()
