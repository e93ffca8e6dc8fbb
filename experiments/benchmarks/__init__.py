"""Benchmarks of the harness itself: pipeline scale and latency, inference backends, sweep cost.

Each module is a command (`python -m experiments.benchmarks.<name>`) that writes reports/benchmarks/.
"""
