"""Evidence (R-Q1): the QUINT evidence schema, weakest-link assurance, expiry, and design rationale records.

The engine validates what a step claims with :func:`validate_evidence`, checks a step's ``evidence``
requirement with :func:`meets_requirement` (expired and invalid evidence never counts), and writes a DRR from
:func:`drr_for_decision` for every gate decision.
"""

from __future__ import annotations

from stepline.evidence._drr import drr_for_decision, drr_markdown, make_drr
from stepline.evidence._schema import EvidenceError, evidence_schema, parse_moment, validate_evidence
from stepline.evidence._wlnk import (
    CONGRUENCE_FACTORS,
    LEVEL_RANK,
    is_expired,
    meets_requirement,
    required_level,
    score,
    wlnk,
)

__all__ = [
    "CONGRUENCE_FACTORS",
    "LEVEL_RANK",
    "EvidenceError",
    "drr_for_decision",
    "drr_markdown",
    "evidence_schema",
    "is_expired",
    "make_drr",
    "meets_requirement",
    "parse_moment",
    "required_level",
    "score",
    "validate_evidence",
    "wlnk",
]
