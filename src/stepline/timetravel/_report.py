"""What differs between two runs of one workflow: steps, decisions, model requests, artifacts, usage.

``stepline diff`` prints it for any two runs; ``stepline replay`` for the recorded run and its replay. The
artifacts compared are each run's last recorded version of each file, read from its content-addressed copies.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from stepline.timetravel._record import ModelRequest, RecordedRun

__all__ = ["Report", "compare", "request_diff"]

#: Diff lines shown per prompt or artifact (the rest are counted).
_SHOWN = 80


@dataclass(slots=True)
class Report:
    """The differences between run ``a`` and run ``b``."""

    a: RecordedRun
    b: RecordedRun
    steps: list[str] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)
    requests: dict[str, list[str]] = field(default_factory=dict)  # step -> diff of its first changed request
    artifacts: dict[str, list[str]] = field(default_factory=dict)  # path -> how it differs (a unified diff)
    same_artifacts_count: int = 0

    @property
    def artifacts_same(self) -> bool:
        """Whether both runs left every artifact with the same content."""
        return not self.artifacts

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON."""
        return {"a": self.a.run_id, "b": self.b.run_id, "steps": self.steps, "decisions": self.decisions,
                "requests_changed": self.requests, "artifacts_differ": self.artifacts,
                "artifacts_same": self.same_artifacts_count,
                "usage": {"a": self.a.usage(), "b": self.b.usage()}}

    def lines(self) -> list[str]:
        """The report as text."""
        out = [f"A {self.a.run_id} ({self.a.run.status.value})", f"B {self.b.run_id} ({self.b.run.status.value})"]
        out.append("steps: " + ("the same" if not self.steps else f"{len(self.steps)} differ"))
        out += [f"  {line}" for line in self.steps]
        out.append("decisions: " + ("the same" if not self.decisions else f"{len(self.decisions)} differ"))
        out += [f"  {line}" for line in self.decisions]
        changed = ", ".join(self.requests) or "none"
        out.append(f"model requests changed: {changed}")
        for step, diff in self.requests.items():
            out.append(f"--- step {step}: its first changed request")
            out += _cut(diff)
        out.append(f"artifacts: {self.same_artifacts_count} the same, {len(self.artifacts)} differ")
        for diff in self.artifacts.values():
            out += _cut(diff)
        out.append("usage:     requests  input tokens  output tokens  cost (USD)")
        for name, run in (("A", self.a), ("B", self.b)):
            usage = run.usage()
            out.append(f"  {name}  {int(usage['requests']):>13}  {int(usage['input_tokens']):>12}  "
                       f"{int(usage['output_tokens']):>13}  {usage['cost_usd']:>10.6f}")
        return out


def compare(a: RecordedRun, b: RecordedRun) -> Report:
    """Compare two runs (the artifacts' contents from their blobs; a missing copy is an error naming it)."""
    report = Report(a, b)
    order = a.step_order() + [step for step in b.step_order() if step not in a.step_order()]
    for step in order:
        one, two = a.run.steps.get(step), b.run.steps.get(step)
        status_a = one.status.value if one is not None else "absent"
        status_b = two.status.value if two is not None else "absent"
        if status_a != status_b:
            report.steps.append(f"{step}: {status_a} in A, {status_b} in B")
        if one is not None and two is not None and one.choice != two.choice:
            report.decisions.append(f"{step}: {_differs('chose', one.choice, two.choice, 'no choice')}")
    answers_a, answers_b = a.answers(), b.answers()
    for gate in sorted(set(answers_a) | set(answers_b)):
        if answers_a.get(gate) != answers_b.get(gate):
            said = _differs("answered", answers_a.get(gate), answers_b.get(gate), "no answer")
            report.decisions.append(f"{gate}: {said}")
    for step in order:
        diff = request_diff(step, [r for r in a.requests if r.step_id == step],
                             [r for r in b.requests if r.step_id == step])
        if diff:
            report.requests[step] = diff
    final_a, final_b = a.artifacts(), b.artifacts()
    for path in sorted(set(final_a) | set(final_b)):
        one_version, two_version = final_a.get(path), final_b.get(path)
        if one_version is not None and two_version is not None and one_version[0] == two_version[0]:
            report.same_artifacts_count += 1
            continue
        old = a.content(path, *one_version) if one_version else b""
        new = b.content(path, *two_version) if two_version else b""
        shown = a.shown(path)
        report.artifacts[path] = _text_diff(old, new, f"A/{shown}" if one_version else "/dev/null",
                                            f"B/{shown}" if two_version else "/dev/null")
    return report


def request_diff(step: str, one: list[ModelRequest], two: list[ModelRequest]) -> list[str]:
    """The diff of the first request of ``step`` that differs between the runs (none: the same requests)."""
    for index in range(max(len(one), len(two))):
        first = one[index].prompt_text() if index < len(one) else ""
        second = two[index].prompt_text() if index < len(two) else ""
        if first != second:
            return list(difflib.unified_diff(first.splitlines(), second.splitlines(),
                                             f"A/{step}#{index + 1}", f"B/{step}#{index + 1}", lineterm=""))
    return []


def _text_diff(old: bytes, new: bytes, name_a: str, name_b: str) -> list[str]:
    try:
        first, second = old.decode("utf-8"), new.decode("utf-8")
    except UnicodeDecodeError:
        return [f"binary {name_a} and {name_b} differ"]
    return list(difflib.unified_diff(first.splitlines(), second.splitlines(), name_a, name_b, lineterm=""))


def _differs(verb: str, a: str | None, b: str | None, none: str) -> str:
    """``chose 'C' in A, 'R' in B``; a missing value is said as ``none`` (no choice made, a question not asked)."""
    if a is not None and b is not None:
        return f"{verb} {a!r} in A, {b!r} in B"
    return " in A, ".join(none if value is None else f"{verb} {value!r}" for value in (a, b)) + " in B"


def _cut(diff: list[str]) -> list[str]:
    if len(diff) <= _SHOWN:
        return diff
    return [*diff[:_SHOWN], f"... ({len(diff) - _SHOWN} more diff lines)"]
