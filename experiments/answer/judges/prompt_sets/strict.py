"""`strict`: memeval's own judge prompt, stricter than the upstream ones, for judge-robustness comparisons.

Upstream judges are lenient in different ways (mem0's is told to be "generous": an answer touching the gold's
topic passes; LongMemEval's passes any reply holding the word "yes"). `strict` asks whether the response
states the gold answer's facts and nothing that contradicts them, treats a hedge between several candidate
answers and an unrequested refusal as wrong, and wants a one-word reply. It is the same under either protocol.

Reply: exactly `CORRECT` or `INCORRECT` (case, surrounding spaces and a final `.` ignored); anything else is
unparsed (never silently right or wrong). Sent as one user message, temperature 0, max_tokens 5.
"""

from __future__ import annotations

from experiments.answer.judges.prompt_sets import Parsed, gold_of

PROMPT = (
    "You grade an answer to a question about a past conversation against the gold answer.\n\n"
    "Question: {question}\n"
    "Gold answer: {gold}\n"
    "Answer to grade: {answer}\n\n"
    "The answer is CORRECT only if all of these hold:\n"
    "1. It states every fact the gold answer states (a date, number or name must match; an equivalent form "
    "of the "
    "same value is fine).\n"
    "2. It states nothing that contradicts the gold answer.\n"
    "3. It commits to one answer: listing several candidates, or hedging between them, is INCORRECT.\n"
    "4. If the gold answer says the information is not available, the answer must say so too; otherwise a "
    "refusal "
    'or "I don\'t know" is INCORRECT.\n'
    "Extra detail that is true and does not contradict the gold answer is allowed.\n\n"
    "Reply with one word: CORRECT or INCORRECT."
)
PARAMS = {"temperature": 0, "max_tokens": 5}


class StrictPrompts:
    name = "strict"
    column = "correct"

    def calls(self, item, protocol):
        prompt = PROMPT.format(question=item.question, gold=gold_of(item, "strict"), answer=item.answer)
        return [([{"role": "user", "content": prompt}], PARAMS)]

    def parse(self, reply, item, protocol):
        word = reply.strip().rstrip(".").strip().upper()
        if word in ("CORRECT", "INCORRECT"):
            return Parsed(float(word == "CORRECT"), True)
        return Parsed(None, False)

    def combine(self, scores, item, protocol):
        return scores[0]

    def notes(self, protocol):
        return (
            "prompt set strict: memeval's own (docs/judges.md); only a one-word CORRECT/INCORRECT is a "
            "verdict",
        )


PROMPT_SET = StrictPrompts()
