"""A learned fusion model: a linear scorer over features derived from the candidates' score columns.

The learned_fusion rank stage (retrieval/stages/learned_fusion.py) scores with it; the trainer
(experiments/training/fusion.py) fits it with scikit-learn's logistic regression and saves it as JSON:
the source columns, the feature names derived from them, the standardisation, the coefficients and the
training provenance. Scoring needs numpy only, and a JSON file has no pickle or library-version trap.

Features, per source column c and per query (the same code for training and scoring):
  c:norm     the column min-max scaled over the query's candidates
  c:rr       1 / (60 + rank of the candidate by c; ties share the best rank), as RRF would weigh it
  c:present  1 when the candidate has a value of c
A candidate without a value (NaN: a channel did not return it) or a column absent from the candidates
(no graph stage in the variant) has the defined missing value 0 in all three.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from retrieval.encoder import ModelNotFoundError

FORMAT = "memeval.learned_fusion.v1"
DERIVED = ("norm", "rr", "present")
RRF_K = 60
# Columns that are not evidence: the ranking score, and columns derived from another column.
NOT_SOURCES = ("score",)
DERIVED_SUFFIXES = ("_rank", "_norm")


class FusionModelError(ModelNotFoundError):
    """A fusion model that is missing, unreadable, or does not fit the stage's columns."""


def feature_names(sources: Sequence[str]) -> list[str]:
    return [f"{c}:{d}" for c in sources for d in DERIVED]


def source_columns(columns: Mapping[str, np.ndarray]) -> list[str]:
    """The score columns a model can learn from: numeric, not `score`, not a `_rank`/`_norm` copy."""
    return sorted(
        c
        for c, v in columns.items()
        if c not in NOT_SOURCES
        and not c.endswith(DERIVED_SUFFIXES)
        and np.issubdtype(np.asarray(v).dtype, np.number)
    )


def fusion_features(columns: Mapping[str, np.ndarray], sources: Sequence[str], n: int) -> np.ndarray:
    """(n candidates x 3 per source) features; missing values and absent columns are 0."""
    out = np.zeros((n, len(DERIVED) * len(sources)))
    for j, name in enumerate(sources):
        if name not in columns:
            continue
        values = np.asarray(columns[name], dtype=np.float64)
        present = np.isfinite(values)
        if not present.any():
            continue
        have = values[present]
        lo, hi = have.min(), have.max()
        norm = np.ones_like(have) if hi == lo else (have - lo) / (hi - lo)
        # Competition rank (1 + how many score higher): tied candidates share a rank, so a feature never
        # depends on the order the candidates arrived in.
        rank = 1 + len(have) - np.searchsorted(np.sort(have), have, side="right")
        out[present, 3 * j] = norm
        out[present, 3 * j + 1] = 1.0 / (RRF_K + rank)
        out[present, 3 * j + 2] = 1.0
    return out


@dataclass(frozen=True)
class LinearFusionModel:
    """Standardised features -> logistic-regression logit."""

    sources: tuple[str, ...]
    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float
    provenance: Mapping[str, Any]

    def score(self, columns: Mapping[str, np.ndarray], n: int) -> np.ndarray:
        x = fusion_features(columns, self.sources, n)
        return ((x - self.mean) / self.scale) @ self.coef + self.intercept

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "sources": list(self.sources),
            "features": feature_names(self.sources),
            "mean": self.mean.tolist(),
            "scale": self.scale.tolist(),
            "coef": self.coef.tolist(),
            "intercept": self.intercept,
            "provenance": dict(self.provenance),
        }

    def save(self, path: str | Path) -> None:
        """Written to a temporary file then renamed: a reader never sees half a model."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=2, sort_keys=True))
        tmp.replace(path)


def _how_to_train(path: str) -> str:
    return (
        f"learned fusion model {path!r} not found. `make fusion` trains the shipped variants' models "
        f"(learned_fusion, beam_best); `python -m experiments.training.fusion output={path}` trains one "
        "(on BEAM 500K unless train_suite.path says otherwise); "
        "or point stage.learned_fusion.model.path at one"
    )


def load_fusion_model(path: str | Path) -> LinearFusionModel:
    """Read and check a saved model; every problem is a FusionModelError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise FusionModelError(_how_to_train(str(path)))
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise FusionModelError(f"{path}: not a readable learned fusion model ({err})") from err
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise FusionModelError(f"{path}: field 'format' must be {FORMAT!r}, got {found!r}")
    sources = data.get("sources")
    if not isinstance(sources, list) or not sources or not all(isinstance(s, str) for s in sources):
        raise FusionModelError(f"{path}: field 'sources' must be a non-empty list of column names")
    expected = feature_names(sources)
    if data.get("features") != expected:
        raise FusionModelError(f"{path}: field 'features' {data.get('features')} does not match {expected}")
    arrays = {}
    for name in ("mean", "scale", "coef"):
        value = np.asarray(data.get(name, []), dtype=np.float64)
        if value.shape != (len(expected),) or not np.isfinite(value).all():
            raise FusionModelError(f"{path}: field {name!r} must be {len(expected)} finite numbers")
        arrays[name] = value
    if np.any(arrays["scale"] <= 0):
        raise FusionModelError(f"{path}: field 'scale' must be positive")
    intercept = data.get("intercept")
    if isinstance(intercept, bool) or not isinstance(intercept, (int, float)):
        raise FusionModelError(f"{path}: field 'intercept' must be a number")
    return LinearFusionModel(
        tuple(sources),
        arrays["mean"],
        arrays["scale"],
        arrays["coef"],
        float(intercept),
        data.get("provenance", {}),
    )


@dataclass(frozen=True, kw_only=True)
class FusionModelFile:
    """The stage's handle on a saved model: loaded by path; its fingerprint covers the file's bytes."""

    path: str = "models/learned-fusion-beam500k.json"

    def check_available(self) -> None:
        load_fusion_model(self.path)

    def load(self) -> LinearFusionModel:
        return _load_cached(str(Path(self.path).resolve()), self._digest())

    def _digest(self) -> str:
        try:
            return hashlib.sha256(Path(self.path).read_bytes()).hexdigest()[:16]
        except OSError:
            return "missing"

    def fingerprint(self) -> str:
        return f"{self.path}@{self._digest()}"


_LOADED: dict[tuple[str, str], LinearFusionModel] = {}


def _load_cached(path: str, digest: str) -> LinearFusionModel:
    key = (path, digest)
    if key not in _LOADED:
        _LOADED[key] = load_fusion_model(path)
    return _LOADED[key]
