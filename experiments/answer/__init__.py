"""The answer stage: an answerer reads a run's retrieved memories and answers; judges score the answer."""
