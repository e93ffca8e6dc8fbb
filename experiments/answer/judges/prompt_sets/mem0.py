"""`mem0`: the CORRECT/WRONG "generous" judge of mem0's former LoCoMo evaluation
(evaluation/metrics/llm_judge.py).

The prompt is upstream's `ACCURACY_PROMPT`, verbatim (its curly quotes and trailing spaces included), sent as
one user message at temperature 0 with `response_format={"type": "json_object"}`, as upstream sent it. The
reply is read as upstream read it: the JSON found by mem0's `extract_json` (a ```json block, else the text
from the first `{` to the last `}`), its `label`: 1 when it is exactly "CORRECT", else 0.
- `official`: that parse; a reply that is not JSON or has no `label` (upstream raised and stopped) is
  unparsed;
- `memeval`: the same, but a label other than CORRECT or WRONG is unparsed rather than 0. A plain label is a
  reply that is nothing but `{"label": ...}`.
"""

from __future__ import annotations

import json
import re

from experiments.answer.judges.prompt_sets import Parsed, gold_of

ACCURACY_PROMPT = (
    "\n"
    "Your task is to label an answer to a question as ’CORRECT’ or ’WRONG’. You will be given the"
    " following data:\n"
    "    (1) a question (posed by one user to another user), \n"
    "    (2) a ’gold’ (ground truth) answer, \n"
    "    (3) a generated answer\n"
    "which you will score as CORRECT/WRONG.\n"
    "\n"
    "The point of the question is to ask about something one user should know about the other use"
    "r based on their prior conversations.\n"
    "The gold answer will usually be a concise and short answer that includes the referenced topi"
    "c, for example:\n"
    "Question: Do you remember what I got the last time I went to Hawaii?\n"
    "Gold answer: A shell necklace\n"
    "The generated answer might be much longer, but you should be generous with your grading - as"
    " long as it touches on the same topic as the gold answer, it should be counted as CORRECT. \n"
    "\n"
    "For time related questions, the gold answer will be a specific date, month, year, etc. The g"
    'enerated answer might be much longer or use relative time references (like "last Tuesday" or'
    ' "next month"), but you should be generous with your grading - as long as it refers to the s'
    "ame date or time period as the gold answer, it should be counted as CORRECT. Even if the for"
    'mat differs (e.g., "May 7th" vs "7 May"), consider it CORRECT if it\'s the same date.\n'
    "\n"
    "Now it's time for the real question:\n"
    "Question: {question}\n"
    "Gold answer: {gold_answer}\n"
    "Generated answer: {generated_answer}\n"
    "\n"
    "First, provide a short (one sentence) explanation of your reasoning, then finish with CORREC"
    "T or WRONG. \n"
    "Do NOT include both CORRECT and WRONG in your response, or it will break the evaluation scri"
    "pt.\n"
    "\n"
    'Just return the label CORRECT or WRONG in a json format with the key as "label".\n'
)
PARAMS = {"temperature": 0.0, "response_format": {"type": "json_object"}}
_FENCE = re.compile(r"```(?:json)?\s*(.*?)\s*```", re.DOTALL)


def extract_json(text: str) -> str:
    """mem0's extract_json: a fenced block's content, else the first `{` to the last `}`, else the text."""
    text = text.strip()
    match = _FENCE.search(text)
    if match:
        return match.group(1)
    start, end = text.find("{"), text.rfind("}")
    return text[start : end + 1] if start != -1 and end != -1 and end > start else text


class Mem0Prompts:
    name = "mem0"
    column = "correct"

    def calls(self, item, protocol):
        prompt = ACCURACY_PROMPT.format(
            question=item.question, gold_answer=gold_of(item, "mem0"), generated_answer=item.answer
        )
        return [([{"role": "user", "content": prompt}], PARAMS)]

    def parse(self, reply, item, protocol):
        try:
            found = json.loads(extract_json(reply))
            label = found["label"]
        except (ValueError, KeyError, TypeError, IndexError):
            return Parsed(None, False)
        plain = isinstance(found, dict) and set(found) == {"label"}
        if protocol != "official" and label not in ("CORRECT", "WRONG"):
            return Parsed(None, False)
        return Parsed(1.0 if label == "CORRECT" else 0.0, plain)

    def combine(self, scores, item, protocol):
        return scores[0]

    def notes(self, protocol):
        return (
            f"prompt set mem0 ({protocol}): mem0's former llm_judge.py ACCURACY_PROMPT, 'generous' grading; "
            f"a "
            "reply without a JSON label is unparsed"
            + ("" if protocol == "official" else "; a label other than CORRECT/WRONG is unparsed"),
        )


PROMPT_SET = Mem0Prompts()
