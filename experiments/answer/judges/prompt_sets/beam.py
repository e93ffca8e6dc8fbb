"""`beam`: BEAM's rubric judge (src/prompts.py `unified_llm_judge_base_prompt`,
src/evaluation/compute_metrics.py).

One call per rubric item: the prompt with `<rubric_item>` and `<llm_response>` replaced (in that order, as
upstream's `.replace` chain), one user message; the reply is read by upstream's `parse_json_response` (a
fenced block, else the whole reply as JSON, else the first `{...}` or `[...]`), its `score`; the item's score
is the mean over its rubric items.
- `official` reproduces what BEAM's shipped code does, defects included, and says so in the run's notes: the
  prompt's `<question>` placeholder is never filled (the judge sees the literal text `<question>`), and nine
  of the ten abilities add `int(score)`, so a 0.5 counts 0 (event_ordering adds `float(score)`); a reply
  upstream's parse refuses is unparsed (upstream then tries json_repair, which memeval does not carry);
- `memeval` fills `<question>` with the question (first, so an answer holding the text `<question>` is left as
  it is) and keeps 0.5; a score that is not 0, 0.5 or 1 is unparsed.
"""

from __future__ import annotations

import json
import re

from experiments.answer.judges.prompt_sets import Parsed

BASE_PROMPT = (
    "\n"
    "You are an expert evaluator tasked with judging whether the LLM's response demonstrates comp"
    "liance with the specified RUBRIC CRITERION.\n"
    "\n"
    "## EVALUATION INPUTS\n"
    "- QUESTION (what the user asked): <question>\n"
    "- RUBRIC CRITERION (what to check): <rubric_item>\n"
    "- RESPONSE TO EVALUATE: <llm_response>\n"
    "\n"
    "## EVALUATION RUBRIC:\n"
    "The rubric defines a specific requirement, constraint, or expected behavior that the LLM res"
    "ponse should demonstrate. \n"
    "\n"
    "**IMPORTANT**: Pay careful attention to whether the rubric specifies:\n"
    "- **Positive requirements** (things the response SHOULD include/do)\n"
    '- **Negative constraints** (things the response SHOULD NOT include/do, often indicated by "n'
    'o", "not", "avoid", "absent")\n'
    "\n"
    "## RESPONSIVENESS REQUIREMENT (anchored to the QUESTION)\n"
    "A compliant response must be **on-topic with respect to the QUESTION** and attempt to answer"
    " it.\n"
    "- If the response does not address the QUESTION, score **0.0** and stop.\n"
    "- For negative constraints, both must hold: (a) the response is responsive to the QUESTION, "
    "and (b) the prohibited element is absent.\n"
    "\n"
    "## SEMANTIC TOLERANCE RULES:\n"
    "Judge by meaning, not exact wording.\n"
    "- Accept **paraphrases** and **synonyms** that preserve intent.\n"
    "- **Case/punctuation/whitespace** differences must be ignored.\n"
    "- **Numbers/currencies/dates** may appear in equivalent forms (e.g., “$68,000”, “68k”, “68,0"
    "00 USD”, or “sixty-eight thousand dollars”). Treat them as equal when numerically equivalent"
    ".\n"
    "- If the rubric expects a number or duration, prefer **normalized comparison** (extract and "
    "compare values) over string matching.\n"
    "\n"
    "## STYLE NEUTRALITY (prevents style contamination):\n"
    "Ignore tone, politeness, length, and flourish unless the rubric explicitly requires a format"
    "/structure (e.g., “itemized list”, “no citations”, “one sentence”).\n"
    "- Do **not** penalize hedging, voice, or verbosity if content satisfies the rubric.\n"
    "- Only evaluate format when the rubric **explicitly** mandates it.\n"
    "\n"
    "## SCORING SCALE:\n"
    "- **1.0 (Complete Compliance)**: Fully complies with the rubric criterion.\n"
    "  - Positive: required element present, accurate, properly executed (allowing semantic equiv"
    "alents).\n"
    "  - Negative: prohibited element **absent** AND response is **responsive**.\n"
    "  \n"
    "- **0.5 (Partial Compliance)**: Partially complies.\n"
    "  - Positive: element present but minor inaccuracies/incomplete execution.\n"
    "  - Negative: generally responsive and mostly avoids the prohibited element but with minor/e"
    "dge violations.\n"
    "  \n"
    "- **0.0 (No Compliance)**: Fails to comply.\n"
    "  - Positive: required element missing or incorrect.\n"
    "  - Negative: prohibited element present **or** response is non-responsive/evasive even if t"
    "he element is absent.\n"
    "\n"
    "## EVALUATION INSTRUCTIONS:\n"
    "1. **Understand the Requirement**: Determine if the rubric is asking for something to be pre"
    "sent (positive) or absent (negative/constraint).\n"
    "\n"
    '2. **Parse Compound Statements**: If the rubric contains multiple elements connected by "and'
    '" or commas, evaluate whether:\n'
    "   - **All elements** must be present for full compliance (1.0)\n"
    "   - **Some elements** present indicates partial compliance (0.5)\n"
    "   - **No elements** present indicates no compliance (0.0)\n"
    "   \n"
    "3. **Check Compliance**: \n"
    "   - For positive requirements: Look for the presence and quality of the required element\n"
    "   - For negative constraints: Look for the absence of the prohibited element\n"
    "\n"
    "4. **Assign Score**: Based on compliance with the specific rubric criterion according to the"
    " scoring scale above.\n"
    "\n"
    "5. **Provide Reasoning**: Explain whether the rubric criterion was satisfied and justify the"
    " score.\n"
    "\n"
    "## OUTPUT FORMAT:\n"
    "Return your evaluation in JSON format with two fields:\n"
    "\n"
    "{\n"
    '   "score": [your score: 1.0, 0.5, or 0.0],\n'
    '   "reason": "[detailed explanation of whether the rubric criterion was satisfied and why th'
    'is justified the assigned score]"\n'
    "}\n"
    "\n"
    "NOTE: ONLY output the json object, without any explanation before or after that\n"
)
_FENCE = re.compile(r"```(?:json)?\s*(\[.*\]|\{.*\})\s*```", re.DOTALL)
_FIRST = re.compile(r"(\{.*?\}|\[.*?\])", re.DOTALL)
# The one ability whose judge score upstream adds as a float (evaluate_event_ordering).
FLOAT_ABILITIES = frozenset({"event_ordering"})


