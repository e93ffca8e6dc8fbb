"""Scoring a run: metrics/ holds one metric kernel per file (and the noise model of a run's scores),
table.py turns rankings and qrels into the per-query table, statistics.py compares two runs' tables.
Sits after experiments/run/ (which calls it) and before experiments/track/ (which logs its output).
"""
