"""Training of models the stages use (the cross-encoder reranker): commands, not part of a run."""
