"""LoCoMo's answer scoring and RAG answer prompt, verbatim where marked, for tests/answer/ only.

Provenance: github.com/snap-research/LoCoMo, branch `code` at commit 92286325a40764bee61f77824ddb95233b11c4d6 (the
snapshot reachable here; the retrieval lines in locomo_evaluation.py cite a later main commit, 3eb6f2c, where the
same code was reorganised and the RAG prompt building moved to task_eval/gpt_utils.py, which is not in this snapshot):
- `normalize_answer`, `exact_match_score`, `f1_score`, `f1`: task_eval/evaluation.py:74-91, 94-100, 125-137, 140-144;
- `eval_question_answering_answers`: task_eval/evaluation.py:188-238, the answer lines (the bert_score branch,
  209-213, and the recall lines left out, so line 214's `elif` reads `if`; it takes the qa list instead of
  reading a file);
- `category_means`: the per-category lines of `analyze_acc`, task_eval/evaluation_stats.py:46-51 and 79-81;
- `QA_PROMPT`, `QA_PROMPT_CAT_5`: task_eval/evaluate_gpts.py:32-43; `dialog_database`: its dialog RAG
  database, evaluate_gpts.py:130-144; `rag_context`: get_rag_context, evaluate_gpts.py:273-297 (the ranking by
  embedding, 275-276, replaced by the given order); `question_and_prompt`: evaluate_gpts.py:390-406 and 432;
  `get_cat_5_answer`: evaluate_gpts.py:211-225.
Copyright the LoCoMo authors (Maharana et al., ACL 2024). Licence: Creative Commons
Attribution-NonCommercial 4.0 International (tests/upstream/LICENSE-LoCoMo.txt,
https://creativecommons.org/licenses/by-nc/4.0/). Changes: the excerpts above, wrapped as functions; `regex`
imported as upstream does, nltk's PorterStemmer as upstream builds it; `random` passed in (upstream uses the
module's global generator). No line of scoring or prompt logic is altered but the `elif` above. Used for non-commercial research
testing only.
"""

import random
from collections import Counter, defaultdict
import string

import numpy as np
import regex
from nltk.stem import PorterStemmer

ps = PorterStemmer()


# ---- task_eval/evaluation.py:74-91, verbatim ----
def normalize_answer(s):

    s = s.replace(',', "")
    def remove_articles(text):
        # return regex.sub(r'\b(a|an|the)\b', ' ', text)
        return regex.sub(r'\b(a|an|the|and)\b', ' ', text)

    def white_space_fix(text):
        return ' '.join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return ''.join(ch for ch in text if ch not in exclude)

    def lower(text):
        return text.lower()

    return white_space_fix(remove_articles(remove_punc(lower(s))))


# ---- task_eval/evaluation.py:94-100, verbatim ----
def exact_match_score(prediction, ground_truth):

    prediction = normalize_answer(prediction)
    ground_truth = normalize_answer(ground_truth)
    # print('# EM #', prediction, ' | ', ground_truth, ' #', set(prediction.split()) == set(ground_truth.split()))
    # return normalize_answer(prediction) == normalize_answer(ground_truth)
    return set(prediction.split()) == set(ground_truth.split())


# ---- task_eval/evaluation.py:125-144, verbatim ----
def f1_score(prediction, ground_truth):
    prediction_tokens = [ps.stem(w) for w in normalize_answer(prediction).split()]
    ground_truth_tokens = [ps.stem(w) for w in normalize_answer(ground_truth).split()]
    common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    f1 = (2 * precision * recall) / (precision + recall)
    # print('# F1 #', prediction, ' | ', ground_truth, ' #', precision, recall, f1)
    # return recall
    return f1


def f1(prediction, ground_truth):
    predictions = [p.strip() for p in prediction.split(',')]
    ground_truths = [g.strip() for g in ground_truth.split(',')]
    # print('# F1 [multi-answer]#', predictions, ' | ', ground_truths, ' #', np.mean([max([f1_score(prediction, gt) for prediction in predictions]) for gt in ground_truths]))
    return np.mean([max([f1_score(prediction, gt) for prediction in predictions]) for gt in ground_truths])


def eval_question_answering_answers(lines, eval_key='prediction'):
    # task_eval/evaluation.py:195-238 (answer lines)
    all_ems = []
    answer_lengths = []
    for i, line in enumerate(lines):
        # line = json.loads(line)
        if type(line[eval_key]) == list:
            answer = line['answer']
        else:
            answer = str(line['answer'])
        if line['category'] == 3:
            answer = answer.split(';')[0].strip()
        
        output = line[eval_key]

        if line['category'] in [2, 3, 4]:  # [evaluation.py:209-213, the bertscore branch, left out; `elif` upstream]
            # print(answer, output)
            all_ems.append(f1_score(output, answer))
            # all_ems.append(rougel_score(output, answer))
            # all_ems.append(bert_score(output, answer))
        
        elif line['category'] in [1]:
            # all_ems.append(bert_score(output, answer))
            all_ems.append(f1(output, answer))
            # all_ems.append(rougel_score(output, answer))
            answer_lengths.append(len(output.split()))

        elif line['category'] in [5]:
            # all_ems.append(1-rougel_score(output, answer))
            if 'no information available' in output.lower() or 'not mentioned' in output.lower():
                all_ems.append(1)
            else:
                all_ems.append(0)
                # all_ems.append(1-f1_score(output, answer))

        else:
            print(line)
            raise ValueError
        
        assert i+1 == len(all_ems), all_ems
    return all_ems


