"""``runScript``: run a Python script of the project (a workflow's helper) with ``uv run``, else this Python.

BMAD's skills ship helpers meant to be run as ``uv run {project-root}/_bmad/scripts/memlog.py append …``.
This is that call as a command tool: ``uv run <script> <args…>`` when ``uv`` is on the PATH, otherwise the
interpreter stepline runs on (the project's Python), in the project root, output and exit code captured. A
script changes files, so the call is not idempotent: interrupted mid-run, it is never re-run blindly.

Where a script's effect can be read back from the disk, the tool says how (:class:`EffectCheck`), so a run
killed while the script ran learns on resume whether it finished: BMAD's ``memlog.py`` (``init``, ``append``,
``set``: each an atomic rename of ``.memlog.md``, so an entry is there whole or not at all). Any other script's
outcome is unknown and the step stops for a person. A script still running from the killed process (it runs
in a session of its own, so it outlives its parent) is waited for before the disk is read.

It runs code, so it is gated as ``shell`` is: a script the step itself names (shipped with the workflow) is
medium risk, and the step protocol's ``call_tool`` raises any other (one a step wrote, say) to high, the risk
that waits for a person unless the config says otherwise. Its script must really be inside the project
(symlinks followed) or under a folder the config allows (``tools.allowed_paths``).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from stepline.tools._spec import EffectCheck, ToolSpec

__all__ = ["SHELL_SCRIPT_EFFECT", "script_argv", "script_call", "script_file", "script_tools"]

#: How long a resume waits for a script the killed process left running before reading its effect.
ORPHAN_WAIT_SECONDS = 60.0


def script_argv(args: dict[str, Any]) -> list[str]:
    """The program ``runScript`` runs: ``uv run <script> <args…>`` or ``<this python> <script> <args…>``."""
    uv = shutil.which("uv")
    prefix = [uv, "run", "--no-project"] if uv else [sys.executable]
    return [*prefix, str(args["script"]), *(str(a) for a in args.get("args") or [])]


def script_tools() -> list[ToolSpec]:
    """Return the runScript tool's spec."""
    return [ToolSpec(
        name="runScript", description="Run a Python script file (path relative to the project root, or absolute) "
                                      "with its arguments, via `uv run` when available, else the project's Python.",
        command=script_argv, risk="medium", idempotent=False, effect=EffectCheck(_before, _happened),
        precondition=_missing_script, code=script_file,
        args_schema={"type": "object", "required": ["script"], "additionalProperties": False,
                     "properties": {"script": {"type": "string", "minLength": 1, "pattern": r"\.py$"},
                                    "args": {"type": "array", "items": {"type": "string"}}}},
    )]


def script_file(args: dict[str, Any]) -> list[str]:
    """The code ``runScript`` runs: its script (confined to the project by the pipeline)."""
    return [str(args["script"])]


def _missing_script(args: dict[str, Any], project_root: str) -> str | None:
    """A script that does not exist is refused with its path (python would only exit 2)."""
    script = Path(str(args["script"]))
    path = script if script.is_absolute() else Path(project_root) / script
    if path.is_file():
        return None
    return f"script {args['script']} does not exist ({path}): check the path, relative to the project root"


def script_call(command: str) -> dict[str, Any] | None:
    """The ``runScript`` arguments of a shell command that is one script call (``uv run [--opt] X.py …``,
    ``python3 X.py …``), or None for any other command (pipes, ``&&``, redirections, several commands)."""
    if any(mark in command for mark in (";", "&", "|", ">", "<", "`", "$(", "\n")):
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if words[:2] == ["uv", "run"]:
        words = words[2:]
        while words and words[0].startswith("--"):
            words = words[1:]
    elif words and Path(words[0]).name.startswith("python"):
        words = words[1:]
    else:
        return None
    if not words or not words[0].endswith(".py"):
        return None
    return {"script": words[0], "args": words[1:]}


def _shell_before(args: dict[str, Any], project_root: str) -> dict[str, Any] | None:
    call = script_call(str(args.get("command", "")))
    return _before(call, project_root) if call is not None else None


def _shell_happened(args: dict[str, Any], project_root: str, before: dict[str, Any]) -> bool | None:
    call = script_call(str(args.get("command", "")))
    return _happened(call, project_root, before) if call is not None else None


#: The ``shell`` tool's effect check: a command that is one checkable script call (``uv run …/memlog.py
#: append …``) is checked as ``runScript`` checks it; any other command's effect is unknown.
SHELL_SCRIPT_EFFECT = EffectCheck(_shell_before, _shell_happened)


# ------------------------------------------------------------------------------------ memlog.py's effects


