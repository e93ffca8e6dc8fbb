"""LoCoMo's retrieval-recall scoring, verbatim where marked, for tests/evaluate/test_official_scorers.py only.

Provenance: github.com/snap-research/LoCoMo at commit 3eb6f2c585f5e1699204e3c3bdf7adc5c28cb376,
- `eval_question_answering`: task_eval/evaluation.py:189-241, the answer-F1 lines (201-225) left out (they
  need bert_score, nltk and regex and do not touch recall); the recall lines 228-237 are verbatim;
- `question_recall_as_stored`: task_eval/evaluate_qa.py:101-103 (the value written per question);
- `overall_recall`: the rag branch of `analyze_aggr_acc`, task_eval/evaluation_stats.py:52-67 and 127-138.
Copyright the LoCoMo authors (Maharana et al., ACL 2024). Licence: Creative Commons
Attribution-NonCommercial 4.0 International (tests/upstream/LICENSE-LoCoMo.txt,
https://creativecommons.org/licenses/by-nc/4.0/). Changes: the excerpts above, wrapped as functions; no
line of scoring logic is altered. Used for non-commercial research testing only.
"""

from collections import defaultdict


def eval_question_answering(qas, eval_key='prediction', metric='f1'):
    all_recall = []
    for i, line in enumerate(qas):
        # [evaluation.py:201-225, answer F1, left out]
        if eval_key + '_context' in line and len(line['evidence']) > 0:
            # recall_acc for dialog
            if line[eval_key + '_context'][0].startswith('S'):
                sessions = [e[1:] for e in line[eval_key + '_context']]
                recall_acc = float(sum([ev.split(':')[0][1:] in sessions for ev in line["evidence"]]))/len(line['evidence'])
            else:
                recall_acc = float(sum([ev in line[eval_key + '_context'] for ev in line["evidence"]]))/len(line['evidence'])
            all_recall.append(recall_acc)
        else:
            all_recall.append(1)
    return all_recall


def question_recall_as_stored(recall, i):
    # evaluate_qa.py:103
    return round(recall[i], 3)


def overall_recall(qas, model_name):
    total_counts = defaultdict(lambda: 0)
    recall_by_category = defaultdict(lambda: 0)
    for i, qa in enumerate(qas):
        total_counts[qa['category']] += 1
        qa['evidence'] = [q.replace('(', '').replace(')', '') for q in qa["evidence"]]
        if len(qa['evidence']) > 0:
            recall_by_category[qa['category']] += qa[model_name + '_recall']
    return sum(list(recall_by_category.values()))/sum(list(total_counts.values()))
