"""Validation runners (R-V1): Python AST + mypy + ruff, JSON and YAML parse, template completeness.

They are plain functions the engine's validation gates call, and also the tools ``validatePython``,
``validateJson`` and ``validateYaml``. mypy and ruff run as ``sys.executable -m …`` subprocesses in the
project root, so the project's own configuration applies; neither writes a cache into the project.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from stepline._paths import confine
from stepline._placeholders import DOUBLE_BRACED, find
from stepline.errors import OutsideRootError
from stepline.tools._spec import ToolContext, ToolOutput, ToolSpec

__all__ = [
    "ValidationIssue",
    "ValidationReport",
    "check_template_complete",
    "validate_json",
    "validate_python_files",
    "validate_yaml",
    "validation_tools",
]

PythonCheck = Literal["ast", "mypy", "ruff"]
_HEADING = re.compile(r"^##[ \t]+(.+?)[ \t#]*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_MYPY_LINE = re.compile(r"^(?P<path>.+?):(?P<line>\d+):(?:(?P<col>\d+):)? (?P<sev>error|note): (?P<msg>.*)$")
_RUFF_LINE = re.compile(r"^(?P<path>.+?):(?P<line>\d+):(?P<col>\d+): (?P<msg>.*)$")


class ValidationIssue(BaseModel):
    """One problem a validator found, located as precisely as the validator allows."""

    model_config = ConfigDict(extra="forbid")

    check: str
    message: str
    path: str | None = None
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        where = ":".join(str(part) for part in (self.path, self.line, self.column) if part is not None)
        return f"{where}: [{self.check}] {self.message}" if where else f"[{self.check}] {self.message}"


class ValidationReport(BaseModel):
    """The outcome of one validation gate; ``summary()`` is what goes into ``step.error`` on failure."""

    model_config = ConfigDict(extra="forbid")

    name: str
    passed: bool
    checked: list[str] = Field(default_factory=list)
    issues: list[ValidationIssue] = Field(default_factory=list)

    @classmethod
    def of(cls, name: str, checked: Iterable[str], issues: Iterable[ValidationIssue]) -> ValidationReport:
        """Build a report that passed exactly when there are no issues."""
        found = list(issues)
        return cls(name=name, passed=not found, checked=list(checked), issues=found)

    def summary(self, limit: int = 20) -> str:
        """Return one line per issue (at most ``limit``), headed by the gate's name and outcome."""
        if self.passed:
            return f"{self.name}: passed ({len(self.checked)} checked)"
        lines = [f"{self.name}: {len(self.issues)} problem(s)", *(str(i) for i in self.issues[:limit])]
        if len(self.issues) > limit:
            lines.append(f"… and {len(self.issues) - limit} more")
        return "\n".join(lines)


def _targets(paths: Iterable[str], project_root: Path | str, check: str, suffixes: tuple[str, ...],
             issues: list[ValidationIssue]) -> list[tuple[str, Path]]:
    """Resolve targets inside the project (folders expand to matching files); problems become issues."""
    root = Path(project_root).resolve()
    found: list[tuple[str, Path]] = []
    for raw in paths:
        try:
            path = confine(root, raw)
        except OutsideRootError as exc:
            issues.append(ValidationIssue(check=check, path=str(raw), message=exc.message))
            continue
        if path.is_dir():
            found.extend((p.relative_to(root).as_posix(), p) for p in sorted(path.rglob("*"))
                         if p.suffix in suffixes and p.is_file())
        elif path.is_file():
            found.append((path.relative_to(root).as_posix(), path))
        else:
            issues.append(ValidationIssue(check=check, path=str(raw), message="no such file"))
    return found


def validate_python_files(paths: Iterable[str], project_root: Path | str, *,
                          checks: Iterable[PythonCheck] = ("ast", "mypy", "ruff"),
                          timeout: float = 300.0) -> ValidationReport:
    """Parse each file with :func:`ast.parse`, then run mypy and ruff on those that parsed.

    Args:
        paths: files or folders relative to the project root (a step's ``validation_targets``).
        project_root: where the tools run (their configuration is read from there).
        checks: which of ``ast``, ``mypy``, ``ruff`` to run.
        timeout: seconds each of mypy and ruff may take.
    """
    wanted = set(checks)
    issues: list[ValidationIssue] = []
    targets = _targets(paths, project_root, "python", (".py", ".pyi"), issues)
    parsed: list[str] = []
    for relative, path in targets:
        try:
            ast.parse(path.read_bytes(), filename=relative)
        except SyntaxError as exc:
            issues.append(ValidationIssue(check="ast", path=relative, line=exc.lineno, column=exc.offset,
                                          message=exc.msg))
            continue
        except ValueError as exc:  # null bytes
            issues.append(ValidationIssue(check="ast", path=relative, message=str(exc)))
            continue
        parsed.append(relative)
    if parsed and "mypy" in wanted:
        issues.extend(_run_mypy(parsed, project_root, timeout))
    if parsed and "ruff" in wanted:
        issues.extend(_run_ruff(parsed, project_root, timeout))
    return ValidationReport.of("python", [relative for relative, _ in targets], issues)


