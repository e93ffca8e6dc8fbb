"""LongMemEval's retrieval scoring, verbatim, for tests/evaluate/test_official_scorers.py only.

Provenance: github.com/xiaowu0162/LongMemEval at commit 9e0b455f4ef0e2ab8f2e582289761153549043fc,
- `dcg`, `ndcg`, `evaluate_retrieval`, `evaluate_retrieval_turn2session`: src/retrieval/eval_utils.py (whole);
- `process_item_flat_index`: src/retrieval/run_retrieval.py:202-229; `correct_docs_of`: run_retrieval.py:272;
- `run_retrieval_average`: run_retrieval.py:385-405 (its averaging loop);
- `print_retrieval_metrics_average`: src/evaluation/print_retrieval_metrics.py:12, 33 and 40.
Copyright (c) 2024 Di Wu, MIT License (tests/upstream/LICENSE-LongMemEval.txt). Changes: the excerpts of
run_retrieval.py and print_retrieval_metrics.py wrapped as functions; one line added, the shim below
(NumPy 2 removed `np.asfarray`, which `dcg` calls).
"""

import numpy as np

if not hasattr(np, "asfarray"): np.asfarray = lambda a, dtype=np.float64: np.asarray(a, dtype=dtype)  # noqa: E701


# ---- src/retrieval/eval_utils.py, verbatim from here ----


def dcg(relevances, k):
    """Discounted Cumulative Gain at k."""
    relevances = np.asfarray(relevances)[:k]
    if relevances.size:
        return relevances[0] + np.sum(relevances[1:] / np.log2(np.arange(2, relevances.size + 1)))
    return 0.


def ndcg(rankings, correct_docs, corpus_ids, k=10):
    """Normalized Discounted Cumulative Gain at k."""
    relevances = [1 if doc_id in correct_docs else 0 for doc_id in corpus_ids]
    sorted_relevances = [relevances[idx] for idx in rankings[:k]]
    ideal_relevance = sorted(relevances, reverse=True)
    ideal_dcg = dcg(ideal_relevance, k)
    actual_dcg = dcg(sorted_relevances, k)
    if ideal_dcg == 0:
        return 0.
    return actual_dcg / ideal_dcg


def evaluate_retrieval(rankings, correct_docs, corpus_ids, k=10):
    recalled_docs = set(corpus_ids[idx] for idx in rankings[:k])
    recall_any = float(any(doc in recalled_docs for doc in correct_docs))
    recall_all = float(all(doc in recalled_docs for doc in correct_docs))
    ndcg_score = ndcg(rankings, correct_docs, corpus_ids, k)
    return recall_any, recall_all, ndcg_score


def evaluate_retrieval_turn2session(rankings, correct_docs, corpus_ids, k=10):
    # convert turn-level labels/results into session-level and then evaluate
    def strip_turn_id(docid):
        return '_'.join(docid.split('_')[:-1])
    correct_docs = list(set([strip_turn_id(x) for x in correct_docs]))

    # revise k to handle document-level retrieval
    corpus_ids = [strip_turn_id(x) for x in corpus_ids]
    effective_k = k
    unique_docids = set(corpus_ids[idx] for idx in rankings[:effective_k])
    while effective_k <= len(corpus_ids) and len(unique_docids) < k:
        effective_k += 1
        unique_docids = set(corpus_ids[idx] for idx in rankings[:effective_k])

    return evaluate_retrieval(rankings, correct_docs, corpus_ids, k=effective_k)

# ---- end of eval_utils.py ----


def process_item_flat_index(data, granularity, sess_id, timestamp):
    corpus = []

    if granularity == 'session':
        text = ' '.join([interact['content'] for interact in data if interact['role'] == 'user'])
        corpus.append(text)
        ids = [sess_id]
        if 'answer' in sess_id and all([not turn['has_answer'] for turn in [x for x in data if x['role'] == 'user']]):
            ids = [sess_id.replace('answer', 'noans')]
    elif granularity == 'turn':
        ids = []
        for i_turn, turn in enumerate(data):
            if turn['role'] == 'user':
                corpus.append(turn['content'])
                if 'answer' not in sess_id:
                    ids.append(sess_id + '_' + str(i_turn+1))
                else:
                    assert 'has_answer' in turn
                    assert turn['has_answer'] in [True, False]
                    if turn['has_answer']:
                        ids.append(sess_id + '_' + str(i_turn+1))
                    else:
                        ids.append((sess_id + '_' + str(i_turn+1)).replace('answer', 'noans'))
                        assert 'answer' not in ids[-1]
    else:
        raise NotImplementedError
    
    return corpus, ids, [timestamp for _ in corpus]


def correct_docs_of(corpus_ids):
    correct_docs = list(set([doc_id for doc_id in corpus_ids if "answer" in doc_id]))
    return correct_docs


def run_retrieval_average(results):
    averaged_results = {
        'session': {},
        'turn': {}
    }
    ignored_qs_abstention, ignored_qs_no_target = set(), set()
    for t in ['session', 'turn']:
        for k in results[0]['retrieval_results']['metrics'][t]:
            try:
                results_list = []
                for eval_entry in results:
                    # will skip abstention instances for reporting the metric
                    if '_abs' in eval_entry['question_id']:
                        ignored_qs_abstention.add(eval_entry['question_id'])
                        continue
                    # will also skip instances with no target labels
                    if not any(('has_answer' in turn) and (turn['has_answer']) for turn in [x for y in eval_entry['haystack_sessions'] for x in y if x['role'] == 'user']):
                        ignored_qs_no_target.add(eval_entry['question_id'])
                        continue
                    results_list.append(eval_entry['retrieval_results']['metrics'][t][k])
                    
                averaged_results[t][k] = np.mean(results_list)
            except:
                continue
    return averaged_results


def print_retrieval_metrics_average(in_data, t, name):
    in_data = [x for x in in_data if '_abs' not in x['question_id']]
    all_metrics = []
    for entry in in_data:
        all_metrics.append(entry['retrieval_results']['metrics'])
    return np.mean([x[t][name] for x in all_metrics])  # printed rounded to 4 places upstream