def category_means(qas, metric_key):
    # task_eval/evaluation_stats.py:34-35 and 46-51, 79-81 (the printed per-category accuracy)
    total_counts = defaultdict(lambda: 0)
    acc_counts = defaultdict(lambda: 0)
    printed = {}
    for i, qa in enumerate(qas):
        total_counts[qa['category']] += 1
        if metric_key in qa:
            acc_counts[qa['category']] += qa[metric_key]
    for k, v in total_counts.items():
        printed[k] = (v, acc_counts[k], round(float(acc_counts[k])/v, 3))
    return printed


# ---- task_eval/evaluate_gpts.py:32-43, verbatim ----
QA_PROMPT = """
Based on the above context, write an answer in the form of a short phrase for the following question. Answer with exact words from the context whenever possible.

Question: {} Short answer:
"""

QA_PROMPT_CAT_5 = """
Based on the above context, answer the following question.

Question: {} Short answer:
"""



def dialog_database(data):
    # task_eval/evaluate_gpts.py:130-144 (rag_mode == 'dialog'), verbatim
    dialogs = []
    date_times = []
    context_ids = []
    for i in range(1,50):

        if 'session_%s' % i not in data:
            break
        if len(data['session_%s' % i]) == 0:
           continue
    
        date_time = data['session_%s_date_time' % i]
        for dialog in data['session_%s' % i]:
            context_ids.append(dialog['dia_id'])
            date_times.append(date_time)
            dialogs.append(dialog['speaker'] + ' said, \"' + dialog['clean_text'] + '\"')
    return {'date_time': date_times, 'dia_id': context_ids, 'context': dialogs}


def rag_context(context_database, sorted_outputs, args):
    # task_eval/evaluate_gpts.py:277-297, verbatim (sorted_outputs given: the ranking, lines 275-276, left out)
    sorted_context = [context_database['context'][idx] for idx in sorted_outputs[:args.top_k]]
    
    sorted_context_ids = []
    for idx in sorted_outputs[:args.top_k]:
        context_id = context_database['dia_id'][idx]
        if type(context_id) == str:
            if ',' in context_id:
                context_id = [s.strip() for s in context_id.split(',')]
        if type(context_id) == list:
            sorted_context_ids.extend(context_id)
        else:
            sorted_context_ids.append(context_id)

    # sorted_context_ids = [context_database['dia_id'][idx] for idx in sorted_outputs[:args.top_k]]
    sorted_date_times = [context_database['date_time'][idx] for idx in sorted_outputs[:args.top_k]]
    if args.rag_mode in ['dialog', 'observation']:
        query_context = '\n'.join([date_time + ': ' + context for date_time, context in zip(sorted_date_times, sorted_context)])
    else:
        query_context = '\n\n'.join([date_time + ': ' + context for date_time, context in zip(sorted_date_times, sorted_context)])

    return query_context, sorted_context_ids


def question_and_prompt(qa, query_conv, rng=random):
    # task_eval/evaluate_gpts.py:390-406 and 432, verbatim but for `rng` (upstream: the module `random`)
    questions, cat_5_idxs, cat_5_answers = [], [], []
    if qa['category'] == 2:
        questions.append(qa['question'] + ' Use DATE of CONVERSATION to answer with an approximate date.')
    elif qa['category'] == 5:
        question = qa['question'] + " Select the correct answer: (a) {} (b) {}. "
        if rng.random() < 0.5:
            question = question.format('Not mentioned in the conversation', qa['answer'])
            answer = {'a': 'Not mentioned in the conversation', 'b': qa['answer']}
        else:
            question = question.format(qa['answer'], 'Not mentioned in the conversation')
            answer = {'b': 'Not mentioned in the conversation', 'a': qa['answer']}

        cat_5_idxs.append(len(questions))
        questions.append(question)
        cat_5_answers.append(answer)
        # questions.append(qa['question'] + "Write NOT ANSWERABLE if the question cannot be answered")
    else:
        questions.append(qa['question'])
    query = query_conv + '\n\n' + QA_PROMPT.format(questions[0]) if len(cat_5_idxs) == 0 else query_conv + '\n\n' + QA_PROMPT_CAT_5.format(questions[0])
    return query, (cat_5_answers[0] if cat_5_answers else None)


# ---- task_eval/evaluate_gpts.py:211-225, verbatim ----
def get_cat_5_answer(model_prediction, answer_key):

    model_prediction = model_prediction.strip().lower()
    if len(model_prediction) == 1:
        if 'a' in model_prediction:
            return answer_key['a']
        else:
            return answer_key['b']
    elif len(model_prediction) == 3:
        if '(a)' in model_prediction:
            return answer_key['a']
        else:
            return answer_key['b']
    else:
        return model_prediction
