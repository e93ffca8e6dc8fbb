"""Fusion stages: each combines the retrieval channels' hits into one candidate list per query
(rrf.py, weighted.py, tier_fusion.py). The fusion arithmetic they share is retrieval/fusion_arithmetic.py."""
