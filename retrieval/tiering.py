"""Shared rules of the tiered-memory mechanism: which tier a memory is searched in, and its factors.

One mechanism, two policies:
- high-order policy: a memory's own `tier` field (observation, lesson, semantic, procedural, crystal,
  insight, facet), missing -> `default_tier`;
- advisory policy: the ingest stage `AdvisoryTiers` writes the annotation `search_tier`
  (pinned | active | archive) from validation counts, reliability, promotion, recency, confidence.
The annotation wins over the field, so a policy stage re-tiers a suite without touching its data.
`TieredRetriever` (retrieval/retrievers/tiered.py) searches each tier; `TierFusion`
(retrieval/fusions/tier_fusion.py) merges the tiers with per-tier weights and strength x confidence.
"""

from __future__ import annotations

import numpy as np

from retrieval.types import Corpus, Memory

SEARCH_TIER = "search_tier"  # annotation written by a tier policy ingest stage
HIGH_ORDER_TIERS = ("observation", "lesson", "semantic", "procedural", "crystal", "insight", "facet")


def tier_of(memory: Memory, default: str) -> str:
    return memory.annotations.get(SEARCH_TIER) or memory.tier or default


def tier_labels(corpus: Corpus, index: np.ndarray, default: str) -> np.ndarray:
    """Tier names (object array) of the memories at `index`."""
    policy = corpus.column(SEARCH_TIER)[index]
    field = corpus.column("tier")[index]
    out = np.where(pd_isnull(policy), field, policy)
    return np.where(pd_isnull(out), default, out).astype(object)


def pd_isnull(values: np.ndarray) -> np.ndarray:
    """None or NaN (a float column built from all-missing values) -> True."""
    import pandas as pd  # ~0.2 s: the stage scan behind `memeval-run --help` imports this module

    return np.asarray(pd.isna(values), dtype=bool)


def unit_factor(values: np.ndarray) -> np.ndarray:
    """A float column where a missing value counts as 1.0 (no evidence -> no penalty)."""
    out = np.ones(len(values))
    present = ~pd_isnull(values)
    out[present] = np.asarray(values[present], dtype=np.float64)
    return out