def _options(tokens: list[str]) -> dict[str, list[str]] | None:
    """``--name value`` / ``--name=value`` pairs (repeatable); None when a token is not one (cannot tell)."""
    found: dict[str, list[str]] = {}
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if not token.startswith("--"):
            return None
        name, eq, value = token[2:].partition("=")
        if not eq:
            if index + 1 >= len(tokens):
                return None
            index += 1
            value = tokens[index]
        found.setdefault(name, []).append(value)
        index += 1
    return found


def _split(text: str) -> tuple[dict[str, str], list[str]] | None:
    """memlog.py's own reading of ``.memlog.md``: plain ``key: value`` frontmatter, then one entry a line."""
    lines = text.splitlines()
    if not lines or lines[0] != "---":
        return None
    end = next((i for i in range(1, len(lines)) if lines[i] == "---"), None)
    if end is None:
        return None
    meta = {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:end] if ":" in ln)}
    return meta, [ln for ln in lines[end + 1:] if ln.startswith("- ")]


def _read(path: Path) -> tuple[dict[str, str], list[str]] | None:
    try:
        return _split(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError, UnicodeDecodeError):
        return None


def _entry(options: dict[str, list[str]]) -> str:
    """The line ``memlog.py append`` writes for these options (its own formatting)."""
    text = " ".join(options["text"][-1].split())
    label = (options.get("type") or [""])[-1]
    if options.get("by"):
        label = f"{label} by {options['by'][-1]}".strip()
    return f"- ({label}) {text}" if label else f"- {text}"


def _memlog_call(args: dict[str, Any], project_root: str) -> tuple[str, dict[str, list[str]], Path] | None:
    """``(command, options, memlog file)`` of a ``memlog.py`` call, or None for any other script or call."""
    if Path(str(args.get("script", ""))).name != "memlog.py":
        return None
    tokens = [str(a) for a in args.get("args") or []]
    if not tokens or tokens[0] not in ("init", "append", "set"):
        return None
    options = _options(tokens[1:])
    if options is None or not (options.get("path") or options.get("workspace")):
        return None
    if tokens[0] == "append" and not options.get("text"):
        return None
    target = Path(options["path"][-1]) if options.get("path") else Path(options["workspace"][-1]) / ".memlog.md"
    return tokens[0], options, target if target.is_absolute() else Path(project_root) / target


def _before(args: dict[str, Any], project_root: str) -> dict[str, Any] | None:
    """What a memlog call will change, as it is just before the call (None: not a call this can check)."""
    call = _memlog_call(args, project_root)
    if call is None:
        return None
    command, options, path = call
    state = _read(path)
    before: dict[str, Any] = {"memlog": str(path), "command": command, "existed": path.exists()}
    if command == "append":
        before["entries"] = len(state[1]) if state else None
        before["entry"] = _entry(options)
    elif command == "set":
        if not (options.get("key") and options.get("value")):
            return None
        before["key"], before["value"] = options["key"][-1], options["value"][-1]
    return before


def _happened(args: dict[str, Any], project_root: str, before: dict[str, Any]) -> bool | None:
    """Whether the memlog call whose state ``before`` recorded had its effect (None: cannot tell)."""
    if not before.get("memlog"):
        return None
    _wait_for_orphans(args)
    path = Path(before["memlog"])
    state = _read(path)
    if before["command"] == "init":
        # An init that found the file already there failed and changed nothing: running it again is harmless.
        return bool(not before["existed"] and state is not None)
    if state is None:
        return False
    meta, entries = state
    if before["command"] == "set":
        return meta.get(str(before["key"])) == " ".join(str(before["value"]).splitlines())
    count = before.get("entries")
    if count is None:  # the memlog did not exist: the append failed and changed nothing
        return False
    return before["entry"] in entries[int(count):]


def _wait_for_orphans(args: dict[str, Any]) -> None:
    """Wait (bounded) while a process of this very call, left running by a killed stepline, is still alive."""
    tail = [str(args["script"]), *(str(a) for a in args.get("args") or [])]
    deadline = time.monotonic() + ORPHAN_WAIT_SECONDS
    while _running(tail) and time.monotonic() < deadline:
        time.sleep(0.05)


def _running(tail: list[str]) -> list[int]:
    """Pids of live processes whose command line ends with ``tail`` (Linux's /proc; none elsewhere)."""
    wanted = [part.encode() for part in tail]
    found = []
    proc = Path("/proc")
    for entry in proc.iterdir() if proc.is_dir() else []:
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            parts = (entry / "cmdline").read_bytes().split(b"\0")[:-1]
            state = (entry / "stat").read_bytes().rsplit(b")", 1)[-1].split()[0]
        except OSError:
            continue
        if parts[-len(wanted):] == wanted and len(parts) > len(wanted) and state != b"Z":
            found.append(int(entry.name))
    return found
