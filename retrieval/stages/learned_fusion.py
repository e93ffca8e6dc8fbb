"""Learned fusion (a rank stage): re-score the candidates with a model over their score columns.

Every stage before it keeps its score column (bm25, dense, passage, fused, tag, recency...); a linear
model trained on BEAM 500K (experiments/training/fusion.py) turns features of those columns into one
score (retrieval/fusion_model.py says which features, and the defined value of a missing one). The model
is loaded by path; a missing file, or one trained on other columns than `sources` names, is an error
before any work (Pipeline.check_models asks the model's `check_available`).
"""

from __future__ import annotations

from dataclasses import dataclass

from retrieval.fusion_model import FusionModelError, FusionModelFile
from retrieval.stage import RankStage
from retrieval.types import Candidates, Query


@dataclass(frozen=True, kw_only=True)
class LearnedFusion(RankStage):
    name = "learned_fusion"
    model: FusionModelFile
    # The columns this variant feeds the model; the model must have been trained on exactly these
    # (null: whatever the model was trained on).
    sources: tuple[str, ...] | None = None

    def check_available(self) -> None:
        model = self.model.load()
        if self.sources is not None and tuple(self.sources) != model.sources:
            raise FusionModelError(
                f"{self.model.path}: trained on columns {list(model.sources)}, but the stage's sources "
                f"are {list(self.sources)}: retrain with this variant, or set stage.learned_fusion.sources"
            )

    def __call__(self, query: Query, candidates: Candidates) -> Candidates:
        model = self.model.load()
        return candidates.with_score("learned_fusion", model.score(candidates.columns, len(candidates)))
