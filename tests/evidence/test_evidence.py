"""Evidence records: schema validation, WLNK, expiry, and requirement levels."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from stepline.evidence import (
    CONGRUENCE_FACTORS,
    EvidenceError,
    evidence_schema,
    is_expired,
    meets_requirement,
    score,
    validate_evidence,
    wlnk,
)
from stepline.model import Evidence
from stepline.time import frozen, now


def record(**overrides: Any) -> dict[str, Any]:
    """A valid evidence record, with ``overrides`` applied."""
    base: dict[str, Any] = {"id": "E1", "claim": "the API handles 1k rps", "level": "L1", "source": "load test",
                            "date": "2026-01-10", "valid_until": "2026-03-01", "congruence": "CL3",
                            "reliability": 0.9, "wlnk": None, "carrier_ref": "reports/load.md"}
    return {**base, **overrides}


def ev(**overrides: Any) -> Evidence:
    return validate_evidence(record(**overrides))


class TestSchema:
    """validate_evidence checks the shipped schema and the model, naming every problem."""

    def test_valid_record(self) -> None:
        """A record with the seed's minimum fields becomes an Evidence."""
        evidence = validate_evidence(record(artifacts=["reports/load.md"]))
        assert evidence.id == "E1" and evidence.artifacts == ["reports/load.md"]

    def test_every_problem_is_named(self) -> None:
        """A bad level, an out-of-range reliability and an unknown field are all reported at once."""
        with pytest.raises(EvidenceError) as caught:
            validate_evidence(record(level="L3", reliability=1.5, colour="red"))
        message = str(caught.value)
        assert message.startswith("evidence 'E1' is invalid: ")
        assert "level: 'L3' is not one of" in message
        assert "reliability: 1.5 is greater than the maximum of 1" in message
        assert "'colour' was unexpected" in message

    def test_missing_required_fields(self) -> None:
        """The seed's minimum fields are required (``valid_until`` and ``wlnk`` may be null, not absent)."""
        incomplete = record()
        del incomplete["carrier_ref"], incomplete["valid_until"]
        with pytest.raises(EvidenceError, match="'carrier_ref' is a required property"):
            validate_evidence(incomplete)

    @pytest.mark.parametrize(("field", "value", "expected"), [
        ("date", "yesterday", "does not match"),
        ("date", "2026-02-30", "not a real date"),
        ("valid_until", "2025-12-31", "is before date"),
    ])
    def test_bad_dates(self, field: str, value: str, expected: str) -> None:
        """Dates must be ISO, real, and validity cannot end before the evidence was obtained."""
        with pytest.raises(EvidenceError, match=expected):
            validate_evidence(record(**{field: value}))

    def test_schema_is_shipped_and_matches_the_model(self) -> None:
        """The packaged schema describes exactly the model's fields and requires the seed's minimum."""
        schema = evidence_schema()
        assert set(schema["properties"]) == set(Evidence.model_fields)
        assert {"id", "claim", "level", "source", "date", "valid_until", "congruence", "reliability", "wlnk",
                "carrier_ref"} == set(schema["required"])


class TestWlnk:
    """WLNK is the weakest reliability × congruence factor."""

    def test_factors(self) -> None:
        """CL1, CL2, CL3 weigh 0.5, 0.8, 1.0."""
        assert CONGRUENCE_FACTORS == {"CL1": 0.5, "CL2": 0.8, "CL3": 1.0}
        assert score(ev(congruence="CL2", reliability=0.5)) == pytest.approx(0.4)

    def test_minimum_over_records(self) -> None:
        """A strong record cannot hide a weak one: the minimum wins."""
        records = [ev(id="a", reliability=0.9, congruence="CL3"), ev(id="b", reliability=0.9, congruence="CL1"),
                   ev(id="c", reliability=0.6, congruence="CL2")]
        assert wlnk(records) == pytest.approx(0.45)

    def test_no_evidence_is_no_assurance(self) -> None:
        """The weakest link of nothing is 0."""
        assert wlnk([]) == 0.0


class TestExpiry:
    """Evidence past ``valid_until`` is expired; a bare date lasts through that day."""

    def test_date_only_lasts_the_whole_day(self) -> None:
        """On the last valid day it is still valid; the next day it is expired."""
        evidence = ev(valid_until="2026-03-01")
        with frozen("2026-03-01T23:59:59+00:00"):
            assert not is_expired(evidence)
        with frozen("2026-03-02T00:00:00+00:00"):
            assert is_expired(evidence)

    def test_datetime_with_offset_and_explicit_now(self) -> None:
        """A date-time with an offset is compared as an instant; ``now`` can be passed explicitly."""
        evidence = ev(valid_until="2026-03-01T12:00:00+02:00")
        assert not is_expired(evidence, datetime.fromisoformat("2026-03-01T09:59:00+00:00"))
        assert is_expired(evidence, datetime.fromisoformat("2026-03-01T10:00:00+00:00"))

    def test_no_valid_until_never_expires(self) -> None:
        """``valid_until: null`` means the evidence does not decay."""
        with frozen("2099-01-01T00:00:00+00:00"):
            assert not is_expired(ev(valid_until=None))
            assert now().year == 2099


class TestRequirement:
    """meets_requirement: L0 < L1 < L2; invalid and expired evidence never count."""

    @pytest.mark.parametrize(("level", "required", "met"), [
        ("L2", "L1", True), ("L1", "L1", True), ("L0", "L1", False), ("L1", "L2", False), ("L0", "L0", True),
    ])
    def test_levels(self, level: str, required: str, met: bool) -> None:
        """A record meets a requirement at or below its level."""
        with frozen("2026-02-01T00:00:00+00:00"):
            assert meets_requirement([ev(level=level)], required) is met

    def test_invalid_never_counts(self) -> None:
        """An ``invalid`` record does not even meet L0."""
        with frozen("2026-02-01T00:00:00+00:00"):
            assert not meets_requirement([ev(level="invalid", reliability=1.0)], "L0")

    def test_expired_does_not_count(self) -> None:
        """An expired L2 record does not meet L1, but a current L1 next to it does."""
        with frozen("2026-06-01T00:00:00+00:00"):
            expired = ev(level="L2")
            assert not meets_requirement([expired], "L1")
            assert meets_requirement([expired, ev(id="E2", level="L1", valid_until=None)], "L1")

    def test_requirement_text(self) -> None:
        """A step's evidence field may name the level in prose; one naming none is an error."""
        with frozen("2026-02-01T00:00:00+00:00"):
            assert meets_requirement([ev(level="L1")], "QUINT L1 (checked)")
        with pytest.raises(EvidenceError, match="names no level"):
            meets_requirement([], "strong")
