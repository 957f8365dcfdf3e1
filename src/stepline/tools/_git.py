"""Generic git mechanics for families that commit on a run's behalf (no family knowledge here).

A commit made exactly once across a crash needs three things, all here: running git without a shell
(:func:`git`), a commit message carrying trailers that name who made it (:func:`with_trailers`), and a way to
find such a commit after a crash came between git and the journal (:func:`find_commit`). The caller journals
its intent (fsynced) before calling git and the result after; on resume, an intent without a result is looked
up with :func:`find_commit` before committing again.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

__all__ = ["find_commit", "git", "git_error", "git_ok", "is_ancestor", "with_trailers"]


async def git(root: Path, *args: str, stdin: str | None = None,
              env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run ``git -C root args…`` (``env``: variables added to this process's, e.g. a scratch ``GIT_INDEX_FILE``);
    return its exit status and its output (stdout and stderr), stripped."""
    process = await asyncio.create_subprocess_exec(
        "git", "-C", str(root), *args, stdin=asyncio.subprocess.PIPE if stdin is not None else None,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, **env} if env is not None else None)
    out, _ = await process.communicate(stdin.encode("utf-8") if stdin is not None else None)
    return process.returncode or 0, out.decode("utf-8", "replace").strip()


def git_error(out: str) -> str:
    """The line of git's output that says what went wrong: its first ``fatal:`` or ``error:`` line (git prints its
    progress, "Preparing worktree …", before), else its last line."""
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    return next((line for line in lines if line.startswith(("fatal:", "error:"))), lines[-1] if lines else "")


async def git_ok(root: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """Run git and return its output; a non-zero exit raises :class:`RuntimeError` with git's error line."""
    code, out = await git(root, *args, env=env)
    if code != 0:
        raise RuntimeError(f"git {' '.join(args[:2])}: {git_error(out) or f'exit status {code}'}")
    return out


async def is_ancestor(root: Path, ancestor: str, descendant: str) -> bool:
    """Whether ``ancestor`` is ``descendant`` or one of its ancestors."""
    code, _ = await git(root, "merge-base", "--is-ancestor", ancestor, descendant)
    return code == 0


def with_trailers(message: str, trailers: dict[str, str]) -> str:
    """``message`` followed by a blank line and ``Key: value`` trailers (how :func:`find_commit` finds it)."""
    lines = "\n".join(f"{key}: {value}" for key, value in trailers.items())
    return f"{message.rstrip()}\n\n{lines}\n"


async def find_commit(root: Path, trailers: dict[str, str], *, rev: str = "HEAD", limit: int = 200) -> str | None:
    """The sha of the newest commit reachable from ``rev`` (at most ``limit`` back) whose message carries every
    trailer of ``trailers``; None when there is none."""
    code, out = await git(root, "log", "-n", str(limit), "--format=%H%x00%B%x1e", rev)
    if code != 0:
        return None
    wanted = [f"{key}: {value}" for key, value in trailers.items()]
    for entry in out.split("\x1e"):
        sha, _, body = entry.strip().partition("\x00")
        lines = {line.strip() for line in body.splitlines()}
        if sha and all(line in lines for line in wanted):
            return sha
    return None
