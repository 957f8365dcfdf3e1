"""Review layers that launch subagents: a ``{workflow.<x>}`` list of tables with an ``instruction`` (bmad-build's
review layers) is not handed to one conversation: each layer is its own request with only its instruction, at most
``runtime.concurrency`` at once. The project files an instruction says to read (``Read `x.md` ``) come with it."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from stepline._paths import inside
from stepline._placeholders import Kind, find
from stepline.engine import StepContext
from stepline.errors import ReaderError
from stepline.formats import read_text
from stepline.skills._host import base_context, render, skill_of, standing

__all__ = ["FILES_HEADING", "run_subagents", "subagent_layers", "with_files_read"]

#: A file an instruction has its subagent read first: ``Read `<path>` completely and follow it`` (the review layers'
#: prompts are so named).
_READ = re.compile(r"\bRead `([^`\n]+)`", re.IGNORECASE)
#: The heading under which the files an instruction says to read follow it.
FILES_HEADING = "## Files the instruction says to read (read for you)"


def subagent_layers(ctx: StepContext, text: str) -> list[tuple[str, list[dict[str, Any]]]]:
    """The ``{workflow.<x>}`` tokens of ``text`` (by name: ``workflow.<x>``) whose value is a list of layers (tables
    with an ``instruction``) that launch subagents, each with its active layers (an empty instruction disables one)."""
    skill = skill_of(ctx)
    found = []
    for name in dict.fromkeys(t.name for t in find(text, {Kind.CUSTOM})):  # a token named twice is one set of layers
        table, _, field = name.partition(".")
        value = (skill["customization"].get(table) or {}).get(field)
        if not isinstance(value, list) or not value or not all(isinstance(v, dict) for v in value):
            continue
        active = [v for v in value if str(v.get("instruction", "")).strip()]
        if any("subagent" in str(v["instruction"]).lower() for v in active):
            found.append((name, active))
    return found


async def run_subagents(ctx: StepContext, layers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each layer as its own ``work`` request (a fresh context: only its instruction), at most
    ``runtime.concurrency`` at a time; the results in the layers' order."""
    limit = asyncio.Semaphore(ctx.engine.config.runtime.concurrency)

    async def one(layer: dict[str, Any]) -> dict[str, Any]:
        async with limit:  # FIFO: the requests are numbered in the layers' order, the same on a resume
            name = str(layer.get("name") or layer.get("id"))
            # The run's standing text stays in the request (the prefix a provider caches for the whole run); the
            # executor tells the subagent that a fresh context works from its own instruction only.
            outcome = await ctx.invoke("work", title=f"subagent: {name}",
                                       content=with_files_read(ctx.project_root, render(ctx, layer["instruction"])),
                                       hints=standing(ctx),
                                       context={**base_context(ctx), "subagent": layer.get("id"),
                                                "fresh_context": True})
        return {"id": layer.get("id"), "name": name, "result": outcome.summary or ""}

    return list(await asyncio.gather(*(one(layer) for layer in layers)))


def with_files_read(root: Path, instruction: str) -> str:
    """``instruction`` with the files under ``root`` it says to read after it, as the runtime reads them: the subagent's
    one request holds what its first tool call would fetch (saved: a round trip that sends the run's prefix and the
    instruction again). A file that is not there, not text or outside the project is left to the subagent."""
    read: dict[Path, str] = {}
    for name in _READ.findall(instruction):
        path = inside(root, name)
        if path is None or path in read or not path.is_file():
            continue
        try:
            read[path] = f"### `{name}`\n{read_text(path).strip()}"
        except (OSError, ReaderError):
            continue
    return f"{instruction.rstrip()}\n\n{FILES_HEADING}\n" + "\n\n".join(read.values()) if read else instruction
