"""Per-step checks around the executor: guardrails on inputs and outputs (R-S1), validation gates (R-V1),
and the step's evidence requirement (R-Q1).

Guardrails run before the step's tools and after its executor; a blocking failure fails the step for good.
Validation gates run after the executor and before the step's outputs are accepted; a failure puts the
details in ``step.error`` and the step is retried within ``retries.max``.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepline._placeholders import find
from stepline.errors import StepFailed
from stepline.formats import read_text
from stepline.model import EventType

if TYPE_CHECKING:
    from stepline.engine._context import StepContext
    from stepline.tools import ValidationReport

__all__ = ["check_gathered", "check_step_inputs", "check_step_outputs", "run_validation_gates"]

_CHECKLIST_ITEM = re.compile(r"^\s*[-*]\s*\[[ xX]?\]\s*(?P<item>.+?)\s*$")
_PYTHON_GATE = re.compile(r"(?i)\b(ast|type|lint|mypy|ruff|python)\b")


def _report_guardrails(ctx: StepContext, reports: list[Any]) -> None:
    # Passing reports ride on WorkflowStepCompleted (RunStep.guardrails); only failures get events of their own,
    # so a clean step costs no extra journal records.
    # A secret found in a file the step wrote carries ``artifacts`` ({path: {kind: count}}): the run's summary
    # and `stepline show` read it from RunStep.guardrails to say which file holds which kind.
    for report in reports:
        entry = {"guardrail": report.name, "stage": report.stage, "passed": report.passed,
                 "blocking": report.blocking, "details": report.details}
        if report.artifacts:
            entry["artifacts"] = report.artifacts
        ctx.guardrails.append(entry)
        if not report.passed:
            ctx.emit(EventType.VALIDATION_FAILED, entry)
    blocking = [r for r in reports if not r.passed and r.blocking]
    if blocking:
        reasons = "; ".join(f"{r.name}: {'; '.join(r.details)}" for r in blocking)
        raise StepFailed(f"guardrail failed on {blocking[0].stage}: {reasons}", retryable=False)


def check_step_inputs(ctx: StepContext) -> None:
    """Guardrails on what the step is given (its inputs and instructions) before tools run."""
    from stepline.guardrails import check_input

    spec = ctx.spec
    if not (spec.inputs or spec.body or spec.outputs):
        return  # nothing goes into this step: nothing to guard
    data = {"inputs": spec.inputs, "body": ctx.render(spec.body)}
    paths = [ctx.render(p) for p in spec.outputs]
    _report_guardrails(ctx, check_input(data, policy=ctx.engine.config.guardrails, project_root=ctx.project_root,
                                        paths=paths))


def check_gathered(ctx: StepContext, name: str, data: Any) -> Any:
    """Guardrails on what the runtime gathered for a step (a command's output, a file it read) before the step
    uses it: reported as the step's inputs are (a secret is a failed report, told, and fails the step under
    ``guardrails.block_on_secret``); return ``data`` redacted, as every prompt and record must be."""
    from stepline.guardrails import check_input

    _report_guardrails(ctx, check_input({name: data}, policy=ctx.engine.config.guardrails))
    return ctx.engine.redact(data)


def check_step_outputs(ctx: StepContext) -> None:
    """Guardrails on what the step produced (the files it wrote): a secret in one is reported with the file and
    its kind, the file is left as written, and ``guardrails.secrets_in_artifacts: block`` fails the step."""
    if not ctx.written:
        return
    from stepline.guardrails import check_artifacts

    texts = {rel: _read(path) for rel, path in ctx.written.items()}
    _report_guardrails(ctx, check_artifacts(texts, policy=ctx.engine.config.guardrails,
                                            project_root=ctx.project_root))


def _read(path: Path) -> str:
    try:  # a file that is not UTF-8 is still scanned (bad bytes read as U+FFFD)
        return path.read_bytes().decode("utf-8", "replace")
    except OSError:
        return ""


async def run_validation_gates(ctx: StepContext) -> None:
    """Run every gate that applies to the step; raise StepFailed (retryable) with the details on failure."""
    spec = ctx.spec
    if not (ctx.written or spec.validation or spec.templates or spec.evidence or spec.inputs
            or spec.meta.get("checklist")):
        return  # nothing was produced and nothing is asked of the step
    reports = [*_structural(ctx), *_templates(ctx), *await _python(ctx), *await _checklist(ctx), *_layout(ctx),
               *_evidence(ctx)]
    failed = [r for r in reports if not r.passed]
    for report in reports:
        kind = EventType.VALIDATION_PASSED if report.passed else EventType.VALIDATION_FAILED
        ctx.emit(kind, {"gate": report.name, "checked": report.checked,
                        "issues": [str(i) for i in report.issues][:50]})
    if failed:
        raise StepFailed("validation failed: " + "\n".join(r.summary() for r in failed), retryable=True)


def _structural(ctx: StepContext) -> list[ValidationReport]:
    """JSON and YAML outputs must parse."""
    from stepline.tools import validate_json, validate_yaml

    json_files = [rel for rel in ctx.written if rel.endswith(".json")]
    yaml_files = [rel for rel in ctx.written if rel.endswith((".yaml", ".yml"))]
    reports = []
    if json_files:
        reports.append(validate_json(json_files, ctx.project_root))
    if yaml_files:
        reports.append(validate_yaml(yaml_files, ctx.project_root))
    return reports


def _templates(ctx: StepContext) -> list[ValidationReport]:
    """Every template section filled and no ``{{placeholder}}`` left.

    BMAD documents are filled section by section over several steps (template-output, micro-file steps), and
    their readers list a step's templates for information only; so the check runs where a step asks for it
    (``validation: template…``) or where a native step declares the template it fills (``templates:``).
    """
    from stepline.tools import check_template_complete

    spec = ctx.spec
    declared = bool(spec.templates) and ctx.run.workflow.format == "native"
    wants = "template" in (spec.validation or "").lower() or declared
    if not wants or not ctx.written:
        return []
    template_text = ""
    for entry in spec.templates:
        candidate = ctx.project_root / ctx.render(entry.removeprefix("template:"))
        if candidate.is_file():
            template_text = read_text(candidate)
            break
    return [check_template_complete(_read(path), template_text, name=rel) for rel, path in ctx.written.items()
            if rel.endswith(".md")]


async def _python(ctx: StepContext) -> list[ValidationReport]:
    """ast.parse + mypy + ruff on the step's validation_targets (or its Python outputs when it asks for it)."""
    targets = [ctx.render(str(t)) for t in ctx.spec.inputs.get("validation_targets") or []]
    if not targets and _PYTHON_GATE.search(ctx.spec.validation or ""):
        targets = [rel for rel in ctx.written if rel.endswith(".py")]
    if not targets:
        return []
    from stepline.tools import validate_python_files

    return [await asyncio.to_thread(validate_python_files, targets, ctx.project_root)]


