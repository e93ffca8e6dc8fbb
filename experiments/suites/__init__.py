"""Suites: loaders, the canonical format, generators."""
