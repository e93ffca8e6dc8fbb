"""Advisory tier policy for the tiered mechanism: pinned / active / archive at ingest.

    pinned   times_validated >= pinned_validated and reliability >= pinned_reliability,
             or promoted from a trusted source (trusted_sources empty: any promoted insight)
    active   times_validated >= active_validated and reliability >= active_reliability,
             or recent (created within recent_days of the newest memory of its scope),
             or high-confidence wisdom (confidence >= high_confidence; category in wisdom_categories
             when that list is given)
    archive  everything else

Writes the annotation `search_tier`, which `TieredRetriever` / `TierFusion` read before the memory's
own `tier` field; the tiers' behaviour (pinned always included, archive searched on escalation only,
weights) is the mechanism's config (conf/stage/tiered_advisory.yaml, tier_fusion_advisory.yaml).
Counts come from suite metadata (`times_validated`, `reliability`, `promoted`, `source`, `category`).
"Recent" is measured against the newest memory of the scope because ingest sees no query time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date

from retrieval.stage import IngestStage, Range
from retrieval.tiering import SEARCH_TIER
from retrieval.types import Memory


def _day(value: str | None) -> date | None:
    try:
        return date.fromisoformat(str(value)[:10]) if value else None
    except ValueError:
        return None


@dataclass(frozen=True, kw_only=True)
class AdvisoryTiers(IngestStage):
    name = "advisory_tiers"
    ranges = {
        "pinned_validated": Range(ge=0),
        "pinned_reliability": Range(ge=0, le=1),
        "active_validated": Range(ge=0),
        "active_reliability": Range(ge=0, le=1),
        "recent_days": Range(),  # -1: nothing counts as recent
        "high_confidence": Range(ge=0, le=1),
    }
    pinned_validated: int = 15
    pinned_reliability: float = 0.95
    trusted_sources: tuple[str, ...] = ()
    active_validated: int = 3
    active_reliability: float = 0.70
    recent_days: float = 14.0
    high_confidence: float = 0.9
    wisdom_categories: tuple[str, ...] = ()

    def tier(self, m: Memory, newest: date | None) -> str:
        validated = float(m.get("times_validated", 0) or 0)
        reliability = float(m.get("reliability", 0) or 0)
        source = m.get("source")
        promoted = bool(m.get("promoted", False)) and (
            not self.trusted_sources or source in self.trusted_sources
        )
        if (validated >= self.pinned_validated and reliability >= self.pinned_reliability) or promoted:
            return "pinned"
        created = _day(m.created_at)
        recent = created is not None and newest is not None and (newest - created).days <= self.recent_days
        wisdom = not self.wisdom_categories or m.get("category") in self.wisdom_categories
        confident = m.confidence is not None and m.confidence >= self.high_confidence and wisdom
        if (
            (validated >= self.active_validated and reliability >= self.active_reliability)
            or recent
            or confident
        ):
            return "active"
        return "archive"

    def __call__(self, memories: Sequence[Memory]) -> list[Memory]:
        newest: dict[str, date] = {}
        for m in memories:
            d = _day(m.created_at)
            if d is not None and (m.scope_key not in newest or d > newest[m.scope_key]):
                newest[m.scope_key] = d
        return [m.annotate(**{SEARCH_TIER: self.tier(m, newest.get(m.scope_key))}) for m in memories]
