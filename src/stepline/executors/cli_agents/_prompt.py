"""What an agent CLI is told (:func:`build_prompt`: the current step only, and how to report back through
stepline's MCP tools, under the names that CLI gives them) and how its stream reads for people watching
(:func:`describe_output`)."""

from __future__ import annotations

import json
from typing import Any

from stepline.executors._protocol import StepRequest
from stepline.executors.cli_agents._spec import SERVER, TOOLS, AgentCli, Mode

__all__ = ["build_prompt", "describe_output"]


def _short(value: Any, limit: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"


def _usage_note(usage: Any, cost: Any = None) -> str:
    usage = usage if isinstance(usage, dict) else {}
    inp = usage.get("input_tokens", usage.get("input", 0)) or 0
    out = usage.get("output_tokens", usage.get("output", 0)) or 0
    return f"[{inp} in / {out} out" + (f", ${cost}" if cost else "") + "]"


def _blocks(content: Any) -> list[str]:
    """What a message's content blocks say (claude): text, thinking, a tool call, a tool's result."""
    said: list[str] = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            said.append(_short(block.get("text") or "", 300))
        elif kind == "thinking":
            said.append("(thinking) " + _short(block.get("thinking") or ""))
        elif kind == "tool_use":
            said.append(f"tool {block.get('name')} {_short(block.get('input') or {})}")
        elif kind == "tool_result":
            said.append("tool result: " + _short(block.get("content") or ""))
    return said


def describe_output(line: str) -> str:
    """A line an agent printed, said short for people watching: a stream-JSON event of claude, codex, gemini/qwen
    or opencode as what it is (text, a tool call, a tool's result, a command, usage); any other line as it is."""
    try:
        event = json.loads(line) if line.lstrip().startswith("{") else None
    except json.JSONDecodeError:
        event = None
    if not isinstance(event, dict):
        return line
    kind = str(event.get("type") or "")
    message = event.get("message")
    item = event.get("item") if isinstance(event.get("item"), dict) else event.get("part")
    item = item if isinstance(item, dict) else {}
    said: list[str] = []
    if isinstance(message, dict):  # claude: assistant / user messages
        said = _blocks(message.get("content"))
    elif kind == "result":  # claude's and gemini's end
        said = [f"result: {_short(event.get('result') or event.get('status') or '', 300)} "
                + _usage_note(event.get("usage") or event.get("stats"), event.get("total_cost_usd"))]
    elif kind in ("system", "init", "thread.started"):
        said = [f"session {event.get('session_id') or event.get('thread_id') or ''} started"]
    elif kind.startswith("item."):  # codex
        what = item.get("type")
        if what in ("agent_message", "reasoning"):
            said = [("(thinking) " if what == "reasoning" else "") + _short(item.get("text") or "", 300)]
        elif what == "command_execution":
            done = f" -> exit {item.get('exit_code')}" if item.get("exit_code") is not None else ""
            said = [f"$ {_short(item.get('command') or '')}{done}"]
        elif what:
            said = [f"{what} {_short({k: v for k, v in item.items() if k not in ('id', 'type')})}"]
    elif kind in ("turn.completed", "step_finish"):  # codex, opencode
        said = ["usage " + _usage_note(event.get("usage") or item.get("tokens"), item.get("cost"))]
    elif kind in ("message", "text"):  # gemini, opencode
        said = [_short(event.get("content") or item.get("text") or "", 300)]
    elif kind == "tool_use":  # gemini, opencode
        said = [f"tool {event.get('tool_name') or item.get('tool')} "
                + _short(event.get("parameters") or (item.get("state") or {}).get("input") or {})]
    elif kind == "tool_result":
        said = ["tool result: " + _short(event.get("output") or event.get("status") or "")]
    return " | ".join(part for part in said if part) or _short(line, 300)


def _task(request: StepRequest) -> str:
    if request.kind == "decide":
        return (f"Decide whether this condition holds: {request.condition}\n"
                "End with decide(value=true|false, reason=...).")
    if request.kind == "generate":
        return (f"Generate the content of the template section '{request.section}'. Submit it with "
                f"write_output(content=..., section='{request.section}', mode='section'), then finish(summary=...).")
    if request.kind == "answer":
        choices = f" Choose one of: {', '.join(request.choices)}." if request.choices else ""
        return (f"Answer as the user would: {request.question}{choices}\n"
                "End with finish(choice=<your answer>, summary=...).")
    outputs = request.hints.get("outputs") or []
    produce = (f"Write the step's output with write_output(content=...); stepline saves it to "
               f"{', '.join(outputs)}. " if request.hints.get("output") else "")
    return f"Do the step's work. {produce}End with finish(summary=<one line on what you did>)."


def build_prompt(request: StepRequest, mode: Mode, cli: AgentCli | None = None) -> str:
    """The agent's prompt: this step only (just-in-time), its variables, what to produce and how to report (the
    tools under the names ``cli`` gives them)."""
    lines = [
        "You are doing ONE step of a stepline workflow run. stepline owns the order of steps and the run's state:",
        "do only this step, and report through the tools of the `stepline` MCP server.",
        "",
        f"# Step {request.step_id}: {request.title}",
        f"workflow: {request.workflow_id}  run: {request.run_id}  request: {request.kind}  "
        f"attempt: {request.attempt}  mode: {mode}",
    ]
    if request.content.strip():
        lines += ["", "## Instructions", "", request.content.strip()]
    if request.question:
        lines += ["", "## Question", "", request.question]
    if request.telis_context:  # TELIS (R-C1): shards and a language server's answer, resolved for this step
        from stepline.context import render_context

        lines += ["", "## Context (TELIS)", "", render_context(request.telis_context)]
    if request.menu:
        lines += ["", "## Menu (pass the key as finish(choice=...))", ""]
        lines += [f"[{o.key}] {o.label}" + (" (default)" if o.default else "") for o in request.menu]
    shown = {k: v for k, v in request.variables.items() if not k.startswith("cli_session:")}
    if shown:
        lines += ["", "## Variables", ""]
        lines += [f"- {k}: {json.dumps(v, ensure_ascii=False, default=str)[:300]}" for k, v in shown.items()]
    name = cli.tool_name if cli is not None else (lambda tool: tool)
    tools = ", ".join(name(tool) for tool in TOOLS)
    lines += ["", "## What to do", "", _task(request), "", "## How to report back", "",
              f"The `{SERVER}` MCP server's tools are, by the names you have them under: {tools}."
              + (f" {cli.tool_note}" if cli is not None and cli.tool_note else ""), "",
              "- get_step(): this step's request as JSON.",
              "- read(path): a project file.  ask(question, choices?): ask the user.",
              "- write_output(content, path?, section?, mode?): the step's output (stepline writes and records it;",
              "  do not write the step's output files yourself).",
              "- set_var(name, value): a variable for later steps.  call_tool(name, args): a stepline tool.",
              "- finish(choice?, summary?) — or decide(value, reason) for a decision — exactly once, last."]
    if mode == "analysis":
        lines += ["", "This is analysis mode: do not modify any file; report only through the stepline tools."]
    from stepline.guardrails import redact

    return redact("\n".join(lines) + "\n")
