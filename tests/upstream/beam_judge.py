"""BEAM's rubric judge prompt and its judging code, verbatim where marked, for tests only.

Provenance: github.com/mohammadtavakoli78/BEAM at commit b2a3ee8ba12d68f83143dda191097dc3e028ddd3,
- `unified_llm_judge_base_prompt`: src/prompts.py:11547-11617;
- `parse_json_response`: src/evaluation/compute_metrics.py:311-336 (whole);
- `evaluate_abstention` (the shape of nine of the ten abilities' judging: `int(response['score'])`) and the
  judging loop of `evaluate_event_ordering` (the tenth: `float(...)`): compute_metrics.py:339-365 and 412-428,
  with `model.invoke(prompt).content` as `model(prompt)` and `json.loads(repair_json(...))`, the fallback
  (json_repair, not installed here), left out: a reply parse_json_response refuses raises.
Copyright the BEAM authors (Tavakoli et al.). The repository carries no licence file at this commit: these
lines are quoted, unchanged, only so the tests can check memeval reproduces BEAM's judge byte for byte
(interoperability testing); no licence is granted or implied by this copy.
"""

import json
import re


# ---- src/prompts.py:11547-11617, verbatim ----
unified_llm_judge_base_prompt = """
You are an expert evaluator tasked with judging whether the LLM's response demonstrates compliance with the specified RUBRIC CRITERION.

## EVALUATION INPUTS
- QUESTION (what the user asked): <question>
- RUBRIC CRITERION (what to check): <rubric_item>
- RESPONSE TO EVALUATE: <llm_response>

## EVALUATION RUBRIC:
The rubric defines a specific requirement, constraint, or expected behavior that the LLM response should demonstrate. 

**IMPORTANT**: Pay careful attention to whether the rubric specifies:
- **Positive requirements** (things the response SHOULD include/do)
- **Negative constraints** (things the response SHOULD NOT include/do, often indicated by "no", "not", "avoid", "absent")

## RESPONSIVENESS REQUIREMENT (anchored to the QUESTION)
A compliant response must be **on-topic with respect to the QUESTION** and attempt to answer it.
- If the response does not address the QUESTION, score **0.0** and stop.
- For negative constraints, both must hold: (a) the response is responsive to the QUESTION, and (b) the prohibited element is absent.

## SEMANTIC TOLERANCE RULES:
Judge by meaning, not exact wording.
- Accept **paraphrases** and **synonyms** that preserve intent.
- **Case/punctuation/whitespace** differences must be ignored.
- **Numbers/currencies/dates** may appear in equivalent forms (e.g., “$68,000”, “68k”, “68,000 USD”, or “sixty-eight thousand dollars”). Treat them as equal when numerically equivalent.
- If the rubric expects a number or duration, prefer **normalized comparison** (extract and compare values) over string matching.

## STYLE NEUTRALITY (prevents style contamination):
Ignore tone, politeness, length, and flourish unless the rubric explicitly requires a format/structure (e.g., “itemized list”, “no citations”, “one sentence”).
- Do **not** penalize hedging, voice, or verbosity if content satisfies the rubric.
- Only evaluate format when the rubric **explicitly** mandates it.

## SCORING SCALE:
- **1.0 (Complete Compliance)**: Fully complies with the rubric criterion.
  - Positive: required element present, accurate, properly executed (allowing semantic equivalents).
  - Negative: prohibited element **absent** AND response is **responsive**.
  
- **0.5 (Partial Compliance)**: Partially complies.
  - Positive: element present but minor inaccuracies/incomplete execution.
  - Negative: generally responsive and mostly avoids the prohibited element but with minor/edge violations.
  
- **0.0 (No Compliance)**: Fails to comply.
  - Positive: required element missing or incorrect.
  - Negative: prohibited element present **or** response is non-responsive/evasive even if the element is absent.

## EVALUATION INSTRUCTIONS:
1. **Understand the Requirement**: Determine if the rubric is asking for something to be present (positive) or absent (negative/constraint).

2. **Parse Compound Statements**: If the rubric contains multiple elements connected by "and" or commas, evaluate whether:
   - **All elements** must be present for full compliance (1.0)
   - **Some elements** present indicates partial compliance (0.5)
   - **No elements** present indicates no compliance (0.0)
   
3. **Check Compliance**: 
   - For positive requirements: Look for the presence and quality of the required element
   - For negative constraints: Look for the absence of the prohibited element

4. **Assign Score**: Based on compliance with the specific rubric criterion according to the scoring scale above.

5. **Provide Reasoning**: Explain whether the rubric criterion was satisfied and justify the score.

## OUTPUT FORMAT:
Return your evaluation in JSON format with two fields:

{
   "score": [your score: 1.0, 0.5, or 0.0],
   "reason": "[detailed explanation of whether the rubric criterion was satisfied and why this justified the assigned score]"
}

NOTE: ONLY output the json object, without any explanation before or after that
"""


# ---- src/evaluation/compute_metrics.py:311-336, verbatim ----
def parse_json_response(response: str):
    response = response.strip()

    if response.startswith("```"):
        match = re.search(
            r"```(?:json)?\s*(\[.*\]|\{.*\})\s*```", response, re.DOTALL)
        if match:
            response = match.group(1).strip()

    try:
        return json.loads(response)
    except json.JSONDecodeError:
        pass

    match = re.search(r'(\{.*?\}|\[.*?\])', response, re.DOTALL)
    if match:
        json_part = match.group(1)
        try:
            return json.loads(json_part)
        except Exception as e:
            raise ValueError(
                f"Found possible JSON but failed to parse it: {e}")

    raise ValueError("No valid JSON found in response.")




def evaluate_abstention(rubric: list,
                        llm_response: str,
                        probing_question: str,
                        model):
    # compute_metrics.py:339-365 (model(prompt) for model.invoke(prompt).content; no repair_json fallback)
    llm_judge_responses = []
    score = 0
    for item in rubric:
        prompt = unified_llm_judge_base_prompt.\
            replace("<rubric_item>", item).\
            replace("<llm_response>", llm_response)

        response = model(prompt).strip()
        response = parse_json_response(response=response)

        score += int(response['score'])
        llm_judge_responses.append(response)

    llm_judge_score = score / len(rubric)

    return dict(
        llm_judge_score=llm_judge_score,
        llm_judge_responses=llm_judge_responses
    )


def event_ordering_judge(rubric: list, llm_response: str, model):
    # compute_metrics.py:412-428 (the same substitutions)
    llm_judge_responses = []
    llm_judge_score = 0
    for item in rubric:
        prompt = unified_llm_judge_base_prompt.\
            replace("<rubric_item>", item).\
            replace("<llm_response>", llm_response)

        response = model(prompt).strip()
        response = parse_json_response(response=response)

        llm_judge_score += float(response['score'])
        llm_judge_responses.append(response)

    llm_judge_score = llm_judge_score / len(rubric)
    return llm_judge_score
