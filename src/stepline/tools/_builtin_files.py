"""``readFile`` / ``writeFile`` / ``listFiles``: file IO confined to the project root (R-T1).

Every path goes through :func:`stepline._paths.confine`: none outside the root, as written or through a
symlink.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

from stepline._paths import confine, inside
from stepline.errors import ToolError
from stepline.tools._spec import ToolContext, ToolOutput, ToolSpec

__all__ = ["file_tools", "list_files", "read_file", "write_file"]

_DEFAULT_READ_LIMIT = 1_000_000


def _relative(ctx: ToolContext, path: Path) -> str:
    return path.relative_to(Path(ctx.project_root).resolve()).as_posix() or "."


def read_file(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """Return a UTF-8 text file's content (up to ``max_bytes``), with its size and whether it was cut."""
    path = confine(ctx.project_root, args["path"])
    if not path.is_file():
        raise ToolError(f"no such file: {args['path']!r}")
    limit = int(args.get("max_bytes", _DEFAULT_READ_LIMIT))
    size = path.stat().st_size
    with path.open("rb") as handle:
        data = handle.read(limit)
    try:
        content = data.decode("utf-8", "strict" if size <= limit else "ignore")
    except UnicodeDecodeError as exc:
        raise ToolError(f"{args['path']!r} is not a UTF-8 text file") from exc
    return {"path": _relative(ctx, path), "content": content, "size": size, "truncated": size > limit}


def write_file(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    """Write (atomically: temp file + rename) or append text; parent folders are created."""
    path = confine(ctx.project_root, args["path"])
    if path.is_dir():
        raise ToolError(f"{args['path']!r} is a directory")
    data = str(args["content"]).encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    if args.get("append", False):
        with path.open("ab") as handle:
            handle.write(data)
    else:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    relative = _relative(ctx, path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return ToolOutput(result={"path": relative, "bytes": len(data), "sha256": digest}, artifacts=[relative])


def list_files(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """List entries under a folder (folders end in ``/``), sorted; symlinks leaving the root are skipped."""
    base = confine(ctx.project_root, args.get("path", "."))
    if not base.is_dir():
        raise ToolError(f"no such directory: {args.get('path', '.')!r}")
    pattern = str(args.get("pattern", "*"))
    limit = int(args.get("max_entries", 1000))
    root = Path(ctx.project_root).resolve()
    entries: list[str] = []
    skipped: list[str] = []
    for folder, dirs, files in os.walk(base, followlinks=False):
        if not args.get("recursive", False):
            dirs_here = list(dirs)
            dirs.clear()
        else:
            dirs[:] = [d for d in dirs if d != ".git"]
            dirs_here = dirs
        for name, is_dir in [(d, True) for d in dirs_here] + [(f, False) for f in files]:
            full = Path(folder) / name
            relative = full.relative_to(root).as_posix()
            if full.is_symlink() and inside(root, full) is None:
                skipped.append(relative)
            elif fnmatch.fnmatch(name, pattern):
                entries.append(relative + ("/" if is_dir else ""))
    entries.sort()
    return {"path": _relative(ctx, base), "entries": entries[:limit], "truncated": len(entries) > limit,
            "skipped_symlinks": sorted(skipped)}


def file_tools() -> list[ToolSpec]:
    """Return the specs of the three file tools."""
    path = {"type": "string", "minLength": 1, "description": "relative to the project root"}
    return [
        ToolSpec(name="readFile", description="Read a UTF-8 text file inside the project.", handler=read_file,
                 risk="low", idempotent=True,
                 args_schema={"type": "object", "required": ["path"], "additionalProperties": False,
                              "properties": {"path": path, "max_bytes": {"type": "integer", "minimum": 1}}}),
        ToolSpec(name="writeFile", description="Write or append a text file inside the project.",
                 handler=write_file, risk="medium", idempotent=False,
                 args_schema={"type": "object", "required": ["path", "content"],
                              "additionalProperties": False,
                              "properties": {"path": path, "content": {"type": "string"},
                                             "append": {"type": "boolean"}}}),
        ToolSpec(name="listFiles", description="List files in a folder of the project.", handler=list_files,
                 risk="low", idempotent=True,
                 args_schema={"type": "object", "additionalProperties": False,
                              "properties": {"path": path, "pattern": {"type": "string"},
                                             "recursive": {"type": "boolean"},
                                             "max_entries": {"type": "integer", "minimum": 1}}}),
    ]
