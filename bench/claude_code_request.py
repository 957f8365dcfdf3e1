"""Capture the fixed part of Claude Code's requests, for bench/prompt_economy.py's "as prompts in Claude Code".

Usage: ``python bench/claude_code_request.py`` (needs ``scripts/agents.sh``: the pinned ``claude`` CLI).

Runs the pinned ``claude`` (tests/agents) against the tests' scripted Anthropic server, on loopback, in an empty
project with a fresh HOME: ``claude -p "Read hello.txt." --output-format stream-json --verbose --permission-mode
acceptEdits``; the fake model answers its first request with one ``Read`` call and its second with a text. From
the two requests the server logged it writes ``bench/claude_code_request.json``: the CLI's version, each block's
size in characters as the bench counts them (tools, system blocks, the message blocks before and after the
person's prompt), where the ``cache_control`` breakpoints are, and that the second request moved the last one to
the end of the conversation. The sizes and places only: never the prompt text itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

PROMPT = "Read hello.txt."
OUT = HERE / "claude_code_request.json"


def capture() -> tuple[str, list[dict[str, Any]]]:
    """The CLI's version and the requests it sent."""
    from fakes import agents
    from fakes.fake_anthropic import FakeAnthropic, responder

    claude = agents.BIN / "claude"
    if not claude.exists():
        raise SystemExit(f"the pinned claude CLI is not installed ({claude}): run scripts/agents.sh")
    version = subprocess.run([str(claude), "--version"], capture_output=True, text=True, check=True,
                             timeout=60).stdout.split()[0]
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / "project"
        project.mkdir()
        (project / "hello.txt").write_text("hello\n", encoding="utf-8")
        with FakeAnthropic().running() as server:
            server.responder = responder(agents.turns([("Read", {"file_path": str(project / "hello.txt")})]))
            done = subprocess.run([str(claude), "-p", PROMPT, "--output-format", "stream-json", "--verbose",
                                   "--permission-mode", "acceptEdits"], cwd=project,
                                  env=agents.claude_env(Path(tmp) / "home", server.base_url), capture_output=True,
                                  text=True, timeout=240, stdin=subprocess.DEVNULL)
            requests = list(server.requests)
    if done.returncode != 0 or len(requests) != 2:
        raise SystemExit(f"claude exited {done.returncode} after {len(requests)} requests: {done.stderr[-500:]}")
    return version, requests


def layout(request: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The request's blocks by part, each as its size and whether a breakpoint ends it."""
    from prompt_economy import anthropic_blocks

    blocks = anthropic_blocks(request)
    tools, system = len(request.get("tools") or []), len(request.get("system") or [])
    prompt = next(at for at, (text, _) in enumerate(blocks) if at >= tools + system and json.dumps(PROMPT) in text)
    parts = {"tools": blocks[:tools], "system": blocks[tools:tools + system],
             "before_prompt": blocks[tools + system:prompt], "after_prompt": blocks[prompt + 1:]}
    return {name: [{"chars": len(text), "breakpoint": marked} for text, marked in part]
            for name, part in parts.items()}


def main() -> None:
    version, (first, second) = capture()
    blocks = layout(first)
    later = layout(second)["after_prompt"]
    fixed = len(blocks["after_prompt"])
    summary = {
        "cli": "@anthropic-ai/claude-code", "version": version,
        "captured_by": "bench/claude_code_request.py: claude -p against the tests' scripted Anthropic server "
                       "(tests/fakes/fake_anthropic.py), a fresh HOME and project; sizes in characters as "
                       "bench/prompt_economy.py counts blocks (anthropic_blocks)",
        "blocks": blocks,
        "conversation_breakpoint": {
            "placement": "the last block of the conversation, moved there by every request",
            "second_request_last_block_marked": later[-1]["breakpoint"],
            "second_request_first_request_last_block_marked": later[fixed - 1]["breakpoint"],
        },
        "chars": {name: sum(b["chars"] for b in part) for name, part in blocks.items()},
    }
    OUT.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: summary[k] for k in ("version", "chars", "conversation_breakpoint")}, indent=1))
    print(f"written: {OUT.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