def _run_module(module: str, argv: list[str], project_root: Path | str,
                timeout: float) -> subprocess.CompletedProcess[str] | ValidationIssue:
    try:
        done = subprocess.run([sys.executable, "-m", module, *argv], cwd=project_root, capture_output=True,
                              text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return ValidationIssue(check=module, message=f"{module} did not finish within {timeout:g}s")
    if done.returncode != 0 and f"No module named {module}" in done.stderr:
        return ValidationIssue(check=module, message=f"{module} is not installed in stepline's environment")
    return done


def _run_mypy(files: list[str], project_root: Path | str, timeout: float) -> list[ValidationIssue]:
    done = _run_module("mypy", ["--no-error-summary", "--show-column-numbers", "--no-color-output",
                                "--hide-error-context", "--no-pretty", "--cache-dir", os.devnull, *files],
                       project_root, timeout)
    if isinstance(done, ValidationIssue):
        return [done]
    issues = []
    for line in done.stdout.splitlines():
        match = _MYPY_LINE.match(line)
        if match and match["sev"] == "error":
            issues.append(ValidationIssue(check="mypy", path=match["path"], line=int(match["line"]),
                                          column=int(match["col"]) if match["col"] else None,
                                          message=match["msg"]))
    if done.returncode != 0 and not issues:
        detail = (done.stderr or done.stdout).strip()[-1000:]
        issues.append(ValidationIssue(check="mypy", message=f"mypy exited with {done.returncode}: {detail}"))
    return issues


def _run_ruff(files: list[str], project_root: Path | str, timeout: float) -> list[ValidationIssue]:
    done = _run_module("ruff", ["check", "--no-cache", "--output-format=concise", "--quiet", *files],
                       project_root, timeout)
    if isinstance(done, ValidationIssue):
        return [done]
    issues = []
    for line in done.stdout.splitlines():
        match = _RUFF_LINE.match(line)
        if match:
            issues.append(ValidationIssue(check="ruff", path=match["path"], line=int(match["line"]),
                                          column=int(match["col"]), message=match["msg"]))
    if done.returncode != 0 and not issues:
        detail = (done.stderr or done.stdout).strip()[-1000:]
        issues.append(ValidationIssue(check="ruff", message=f"ruff exited with {done.returncode}: {detail}"))
    return issues


def _sources(check: str, suffixes: tuple[str, ...], paths: Iterable[str], project_root: Path | str,
             texts: Mapping[str, str] | None, issues: list[ValidationIssue]) -> list[tuple[str, str]]:
    sources = [(name, text) for name, text in (texts or {}).items()]
    for relative, path in _targets(paths, project_root, check, suffixes, issues):
        try:
            sources.append((relative, path.read_text(encoding="utf-8")))
        except (UnicodeDecodeError, OSError) as exc:
            issues.append(ValidationIssue(check=check, path=relative, message=f"cannot read: {exc}"))
    return sources


def validate_json(paths: Iterable[str] = (), project_root: Path | str = ".", *,
                  texts: Mapping[str, str] | None = None) -> ValidationReport:
    """Check that files (relative to the project root) and/or ``{name: text}`` entries parse as JSON."""
    issues: list[ValidationIssue] = []
    sources = _sources("json", (".json",), paths, project_root, texts, issues)
    for name, text in sources:
        try:
            json.loads(text)
        except json.JSONDecodeError as exc:
            issues.append(ValidationIssue(check="json", path=name, line=exc.lineno, column=exc.colno,
                                          message=exc.msg))
    return ValidationReport.of("json", [name for name, _ in sources], issues)


def validate_yaml(paths: Iterable[str] = (), project_root: Path | str = ".", *,
                  texts: Mapping[str, str] | None = None) -> ValidationReport:
    """Check that files and/or ``{name: text}`` entries parse as YAML (every document of a stream)."""
    issues: list[ValidationIssue] = []
    sources = _sources("yaml", (".yaml", ".yml"), paths, project_root, texts, issues)
    for name, text in sources:
        problem = _yaml_problem(text)
        if problem is not None:
            problem.path = name
            issues.append(problem)
    return ValidationReport.of("yaml", [name for name, _ in sources], issues)


def _yaml_problem(text: str, line_offset: int = 0, check: str = "yaml") -> ValidationIssue | None:
    import yaml  # imported here: tool workers that never parse YAML do not pay for it

    try:
        for _ in yaml.safe_load_all(text):
            pass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 + line_offset if mark is not None else None
        column = mark.column + 1 if mark is not None else None
        message = str(getattr(exc, "problem", None) or exc)
        return ValidationIssue(check=check, line=line, column=column, message=message)
    return None


def check_template_complete(text: str, template_text: str, *, name: str = "output") -> ValidationReport:
    """Check a generated document against its template (R-V1 template/schema gate).

    Fails when a ``{{placeholder}}`` is left, when a ``##`` section heading of the template is missing (a
    heading with a placeholder matches any text in its place), or when the YAML frontmatter does not parse.
    """
    issues: list[ValidationIssue] = []
    lines = text.splitlines()
    for number, line in _outside_fences(lines):
        for slot in find(line, DOUBLE_BRACED):
            issues.append(ValidationIssue(check="placeholder", path=name, line=number, column=slot.start + 1,
                                          message=f"unfilled placeholder {slot.text}"))
    present = [_normalize(m.group(1)) for _, line in _outside_fences(lines) if (m := _HEADING.match(line))]
    for number, line in _outside_fences(template_text.splitlines()):
        heading = _HEADING.match(line)
        if heading and not any(_heading_pattern(heading.group(1)).fullmatch(h) for h in present):
            issues.append(ValidationIssue(check="section", path=name,
                                          message=f"missing section '## {heading.group(1)}' "
                                                  f"(template line {number})"))
    if lines and lines[0].strip() == "---":
        end = next((i for i in range(1, len(lines)) if lines[i].strip() in ("---", "...")), None)
        if end is None:
            issues.append(ValidationIssue(check="frontmatter", path=name, line=1,
                                          message="frontmatter is not closed by '---'"))
        elif (problem := _yaml_problem("\n".join(lines[1:end]), 1, "frontmatter")) is not None:
            problem.path = name
            issues.append(problem)
    return ValidationReport.of("template", [name], issues)


def _outside_fences(lines: list[str]) -> list[tuple[int, str]]:
    """Number lines from 1 and drop fenced code (its ``##`` and ``{{}}`` are examples, not slots)."""
    kept, fenced = [], False
    for number, line in enumerate(lines, start=1):
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            kept.append((number, line))
    return kept


def _normalize(heading: str) -> str:
    return " ".join(heading.split()).casefold()


def _heading_pattern(heading: str) -> re.Pattern[str]:
    """A template heading as a pattern: its text literally, each ``{{…}}`` in it matching any text."""
    text = _normalize(heading)
    pattern, at = "", 0
    for slot in find(text, DOUBLE_BRACED):
        pattern += re.escape(text[at:slot.start]) + ".+"
        at = slot.end
    return re.compile(pattern + re.escape(text[at:]))


def _report_output(report: ValidationReport) -> ToolOutput:
    error = None if report.passed else report.summary()
    return ToolOutput(result=report.model_dump(mode="json"), error=error)


def _validate_python_tool(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    checks = args.get("checks", ["ast", "mypy", "ruff"])
    return _report_output(validate_python_files(args["targets"], ctx.project_root, checks=checks))


def _validate_json_tool(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    texts = {"<text>": args["text"]} if "text" in args else None
    return _report_output(validate_json(args.get("paths", []), ctx.project_root, texts=texts))


def _validate_yaml_tool(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    texts = {"<text>": args["text"]} if "text" in args else None
    return _report_output(validate_yaml(args.get("paths", []), ctx.project_root, texts=texts))


def validation_tools() -> list[ToolSpec]:
    """Return the specs of ``validatePython``, ``validateJson`` and ``validateYaml``."""
    paths = {"type": "array", "items": {"type": "string", "minLength": 1}}
    parse_schema = {"type": "object", "additionalProperties": False, "minProperties": 1,
                    "properties": {"paths": paths, "text": {"type": "string"}}}
    return [
        ToolSpec(name="validatePython", description="ast.parse, mypy and ruff on the project's Python files.",
                 handler=_validate_python_tool, risk="low", idempotent=True, timeout_seconds=600,
                 args_schema={"type": "object", "required": ["targets"], "additionalProperties": False,
                              "properties": {"targets": {**paths, "minItems": 1},
                                             "checks": {"type": "array", "uniqueItems": True,
                                                        "items": {"enum": ["ast", "mypy", "ruff"]}}}}),
        ToolSpec(name="validateJson", description="Check that files or a text parse as JSON.",
                 handler=_validate_json_tool, risk="low", idempotent=True, args_schema=parse_schema),
        ToolSpec(name="validateYaml", description="Check that files or a text parse as YAML.",
                 handler=_validate_yaml_tool, risk="low", idempotent=True, args_schema=parse_schema),
    ]
