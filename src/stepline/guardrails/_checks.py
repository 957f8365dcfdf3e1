"""Guardrails on a step's inputs and outputs (R-S1): secrets, size limits, path confinement."""

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from stepline._paths import escape
from stepline.guardrails._secrets import SecretScanner, describe_secrets

__all__ = [
    "GuardrailPolicy",
    "GuardrailReport",
    "blocking_failures",
    "check_artifacts",
    "check_input",
    "check_output",
]

Stage = Literal["input", "output"]


class GuardrailPolicy(BaseModel):
    """What the guardrails enforce; embedded in the runtime configuration (``guardrails:``)."""

    model_config = ConfigDict(extra="forbid")

    _scanner: SecretScanner | None = PrivateAttr(default=None)
    max_input_bytes: int = Field(default=1_000_000, gt=0, description="largest serialized step input")
    max_output_bytes: int = Field(default=5_000_000, gt=0, description="largest serialized step output")
    redact_secrets: bool = Field(default=True, description="redact secrets from events, logs and prompts")
    block_on_secret: bool = Field(default=False, description="a secret in a step's data fails the step")
    secrets_in_artifacts: Literal["warn", "block"] = Field(
        default="warn", description="a secret in a file a step wrote (the file is never rewritten): warn names the "
                                    "file and kind in the run's summary and `stepline show`; block fails the step")
    confine_paths: bool = Field(default=True, description="paths a step touches must stay in the project")
    extra_secret_patterns: dict[str, str] = Field(
        default_factory=dict, description="more secret shapes, {kind: regex}; group 'value' redacts only it")

    @field_validator("extra_secret_patterns")
    @classmethod
    def _patterns_compile(cls, value: dict[str, str]) -> dict[str, str]:
        for kind, pattern in value.items():
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"extra_secret_patterns[{kind!r}] is not a valid regex: {exc}") from exc
        return value

    def scanner(self) -> SecretScanner:
        """Return a scanner with the built-in patterns plus :attr:`extra_secret_patterns` (built once)."""
        if self._scanner is None:
            self._scanner = SecretScanner(self.extra_secret_patterns)
        return self._scanner

    def redact(self, obj: Any) -> Any:
        """Redact ``obj`` (a string or nested structure) when :attr:`redact_secrets` is on; else return it."""
        return self.scanner().redact_obj(obj) if self.redact_secrets else obj


class GuardrailReport(BaseModel):
    """The outcome of one guardrail on one side of a step, stored on ``RunStep.guardrails``.

    ``details`` never contains a secret: it says what kind was found and how often. ``artifacts`` is the same
    for the files a step wrote, ``{path: {kind: count}}`` (:func:`check_artifacts`).
    """

    model_config = ConfigDict(extra="forbid")

    name: Literal["secrets", "size", "paths"]
    stage: Stage
    passed: bool
    blocking: bool = False
    details: list[str] = Field(default_factory=list)
    artifacts: dict[str, dict[str, int]] = Field(default_factory=dict)


def check_input(data: Any, *, policy: GuardrailPolicy | None = None, project_root: Path | str | None = None,
                paths: Iterable[str] = ()) -> list[GuardrailReport]:
    """Check what a step is given before its tools and executor run (seed 004: "guardrails on inputs").

    Args:
        data: the step's inputs (a string or a JSON-like structure).
        policy: limits and switches; the defaults when omitted.
        project_root: the root paths must stay under; without it the path check is skipped.
        paths: the files the step will read or write (resolved already, ``{output_folder}`` expanded).
    """
    return _check("input", data, policy or GuardrailPolicy(), project_root, paths)


def check_output(data: Any, *, policy: GuardrailPolicy | None = None, project_root: Path | str | None = None,
                 paths: Iterable[str] = ()) -> list[GuardrailReport]:
    """Check what a step produced (content and the paths it wrote) before the output is accepted."""
    return _check("output", data, policy or GuardrailPolicy(), project_root, paths)


def check_artifacts(files: Mapping[str, str], *, policy: GuardrailPolicy | None = None,
                    project_root: Path | str | None = None) -> list[GuardrailReport]:
    """Check the files a step wrote, ``{path: text}`` (paths as the step named them), before they are accepted.

    A secret in one is reported per file and kind and never redacted: the file is the user's document, kept as
    the step wrote it, so the report says so rather than "redacted" (stepline redacts only its own records).
    ``policy.secrets_in_artifacts`` (or ``block_on_secret``) decides whether that fails the step.
    """
    policy = policy or GuardrailPolicy()
    reports = [_artifact_secrets(files, policy),
               _size("output", sum(len(text.encode("utf-8")) for text in files.values()), policy)]
    if policy.confine_paths and project_root is not None and files:
        reports.append(_paths("output", project_root, list(files)))
    return reports


def blocking_failures(reports: Iterable[GuardrailReport]) -> list[GuardrailReport]:
    """Return the reports that must fail the step (a failed guardrail that is blocking)."""
    return [report for report in reports if report.blocking and not report.passed]


def _check(stage: Stage, data: Any, policy: GuardrailPolicy, project_root: Path | str | None,
           paths: Iterable[str]) -> list[GuardrailReport]:
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, default=str)
    reports = [_secrets(stage, text, policy), _size(stage, len(text.encode("utf-8")), policy)]
    path_list = list(paths)
    if policy.confine_paths and project_root is not None and path_list:
        reports.append(_paths(stage, project_root, path_list))
    return reports


def _secrets(stage: Stage, text: str, policy: GuardrailPolicy) -> GuardrailReport:
    found = policy.scanner().find(text)
    if not found:
        return GuardrailReport(name="secrets", stage=stage, passed=True)
    action = "redacted" if policy.redact_secrets else "NOT redacted (redact_secrets is off)"
    details = [f"{count} {kind} secret(s) found, {action}" for kind, count in found.items()]
    return GuardrailReport(name="secrets", stage=stage, passed=False, blocking=policy.block_on_secret,
                           details=details)


def _artifact_secrets(files: Mapping[str, str], policy: GuardrailPolicy) -> GuardrailReport:
    scanner = policy.scanner()
    found = {path: counts for path, text in files.items() if (counts := scanner.find(text))}
    if not found:
        return GuardrailReport(name="secrets", stage="output", passed=True)
    block = policy.block_on_secret or policy.secrets_in_artifacts == "block"
    setting = ("guardrails.block_on_secret" if policy.block_on_secret
               else f"guardrails.secrets_in_artifacts: {policy.secrets_in_artifacts}")
    outcome = "; the step fails" if block else ""
    details = [f"{path} holds {describe_secrets(counts)}, NOT redacted: the file keeps what the step wrote"
               f"{outcome} ({setting})" for path, counts in found.items()]
    return GuardrailReport(name="secrets", stage="output", passed=False, blocking=block, details=details,
                           artifacts=found)


def _size(stage: Stage, size: int, policy: GuardrailPolicy) -> GuardrailReport:
    limit = policy.max_input_bytes if stage == "input" else policy.max_output_bytes
    if size <= limit:
        return GuardrailReport(name="size", stage=stage, passed=True, details=[f"{size} bytes"])
    return GuardrailReport(name="size", stage=stage, passed=False, blocking=True,
                           details=[f"{size} bytes exceeds the {stage} limit of {limit} bytes"])


def _paths(stage: Stage, project_root: Path | str, paths: list[str]) -> GuardrailReport:
    problems = [found.message() for path in paths if (found := escape(project_root, path)) is not None]
    return GuardrailReport(name="paths", stage=stage, passed=not problems, blocking=bool(problems),
                           details=problems)
