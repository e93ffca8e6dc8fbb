"""The conventions users switch between, as parameters of a metric name (ir_measures' syntax).

    P(rel=2)@5         relevance threshold: a grade >= 2 counts as relevant (trec_eval -l 2); every
                       binary measure (P, R, RR, AP, hit, R_all, Rprec) and its R (relevant count) use it
    nDCG(gain=exp)@10  exponential gains 2^g - 1 (ranx, gdeval, Burges et al.); default `linear`, the
                       grade itself (trec_eval)
    nDCG(rel=2)@10     accepted and changes nothing: trec_eval's nDCG keeps the raw grades whatever -l says
    Rprec              R-precision (its own kernel, experiments/evaluate/metrics/r_precision.py)

A query with no relevant document at the threshold scores 0 on every measure, as in trec_eval (a
query that is answerable at grade 1 but not at grade 2 stays in the table with 0). Whether queries
with no relevant memory at all count as 0 or are reported apart is a table option (`per_query`'s
`empty`), not a parameter: it decides which rows exist.
"""

from __future__ import annotations

import re

import numpy as np

GAINS = ("linear", "exp")
_PARAMETER = re.compile(r"(?P<key>rel|gain)=(?P<value>[^,=]+)")
KNOWN_PARAMETERS = "rel=<integer >= 1>, gain=linear|exp (nDCG only)"


def parse_parameters(text: str, family: str) -> dict[str, int | str]:
    """`rel=2,gain=exp` -> {"rel": 2, "gain": "exp"}; ValueError naming the problem otherwise."""
    out: dict[str, int | str] = {}
    for part in text.split(","):
        match = _PARAMETER.fullmatch(part.strip())
        if match is None:
            raise ValueError(f"metric parameter {part.strip()!r} is not one of {KNOWN_PARAMETERS}")
        key, value = match["key"], match["value"]
        if key in out:
            raise ValueError(f"metric parameter {key!r} is given twice")
        if key == "rel":
            if not value.isascii() or not value.isdigit() or int(value) < 1:
                raise ValueError(f"rel must be an integer >= 1, got {value!r}")
            out[key] = int(value)
        else:
            if family != "nDCG" or value not in GAINS:
                raise ValueError(f"gain={value} is for nDCG only, one of {', '.join(GAINS)}")
            out[key] = value
    return out


def at_threshold(gains: np.ndarray, ideal: np.ndarray, rel: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(gains, n_relevant, ideal) where only grades >= `rel` count: lower grades become 0. The ideal
    grades are sorted best first, so zeroing them keeps the order."""
    if rel <= 1:
        return gains, (ideal > 0).sum(axis=-1), ideal
    ideal = np.where(ideal >= rel, ideal, 0.0)
    return np.where(gains >= rel, gains, 0.0), (ideal > 0).sum(axis=-1), ideal


def exponential(grades: np.ndarray) -> np.ndarray:
    """2^g - 1 per grade (0 stays 0): the exponential gain of nDCG."""
    return np.exp2(grades) - 1.0
