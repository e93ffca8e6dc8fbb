"""`longmemeval`: LongMemEval's answer check (src/evaluation/evaluate_qa.py, `get_anscheck_prompt`), verbatim.

Five templates: one for single-session-user / single-session-assistant / multi-session, one each for
temporal-reasoning, knowledge-update and single-session-preference, and one for abstention questions, all
answered yes/no; sent as one user message with temperature 0 and max_tokens 10, as upstream sends them.
- `official`: a question is an abstention one when its id holds `_abs` anywhere (upstream); the reply is read
  as upstream reads it, `'yes' in reply.strip().lower()`, so every reply is a verdict ("The correct answer is
  no" is a no, "eyes" a yes); whether the reply was a plain yes/no is counted beside it;
- `memeval`: abstention when the id ends with `_abs` (the loader's `abstention` label); the reply must be a
  plain yes or no (case, surrounding spaces and a final `.` ignored), anything else is unparsed.
"""

from __future__ import annotations

from experiments.answer.judges.prompt_sets import Parsed, gold_of
from experiments.answer.types import AnswerItem


def _template(
    instruction: str, given: str = "Correct Answer", ask: str = "Is the model response correct?"
) -> str:
    """Upstream's template layout: the instruction, then the question, what it gives (`given`) and the
    response as `{}` slots, then the yes/no question `ask`."""
    return (
        f"{instruction}\n\nQuestion: {{}}\n\n{given}: {{}}\n\nModel Response: {{}}\n\n"
        f"{ask} Answer yes or no only."
    )


# the instruction texts are upstream's, spaces included (a space before the newline in two of them)
_CORRECT_ANSWER = (
    "I will give you a question, a correct answer, and a response from a model. Please answer yes"
    " if the response contains the correct answer. Otherwise, answer no."
)
_STANDARD = (
    _CORRECT_ANSWER + " If the response is equivalent to the correct answer or contains all the intermediate"
    " steps to get the correct answer, you should also answer yes. If the response only contains a subset of"
    " the information required by the answer, answer no."
)
_STANDARD_TEMPLATE = _template(_STANDARD + " ")
_TEMPORAL_TEMPLATE = _template(
    _STANDARD + " In addition, do not penalize off-by-one errors for the number of days. If the question asks"
    " for the number of days/weeks/months, etc., and the model makes off-by-one errors (e.g., predicting 19"
    " days when the answer is 18), the model's response is still correct. "
)
_UPDATE_TEMPLATE = _template(
    _CORRECT_ANSWER + " If the response contains some previous information along with an updated answer,"
    " the response should be considered as correct as long as the updated answer is the required answer."
)
_PREFERENCE_TEMPLATE = _template(
    "I will give you a question, a rubric for desired personalized response, and a response from a model."
    " Please answer yes if the response satisfies the desired response. Otherwise, answer no. The model does"
    " not need to reflect all the points in the rubric. The response is correct as long as it recalls and"
    " utilizes the user's personal information correctly.",
    given="Rubric",
)
ABSTENTION = _template(
    "I will give you an unanswerable question, an explanation, and a response from a model. Please answer"
    " yes if the model correctly identifies the question as unanswerable. The model could say that the"
    " information is incomplete, or some other information is given but the asked information is not.",
    given="Explanation",
    ask="Does the model correctly identify the question as unanswerable?",
)
TEMPLATES = {
    "single-session-user": _STANDARD_TEMPLATE,
    "single-session-assistant": _STANDARD_TEMPLATE,
    "multi-session": _STANDARD_TEMPLATE,
    "temporal-reasoning": _TEMPORAL_TEMPLATE,
    "knowledge-update": _UPDATE_TEMPLATE,
    "single-session-preference": _PREFERENCE_TEMPLATE,
}
PARAMS = {"temperature": 0, "max_tokens": 10}


def is_abstention(item: AnswerItem, protocol: str) -> bool:
    if protocol == "official":
        return "_abs" in item.query_id
    return item.labels.get("abstention") == "yes" or item.query_id.endswith("_abs")


def anscheck_prompt(task: str, question: str, answer: str, response: str, abstention: bool) -> str:
    """The prompt upstream's get_anscheck_prompt builds (ValueError for a question type it has no template
    for)."""
    if abstention:
        return ABSTENTION.format(question, answer, response)
    if task not in TEMPLATES:
        raise ValueError(f"LongMemEval has no judge template for question type {task!r}")
    return TEMPLATES[task].format(question, answer, response)


class LongMemEvalPrompts:
    name = "longmemeval"
    column = "correct"

    def calls(self, item, protocol):
        task = item.labels.get("question_type")
        if task is None:
            raise ValueError(f"query {item.query_id}: the longmemeval prompt set needs a question_type label")
        prompt = anscheck_prompt(
            task, item.question, gold_of(item, "longmemeval"), item.answer, is_abstention(item, protocol)
        )
        return [([{"role": "user", "content": prompt}], PARAMS)]

    def parse(self, reply, item, protocol):
        text = reply.strip().lower()
        plain = text.rstrip(".").strip() in ("yes", "no")
        if protocol == "official":
            return Parsed(float("yes" in text), plain)
        return Parsed(float(text.rstrip(".").strip() == "yes") if plain else None, plain)

    def combine(self, scores, item, protocol):
        return scores[0]

    def notes(self, protocol):
        if protocol == "official":
            return (
                "prompt set longmemeval (official): upstream's get_anscheck_prompt; a reply is a yes when "
                "it holds "
                "'yes' anywhere (upstream's parse), so no reply is unparsed; replies that were not a plain "
                "yes/no "
                "are counted",
            )
        return (
            "prompt set longmemeval (memeval): upstream's prompts; only a plain yes/no reply is a verdict",
        )


PROMPT_SET = LongMemEvalPrompts()
