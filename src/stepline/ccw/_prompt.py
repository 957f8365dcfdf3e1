"""The text a CCW task hands its agent, and the summary the runtime writes when the task completes.

Both schemas are read through :class:`TaskView` (6-field ``context``/``flow_control`` or the flat 2026
fields), so the prompt has the same sections either way: requirements, focus paths, acceptance, artifacts,
dependency summaries, inherited context, implementation approach, target files, session paths and the
outputs of the ``pre_analysis`` steps the runtime ran (seed 002's agent prompt template). Unlike CCW, the
agent is told *not* to update the task status, TODO_LIST.md or the summary: the runtime does that, atomically.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from stepline.ccw._task import TaskView
from stepline.ccw._task import task_item_text as _text
from stepline.ccw._task import task_items as _items

__all__ = ["build_task_prompt", "render_container_summary", "render_summary"]


def _bullets(items: Sequence[str], empty: str = "- (none)") -> list[str]:
    return [f"- {item}" for item in items] or [empty]


def _approach(steps: Sequence[Any]) -> list[str]:
    lines: list[str] = []
    for number, step in enumerate(steps, start=1):
        if not isinstance(step, dict):
            lines.append(f"{number}. {_text(step)}")
            continue
        title = step.get("title") or step.get("step") or f"step {number}"
        description = step.get("description") or step.get("task_description") or ""
        lines.append(f"{number}. **{title}**" + (f": {description}" if description else ""))
        lines += [f"   - {_text(point)}" for point in _items(step.get("modification_points"))]
        flow = [_text(item) for item in _items(step.get("logic_flow"))]
        if flow:
            lines.append(f"   - logic flow: {' → '.join(flow)}")
        if step.get("output"):
            lines.append(f"   - output: {step['output']}")
    return lines or ["- (none)"]


def build_task_prompt(view: TaskView, *, task_id: str, title: str, agent: str, execution_group: str | None,
                      paths: Mapping[str, Any], task_json: str | None, dependencies: Mapping[str, str],
                      flow_context: Mapping[str, str]) -> str:
    """Return the agent's prompt for one task (deterministic: the same inputs give the same text)."""
    group = f" [execution_group: {execution_group}]" if execution_group else ""
    lines = [
        "**EXECUTE TASK FROM JSON**", "",
        f"## Task\n{task_id}: {title} [{agent}]{group}", "",
        f"## Task JSON Location\n{task_json or '(container without a task JSON)'}", "",
        "## Instructions",
        "1. The runtime has run the task's `pre_analysis` steps; their outputs are under Flow Context.",
        "2. Implement the solution following the implementation approach, within the focus paths and target "
        "files, until every acceptance criterion holds.",
        "3. Do not change the task JSON, TODO_LIST.md or the summary file: the runtime records the task's "
        "completion. Finish with a summary of the files you modified and what you added; it becomes "
        f"`.summaries/{task_id}-summary.md`.", "",
        "## Requirements", *_bullets(view.requirements), "",
        "## Focus Paths", *_bullets(view.focus_paths), "",
        "## Acceptance", *_bullets(view.acceptance), "",
        "## Artifacts", *_bullets(view.artifacts), "",
        "## Dependencies",
    ]
    if not dependencies:
        lines.append("- (none)")
    for dep, summary in dependencies.items():
        lines += [f"### {dep}", summary.strip() or "(no summary)"]
    if view.inherited:
        lines += ["", "## Inherited Context", _text(view.inherited)]
    lines += ["", "## Implementation Approach", *_approach(view.approach), "",
              "## Target Files", *_bullets(view.target_files), "",
              "## Session Paths",
              f"- Workflow Dir: {paths.get('session_dir')}",
              f"- TODO List: {paths.get('todo_list')}",
              f"- Summaries: {paths.get('summaries_dir')}"]
    if paths.get("context_package"):
        lines.append(f"- Context Package: {paths['context_package']}")
    lines += ["", "## Flow Context"]
    if not flow_context:
        lines.append("- (no pre_analysis output)")
    for name, value in flow_context.items():
        lines += [f"### [{name}]", value.rstrip() or "(empty)"]
    return "\n".join(lines) + "\n"


def render_summary(view: TaskView, *, task_id: str, title: str, agent_summary: str | None,
                   files_modified: Sequence[str]) -> str:
    """Return ``.summaries/<id>-summary.md`` in the section layout of CCW's code-developer template."""
    lines = [f"# Task: {task_id} {title}".rstrip(), "", "## Implementation Summary", "",
             (agent_summary or "").strip() or "The agent gave no summary.", "",
             "### Files Modified",
             *_bullets([f"`{path}`" for path in files_modified], "- (none written through the step protocol)"),
             "", "## Outputs for Dependent Tasks", "",
             "### Acceptance Criteria Met", *_bullets(view.acceptance), "",
             "### Integration Points", *_bullets(view.target_files), "",
             "## Status: ✅ Complete"]
    return "\n".join(lines) + "\n"


def render_container_summary(task_id: str, title: str, children: Sequence[str]) -> str:
    """Return the summary of a container task: it is complete because all its subtasks are."""
    lines = [f"# Task: {task_id} {title}".rstrip(), "", "## Implementation Summary", "",
             f"All {len(children)} subtasks are complete:", "",
             *(f"- [{child}](./{child}-summary.md)" for child in children), "", "## Status: ✅ Complete"]
    return "\n".join(lines) + "\n"
