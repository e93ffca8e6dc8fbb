"""noise@k: the share of what the agent is shown that matches the query's known noise patterns.

Sits beside the relevance metrics in evaluation (experiments/evaluate/table.py adds it to the per-query
table and so to metrics.json, overall and per label). A query's `noise_patterns` are regular
expressions (searched, not anchored unless they say so) over each returned memory's own text.

    noise@k = (# of the top min(k, n_returned) whose text matches any pattern) / min(k, n_returned)

It divides by what was shown, not by k: a system that returns 2 results, both noise, shows 100%
noise, not 40% (P@k divides by k, so returning less can never inflate it; noise must not be
deflatable that way either). An empty list shows no noise (0). A query without patterns scores 0
(nothing counts as noise for it); a suite where no query has patterns gets no noise column at all.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from retrieval.types import Query

if TYPE_CHECKING:  # pandas when a table is built: the metric scan imports this module for --help too
    import pandas as pd


def noise_at_k(texts: Sequence[str], patterns: Sequence[str], k: int = 5) -> float:
    """Share of the first min(k, len(texts)) texts matching any pattern; 0 for an empty list."""
    shown = list(texts[:k])
    if not shown or not patterns:
        return 0.0
    compiled = [re.compile(p) for p in patterns]
    return sum(any(c.search(t) for c in compiled) for t in shown) / len(shown)


def noise_table(
    queries: Sequence[Query], run: Mapping[str, Sequence[str]], texts: Mapping[str, str], k: int = 5
) -> pd.DataFrame:
    """Per query `noise@k`, indexed by query id; empty (no columns) when no query has noise patterns."""
    import pandas as pd

    if not any(q.noise_patterns for q in queries):
        return pd.DataFrame(index=pd.Index([q.id for q in queries], name="query_id"))
    values = {q.id: noise_at_k([texts[m] for m in run.get(q.id, ())], q.noise_patterns, k) for q in queries}
    return pd.DataFrame({f"noise@{k}": pd.Series(values, dtype=float)}).rename_axis("query_id")
