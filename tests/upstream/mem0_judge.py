"""mem0's former LoCoMo LLM judge (the CORRECT/WRONG "generous" prompt), verbatim where marked, for tests only.

Provenance: github.com/mem0ai/mem0 at commit b3ede5b7c0ac0e847b03786a603c107ac943b3ee (the parent of 9315e3036,
"retire in-repo evaluation/"), evaluation/metrics/llm_judge.py:12-37 (`ACCURACY_PROMPT`) and the reply parse of
`evaluate_llm_judge` (llm_judge.py:54-55); `extract_json`: mem0/memory/utils.py:125-142 (whole).
Copyright the mem0 authors. Licence: Apache License 2.0 (tests/upstream/LICENSE-mem0.txt). Changes: the parse
lines wrapped as a function taking the reply text. No line of logic is altered.
"""

import json
import re


# ---- evaluation/metrics/llm_judge.py:12-37, verbatim ----
ACCURACY_PROMPT = """
Your task is to label an answer to a question as ’CORRECT’ or ’WRONG’. You will be given the following data:
    (1) a question (posed by one user to another user), 
    (2) a ’gold’ (ground truth) answer, 
    (3) a generated answer
which you will score as CORRECT/WRONG.

The point of the question is to ask about something one user should know about the other user based on their prior conversations.
The gold answer will usually be a concise and short answer that includes the referenced topic, for example:
Question: Do you remember what I got the last time I went to Hawaii?
Gold answer: A shell necklace
The generated answer might be much longer, but you should be generous with your grading - as long as it touches on the same topic as the gold answer, it should be counted as CORRECT. 

For time related questions, the gold answer will be a specific date, month, year, etc. The generated answer might be much longer or use relative time references (like "last Tuesday" or "next month"), but you should be generous with your grading - as long as it refers to the same date or time period as the gold answer, it should be counted as CORRECT. Even if the format differs (e.g., "May 7th" vs "7 May"), consider it CORRECT if it's the same date.

Now it's time for the real question:
Question: {question}
Gold answer: {gold_answer}
Generated answer: {generated_answer}

First, provide a short (one sentence) explanation of your reasoning, then finish with CORRECT or WRONG. 
Do NOT include both CORRECT and WRONG in your response, or it will break the evaluation script.

Just return the label CORRECT or WRONG in a json format with the key as "label".
"""



# ---- mem0/memory/utils.py:125-142, verbatim ----
def extract_json(text):
    """
    Extracts JSON content from a string, removing enclosing triple backticks and optional 'json' tag if present.
    If no code block is found, attempts to locate JSON by finding the first '{' and last '}'.
    If that also fails, returns the text as-is.
    """
    text = text.strip()
    match = re.search(r"```(?:json)?\s*(.*?)\s*```", text, re.DOTALL)
    if match:
        json_str = match.group(1)
    else:
        start_idx = text.find("{")
        end_idx = text.rfind("}")
        if start_idx != -1 and end_idx != -1 and end_idx > start_idx:
            json_str = text[start_idx : end_idx + 1]
        else:
            json_str = text
    return json_str


def parse_label(content):
    # llm_judge.py:54-55 (content is response.choices[0].message.content)
    label = json.loads(extract_json(content))["label"]
    return 1 if label == "CORRECT" else 0
