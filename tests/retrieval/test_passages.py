"""Passages for long memories: the split, the aggregation to the memory, and the passage channel."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval.passages import aggregate_passages, split_passages
from retrieval.retrievers.passage import PassageRetriever
from retrieval.stage import FieldError
from retrieval.types import Corpus
from tests.support import memory, query


def words(n: int, start: int = 0) -> str:
    return " ".join(f"w{i}" for i in range(start, start + n))


def test_a_long_memory_is_cut_into_overlapping_windows_that_cover_every_word():
    passages = split_passages(words(10), size=4, stride=3)
    assert passages == [words(4, 0), words(4, 3), words(4, 6)]
    covered = {w for p in passages for w in p.split()}
    assert covered == set(words(10).split())


def test_the_last_window_ends_at_the_memorys_end():
    passages = split_passages(words(11), size=4, stride=3)
    assert passages[-1] == words(4, 7)  # w7..w10: the tail is read, not dropped
    assert all(len(p.split()) == 4 for p in passages)


def test_a_short_memory_is_one_passage_with_its_text_unchanged():
    text = "line one\n\tline  two"  # whitespace kept: its whole-message vector is reused from the cache
    assert split_passages(text, size=4, stride=2) == [text]
    assert split_passages(words(4), size=4, stride=2) == [words(4)]


def test_empty_text_is_one_empty_passage():
    assert split_passages("", size=4, stride=2) == [""]
    assert split_passages("   ", size=4, stride=2) == ["   "]


def test_unicode_words_are_split_on_whitespace_and_kept_whole():
    text = "café naïve 東京 über straße ünïcödé ☃ ok"
    passages = split_passages(text, size=3, stride=3)
    assert passages == ["café naïve 東京", "über straße ünïcödé", "ünïcödé ☃ ok"]


def test_stride_larger_than_size_is_refused():
    with pytest.raises(ValueError, match="stride"):
        split_passages(words(10), size=4, stride=5)


def test_max_takes_each_memorys_best_passage():
    scores = np.array([0.1, 0.9, 0.5, 0.3, 0.2])
    owner = np.array([0, 0, 1, 1, 2])
    assert aggregate_passages(scores, owner, 3, top_m=1).tolist() == [0.9, 0.5, 0.2]


def test_top_m_sum_adds_each_memorys_m_best_passages():
    scores = np.array([0.1, 0.9, 0.5, 0.3, 0.2, 0.4])
    owner = np.array([0, 0, 1, 1, 2, 0])
    out = aggregate_passages(scores, owner, 3, top_m=2)
    np.testing.assert_allclose(out, [0.9 + 0.4, 0.5 + 0.3, 0.2])
    # top-m sum rewards a memory with several good passages; max does not.
    assert np.argmax(out) == 0 and np.argmax(aggregate_passages(scores, owner, 3, top_m=1)) == 0


def test_passage_owners_need_not_be_sorted():
    scores = np.array([0.2, 0.7, 0.1])
    owner = np.array([1, 0, 1])
    assert aggregate_passages(scores, owner, 2, top_m=1).tolist() == [0.7, 0.2]


def test_bm25_passage_channel_finds_a_fact_at_the_end_of_a_long_memory():
    filler = words(300)
    memories = [
        memory("long", filler + " the spare key hides under the blue flowerpot"),
        memory("short", "we talked about a flowerpot once"),
        memory("other", words(50, 1000)),
        memory("elsewhere", "the spare key hides under the blue flowerpot", scope="c2"),
    ]
    corpus = Corpus(tuple(memories))
    index = PassageRetriever(scorer="bm25", size=40, stride=30).build(corpus)
    assert index.n_passages > len(memories)
    found, scores = index.search(query("q", "where is the spare key hidden", "c1"))
    assert corpus.ids[found].tolist()[0] == "long"  # only its last passage holds the fact
    assert "elsewhere" not in corpus.ids[found].tolist()  # its own scope only
    assert np.all(np.diff(scores) <= 0)


def test_passage_channel_config_is_checked():
    with pytest.raises(FieldError) as err:
        PassageRetriever(scorer="dense", size=10, stride=20)
    fields = {name for name, _ in err.value.problems}
    assert fields == {"stride", "encoder"}


@pytest.mark.slow
def test_dense_passages_go_through_the_embedding_cache_and_reuse_whole_message_vectors(tmp_path):
    """A tiny random BERT stands in for MiniLM: the real sentence-transformers and cache code paths."""
    from retrieval.encoder import SentenceEncoder
    from tests.support import build_tiny_bert

    model = str(build_tiny_bert(tmp_path / "model", cross_encoder=False))
    cache = str(tmp_path / "embeddings")
    short, long = "the spare key is under the blue flowerpot", words(100)
    corpus = Corpus((memory("short", short), memory("long", long)))
    whole = SentenceEncoder(model=model, cache_dir=cache, show_progress=False)
    whole_vectors = whole.encode(corpus.texts(), role="document")

    encoder = SentenceEncoder(model=model, cache_dir=cache, show_progress=False)
    index = PassageRetriever(encoder=encoder, size=40, stride=30).build(corpus)
    assert index.n_passages == 1 + 3  # 100 words: windows at 0, 30 and 60
    assert encoder.stats == {"hits": 1, "misses": 3}  # the short memory's passage is its cached text
    found, scores = index.search(query("q", "where is the spare key"))
    q = encoder.encode(["where is the spare key"], role="query")[0]
    by_id = dict(zip(corpus.ids[found].tolist(), scores.tolist(), strict=True))
    assert by_id["short"] == pytest.approx(float(whole_vectors[0] @ q), abs=1e-6)
    passages = split_passages(long, 40, 30)
    best = max(float(v @ q) for v in encoder.encode(passages, role="document"))
    assert by_id["long"] == pytest.approx(best, abs=1e-6)
    rebuilt = SentenceEncoder(model=model, cache_dir=cache, show_progress=False)
    PassageRetriever(encoder=rebuilt, size=40, stride=30).build(corpus)
    assert rebuilt.stats["misses"] == 0  # a second build reads every passage vector from the cache


@pytest.mark.slow
def test_on_graph_synth_long_dense_passages_find_the_last_sentence_whole_message_dense_cannot(tmp_path):
    """The generated long reviews put their fact past MiniLM's 256 tokens: the real model, the real suite."""
    from transformers import AutoTokenizer

    from experiments.evaluate.table import evaluate
    from experiments.suites.generators.graph_synth import graph_synth
    from retrieval.encoder import SentenceEncoder
    from retrieval.pipeline import Pipeline
    from retrieval.retrievers.dense import DenseRetriever
    from tests.support import CACHE_DIR

    suite = graph_synth(conversations=1, services=9, filler=5, review_sentences=24)
    encoder = SentenceEncoder(cache_dir=str(CACHE_DIR / "embeddings"), show_progress=False)
    reviews = [m for m in suite.memories if m.metadata["kind"] == "review"]
    assert len(reviews) == 3
    tokenizer = AutoTokenizer.from_pretrained(encoder.path)
    for review in reviews:  # the service's name is only in the last sentence, beyond the encoder's window
        assert len(tokenizer(review.text)["input_ids"]) > 256

    def r_at_10(stage) -> dict[str, float]:
        out = Pipeline((stage,), depth=100).run(suite.memories, suite.queries, progress=False)
        by_label = evaluate(suite, out, ["R@10"]).metrics["by_label"]["ability"]
        return {label: values["R@10"] for label, values in by_label.items()}

    whole = r_at_10(DenseRetriever(encoder=encoder))
    passages = r_at_10(PassageRetriever(encoder=encoder, scorer="dense"))
    assert whole["long_memory"] == 0.0 and passages["long_memory"] == 1.0
    assert passages["control"] == whole["control"] and passages["multi_hop"] == whole["multi_hop"]
