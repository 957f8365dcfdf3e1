"""A chain's state in its output document's frontmatter: ``stepsCompleted``, ``lastStep``, ``inputDocuments``.

When a step of the chain completes, the runtime appends it to ``stepsCompleted`` (by number or by name, in the
document's style, else as the step file's own example shows), sets ``lastStep`` and adds the files the executor
read to ``inputDocuments``. The update is journaled as an intent before the file is written and is idempotent, so
a crash at any instant is repaired on resume and the journal and the frontmatter agree.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from stepline.engine import StepContext, sha256_file
from stepline.errors import ReaderError
from stepline.formats import read_frontmatter, read_text, update_frontmatter
from stepline.model import EventType
from stepline.stepchain._chain import record
from stepline.stepchain._read import step_number
from stepline.store import atomic_write_bytes

__all__ = ["mark_step_completed", "save_state"]

_STYLE_RE = re.compile(r"stepsCompleted:?\**\s*\[\s*(['\"]?)(\d?)")


def _marker(ctx: StepContext, document_text: str, step_text: str) -> int | str:
    """How this step is written in ``stepsCompleted``: its number, or its name, as the document does it."""
    stem = Path(str(ctx.spec.meta["file"])).stem
    existing = read_frontmatter(document_text).data.get("stepsCompleted") or []
    if isinstance(existing, list) and existing:
        names = any(isinstance(x, str) and not x.isdigit() for x in existing)
    else:
        style = _STYLE_RE.search(step_text)
        names = bool(style and style[1] and not style[2])
    number = step_number(stem)
    if names or number is None or number[1]:
        return stem
    return number[0]


def save_state(ctx: StepContext, document: Path, step_text: str) -> None:
    """Record the step in the document's frontmatter: intent journaled first, idempotent redo after a crash."""
    calls = ctx.engine.calls
    key = f"{ctx.spec.id}/{ctx.attempt}/state"
    if key in calls.recorded:
        return
    started = calls.started.get(key)
    if started is not None:
        args = dict(started["args"])
    else:
        text = read_text(document) if document.exists() else ""
        prefix = f"{ctx.spec.id}/{ctx.attempt}/"
        read = [str(c["args"]["path"]) for k, c in calls.recorded.items()
                if k.startswith(prefix) and c.get("op") == "read" and (c.get("result") or {}).get("found")]
        args = {"path": str(document), "step": _marker(ctx, text, step_text),
                "input_documents": [p for p in dict.fromkeys(read) if Path(p).name != document.name]}
        ctx.emit(EventType.CALL_STARTED, {"key": key, "op": "document_state", "args": args}, sync=True)
    text = read_text(document) if document.exists() else ""
    updated = mark_step_completed(text, args["step"], last_step=args["step"])
    if args["input_documents"]:
        current = read_frontmatter(updated).data.get("inputDocuments")
        known = [str(d) for d in current] if isinstance(current, list) else []
        merged = list(dict.fromkeys([*known, *args["input_documents"]]))
        if merged != known:
            updated = update_frontmatter(updated, {"inputDocuments": merged})
    document.parent.mkdir(parents=True, exist_ok=True)
    if updated != text:
        atomic_write_bytes(document, updated.encode("utf-8"))
    record(ctx, "state", "document_state", args, {"sha256": sha256_file(document)})


def mark_step_completed(text: str, step: int | str, *, last_step: int | str | None = None) -> str:
    """Append ``step`` to the document's ``stepsCompleted`` (once) and set ``lastStep``; keep all else as is.

    Works for numbered (``[1, 2]``) and named (``['step-01-init']``) lists and for flow and block YAML
    lists. ``lastStep`` is only written when ``last_step`` is given or the document already has the key.

    Raises:
        ReaderError: ``stepsCompleted`` exists but is not a list.
    """
    current = read_frontmatter(text)
    completed = current.data.get("stepsCompleted")
    if completed is None:
        completed = []
    if not isinstance(completed, list):
        raise ReaderError(
            f"stepsCompleted is a {type(completed).__name__}, not a list",
            path=current.path,
            line=current.line_of("stepsCompleted"),
        )
    updates: dict[str, Any] = {}
    if step not in completed:
        updates["stepsCompleted"] = [*completed, step]
    if last_step is not None or "lastStep" in current.data:
        updates["lastStep"] = step if last_step is None else last_step
    return update_frontmatter(text, updates) if updates else text
