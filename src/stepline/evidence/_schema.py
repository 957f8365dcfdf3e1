"""The evidence schema (shipped as ``evidence.schema.json``) and validation of records against it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any

from pydantic import ValidationError

from stepline.errors import SteplineError
from stepline.model import Evidence

__all__ = ["EvidenceError", "evidence_schema", "parse_moment", "validate_evidence"]


class EvidenceError(SteplineError):
    """An evidence record that does not satisfy the schema, or an evidence requirement that means nothing."""


def evidence_schema() -> dict[str, Any]:
    """Return the shipped JSON Schema of evidence records."""
    text = resources.files("stepline.evidence").joinpath("evidence.schema.json").read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def parse_moment(text: str, *, end_of_day: bool = False) -> datetime:
    """Parse an ISO date or date-time as an aware datetime (naive means UTC).

    A bare date is the start of that day, or with ``end_of_day`` the start of the next one: ``valid_until:
    2026-03-01`` keeps evidence valid through the whole of March 1st.
    """
    if len(text) == 10:
        day = datetime.fromisoformat(text).replace(tzinfo=UTC)
        return day + timedelta(days=1) if end_of_day else day
    moment = datetime.fromisoformat(text.replace(" ", "T", 1))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def validate_evidence(record: Mapping[str, Any]) -> Evidence:
    """Check ``record`` against the schema and the model; raise :class:`EvidenceError` naming every problem."""
    from jsonschema import Draft202012Validator

    label = f"evidence {record.get('id')!r}" if isinstance(record.get("id"), str) else "evidence record"
    validator = Draft202012Validator(evidence_schema())
    problems = [f"{'.'.join(str(p) for p in error.path) or '(record)'}: {error.message}"
                for error in sorted(validator.iter_errors(dict(record)), key=lambda e: [str(p) for p in e.path])]
    if not problems:
        problems = _date_problems(record)
    if problems:
        raise EvidenceError(f"{label} is invalid: " + "; ".join(problems),
                            hint="see stepline/evidence/evidence.schema.json")
    try:
        return Evidence.model_validate(dict(record))
    except ValidationError as exc:  # the schema and the model disagree: report it the same way
        raise EvidenceError(f"{label} is invalid: {exc}") from exc


def _date_problems(record: Mapping[str, Any]) -> list[str]:
    """Dates the schema's pattern accepts but the calendar does not, and validity that ends before it starts."""
    try:
        start = parse_moment(record["date"])
    except ValueError as exc:
        return [f"date: {record['date']!r} is not a real date ({exc})"]
    if record.get("valid_until") is None:
        return []
    try:
        end = parse_moment(record["valid_until"], end_of_day=True)
    except ValueError as exc:
        return [f"valid_until: {record['valid_until']!r} is not a real date ({exc})"]
    return [] if end >= start else [f"valid_until: {record['valid_until']!r} is before date {record['date']!r}"]