async def _checklist(ctx: StepContext) -> list[ValidationReport]:
    """Each item of the step's checklist judged by the executor (a yes/no decision) and recorded."""
    path_text = ctx.spec.meta.get("checklist") or ""
    if not path_text:
        return []
    from stepline.tools import ValidationIssue, ValidationReport

    path = Path(ctx.render(str(path_text)))
    path = path if path.is_absolute() else ctx.project_root / path
    if not path.is_file():
        return [ValidationReport.of("checklist", [str(path)], [ValidationIssue(
            check="checklist", path=str(path), message="checklist file not found")])]
    outputs = "\n\n".join(f"--- {rel}\n{_read(p)[:20000]}" for rel, p in ctx.written.items())
    issues = []
    items = [m.group("item") for line in read_text(path).splitlines()
             if (m := _CHECKLIST_ITEM.match(line))]
    for number, item in enumerate(items, 1):
        outcome = await ctx.invoke("decide", condition=f"Checklist item holds: {item}", content=outputs,
                                   hints={"default": True, "checklist": str(path), "item": number})
        if not outcome.decision:
            issues.append(ValidationIssue(check="checklist", path=str(path), message=f"{item} — {outcome.reason}"))
    return [ValidationReport.of("checklist", [str(path)], issues)]


def _layout(ctx: StepContext) -> list[ValidationReport]:
    """Declared outputs must live under {output_folder} / {bmb_creations_output_folder} when the step says so."""
    if "layout" not in (ctx.spec.validation or "").lower():
        return []
    from stepline.tools import ValidationIssue, ValidationReport

    issues = [ValidationIssue(check="layout", path=out, message="output is not under {output_folder} or "
                              "{bmb_creations_output_folder}") for out in ctx.spec.outputs
              if not any(p.name in ("output_folder", "bmb_creations_output_folder") for p in find(out))]
    return [ValidationReport.of("layout", list(ctx.spec.outputs), issues)]


def _evidence(ctx: StepContext) -> list[ValidationReport]:
    """A step with an evidence requirement (``L1`` …) must have recorded enough unexpired evidence."""
    requirement = ctx.spec.evidence
    if not requirement:
        return []
    from stepline.evidence import meets_requirement, validate_evidence
    from stepline.tools import ValidationIssue, ValidationReport

    records = [validate_evidence(r) for r in ctx.engine.evidence_of(ctx.spec.id)]
    if meets_requirement(records, requirement):
        return [ValidationReport.of("evidence", [r.id for r in records], [])]
    return [ValidationReport.of("evidence", [r.id for r in records], [ValidationIssue(
        check="evidence", path=ctx.spec.id, message=f"requirement {requirement!r} not met by "
        f"{len(records)} record(s) (expired and invalid records do not count)")])]
