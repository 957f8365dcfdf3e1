"""Step guardrails: secrets, size limits and the paths report (confinement itself: tests/test_paths.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from stepline.guardrails import GuardrailPolicy, blocking_failures, check_input, check_output

SECRET = "ghp_FAKEfake0123456789abcdefghijklmnopqrst"


def by_name(reports: list, name: str):  # type: ignore[no-untyped-def]
    return next(report for report in reports if report.name == name)


def test_clean_input_passes_everything(tmp_path: Path) -> None:
    """Ordinary inputs pass the secret and size checks, and confined paths pass the path check."""
    reports = check_input({"topic": "shop"}, project_root=tmp_path, paths=["docs/prd.md"])
    assert [(r.name, r.stage, r.passed) for r in reports] == [
        ("secrets", "input", True), ("size", "input", True), ("paths", "input", True)]
    assert blocking_failures(reports) == []


def test_secret_is_reported_without_being_repeated() -> None:
    """A secret fails the check; the details name its kind but never contain it."""
    report = by_name(check_input({"env": f"TOKEN {SECRET}"}), "secrets")
    assert not report.passed and not report.blocking
    assert report.details == ["1 github secret(s) found, redacted"]
    assert SECRET not in report.model_dump_json()


def test_secret_blocks_when_the_policy_says_so() -> None:
    """With ``block_on_secret`` a secret is a blocking failure."""
    reports = check_output(f"here: {SECRET}", policy=GuardrailPolicy(block_on_secret=True))
    assert [r.name for r in blocking_failures(reports)] == ["secrets"]


def test_size_limits_block() -> None:
    """Data over the stage's byte limit is a blocking failure naming both sizes."""
    policy = GuardrailPolicy(max_input_bytes=10, max_output_bytes=20)
    report = by_name(check_input("x" * 11, policy=policy), "size")
    assert report.blocking and report.details == ["11 bytes exceeds the input limit of 10 bytes"]
    assert by_name(check_output("x" * 11, policy=policy), "size").passed


def test_paths_outside_the_root_block(tmp_path: Path) -> None:
    """A path that leaves the project root fails the path check, blocking."""
    reports = check_output("ok", project_root=tmp_path, paths=["out/a.md", "../b.md", "/etc/passwd"])
    report = by_name(reports, "paths")
    assert report.blocking and len(report.details) == 2
    assert blocking_failures(reports) == [report]


def test_policy_redact_respects_the_switch() -> None:
    """GuardrailPolicy.redact redacts only when ``redact_secrets`` is on."""
    assert SECRET not in GuardrailPolicy().redact({"a": SECRET})["a"]
    assert GuardrailPolicy(redact_secrets=False).redact({"a": SECRET}) == {"a": SECRET}


def test_policy_rejects_a_bad_extra_pattern() -> None:
    """An extra secret pattern that is not a regex is a configuration error naming it."""
    with pytest.raises(ValidationError, match="extra_secret_patterns\\['x'\\]"):
        GuardrailPolicy(extra_secret_patterns={"x": "("})
