"""check_artifacts: a secret in a file a step wrote is reported per file and kind, said NOT to be redacted (the
file is the user's and is never rewritten), and blocks the step only when the policy says so."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from stepline.engine import RuntimeConfig
from stepline.guardrails import (
    GuardrailPolicy,
    GuardrailReport,
    blocking_failures,
    check_artifacts,
    describe_secrets,
)

OPENAI = "sk-proj-4f9XyZ8kLmN2pQ7rS3tUvW1x"
AWS = "AKIA" + "ABCDEFGHIJKLMNOP"


def _secrets(reports: list[GuardrailReport]) -> GuardrailReport:
    return next(report for report in reports if report.name == "secrets")


def test_each_file_and_kind_is_named_and_the_file_is_said_not_redacted() -> None:
    """Two files, three secrets: the report names each file with its kinds and counts, never a secret."""
    files = {"notes.md": f"key {OPENAI}\n", "keys/aws.txt": f"{AWS}\n{OPENAI}\n", "clean.md": "# nothing\n"}
    report = _secrets(check_artifacts(files))
    assert not report.passed and not report.blocking
    assert report.artifacts == {"notes.md": {"openai": 1}, "keys/aws.txt": {"aws": 1, "openai": 1}}
    assert report.details == [
        "notes.md holds 1 openai secret, NOT redacted: the file keeps what the step wrote "
        "(guardrails.secrets_in_artifacts: warn)",
        "keys/aws.txt holds 1 aws secret, 1 openai secret, NOT redacted: the file keeps what the step wrote "
        "(guardrails.secrets_in_artifacts: warn)"]
    dumped = report.model_dump_json()
    assert OPENAI not in dumped and AWS not in dumped and "found, redacted" not in dumped


def test_the_switch_blocks_the_step() -> None:
    """``secrets_in_artifacts: block`` makes the finding a blocking failure that says the step fails."""
    reports = check_artifacts({"notes.md": OPENAI}, policy=GuardrailPolicy(secrets_in_artifacts="block"))
    [report] = blocking_failures(reports)
    assert report.name == "secrets" and report.artifacts == {"notes.md": {"openai": 1}}
    assert report.details == ["notes.md holds 1 openai secret, NOT redacted: the file keeps what the step wrote; "
                              "the step fails (guardrails.secrets_in_artifacts: block)"]


def test_block_on_secret_blocks_artifacts_too() -> None:
    """The older, wider switch still fails a step whose file holds a secret, and is the one named."""
    [report] = blocking_failures(check_artifacts({"a.md": AWS}, policy=GuardrailPolicy(block_on_secret=True)))
    assert report.details[0].endswith("the step fails (guardrails.block_on_secret)")


def test_clean_files_pass_and_size_and_paths_are_still_checked(tmp_path: Path) -> None:
    """No secret: passed; the files' total size and their paths are checked as for any output."""
    policy = GuardrailPolicy(max_output_bytes=10)
    reports = check_artifacts({"a.md": "12345", "../b.md": "123456"}, policy=policy, project_root=tmp_path)
    assert [(r.name, r.passed) for r in reports] == [("secrets", True), ("size", False), ("paths", False)]
    assert reports[1].details == ["11 bytes exceeds the output limit of 10 bytes"]


def test_the_switch_is_a_runtime_config_key_with_two_values() -> None:
    """`guardrails.secrets_in_artifacts` is warn (the default) or block; anything else is a config error."""
    assert RuntimeConfig().guardrails.secrets_in_artifacts == "warn"
    config = RuntimeConfig.model_validate({"guardrails": {"secrets_in_artifacts": "block"}})
    assert config.guardrails.secrets_in_artifacts == "block"
    with pytest.raises(ValidationError):
        RuntimeConfig.model_validate({"guardrails": {"secrets_in_artifacts": "redact"}})


def test_describe_secrets() -> None:
    """Counts in words, singular and plural, in the order given."""
    assert describe_secrets({"aws": 1, "openai": 2}) == "1 aws secret, 2 openai secrets"