def rubric_prompt(question: str, rubric_item: str, response: str, protocol: str) -> str:
    """The judge prompt for one rubric item: upstream's substitutions; memeval also fills the question."""
    template = BASE_PROMPT if protocol == "official" else BASE_PROMPT.replace("<question>", question)
    return template.replace("<rubric_item>", rubric_item).replace("<llm_response>", response)


def parse_json_response(response: str):
    """Upstream's parse_json_response; ValueError when no JSON is found."""
    response = response.strip()
    if response.startswith("```"):
        match = _FENCE.search(response)
        if match:
            response = match.group(1).strip()
    try:
        return json.loads(response)
    except json.JSONDecodeError:
        pass
    match = _FIRST.search(response)
    if match:
        return json.loads(match.group(1))  # JSONDecodeError is a ValueError, as upstream's re-raise
    raise ValueError("No valid JSON found in response.")


class BeamPrompts:
    name = "beam"
    column = "score"

    def calls(self, item, protocol):
        if not item.rubric:
            raise ValueError(f"query {item.query_id}: the beam prompt set needs a rubric (none given)")
        return [
            ([{"role": "user", "content": rubric_prompt(item.question, rubric, item.answer, protocol)}], {})
            for rubric in item.rubric
        ]

    def parse(self, reply, item, protocol):
        try:
            found = parse_json_response(reply)
            score = found["score"]
        except (ValueError, KeyError, TypeError, IndexError):
            return Parsed(None, False)
        plain = isinstance(found, dict) and set(found) <= {"score", "reason"}
        if protocol == "official":
            as_float = item.labels.get("ability") in FLOAT_ABILITIES
            try:
                value = float(score) if as_float else int(score)  # int(0.5) == 0: upstream's truncation
            except (ValueError, TypeError):  # int("0.5") raises upstream too
                return Parsed(None, False)
            return Parsed(float(value), plain)
        try:
            value = float(score)
        except (ValueError, TypeError):
            return Parsed(None, False)
        return Parsed(value, plain) if value in (0.0, 0.5, 1.0) else Parsed(None, False)

    def combine(self, scores, item, protocol):
        return sum(scores) / len(scores)

    def notes(self, protocol):
        if protocol == "official":
            return (
                "prompt set beam (official): BEAM's shipped judge reproduced with its defects: the prompt's "
                "<question> placeholder is never filled, and int(score) turns a 0.5 into 0 on nine of ten "
                "abilities (event_ordering keeps it)",
            )
        return ("prompt set beam (memeval): BEAM's prompt with <question> filled; 0.5 kept on every ability",)


PROMPT_SET = BeamPrompts()
