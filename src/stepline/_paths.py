"""Path confinement, the one implementation: a path must lead into its root, and stay there through symlinks.

A path is taken relative to its root (or as written when absolute). It is *outside* when, with its ``..``
collapsed, it is not under the root (nor under an allowed root); it *leaves through a symlink* when it is
under the root as written but its real path (every symlink on its way followed, ``..`` taken after them, as
the system does) is not. Each reader and writer of a user's files goes through here: the file tools, a step's
reads and writes, a tool's code, skill and session files, the dashboard's artifacts, and fork, replay and diff.

``follow=False`` checks the path as written only (a record in a journal: its meaning does not depend on the
disk). Tool worker processes import this module, so it imports nothing but the error tree.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from stepline.errors import OutsideRootError

__all__ = ["Escape", "confine", "escape", "inside", "link_out"]

PathLike = str | os.PathLike[str]


@dataclass(frozen=True, slots=True)
class Escape:
    """How a path leaves its root: ``real`` is where it leads, ``symlink`` whether a symlink took it there."""

    path: str
    real: Path
    symlink: bool

    def message(self, root_name: str = "the project root", root: PathLike | None = None) -> str:
        """One line naming the path, the root and where the path leads."""
        named = f"{root_name} {os.fspath(root)}" if root is not None else root_name
        if self.symlink:
            return f"path {self.path!r} leaves {named} through a symlink (it leads to {self.real})"
        return f"path {self.path!r} is outside {named}"


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


def escape(root: PathLike, path: PathLike, *, allowed: Iterable[PathLike] = (), follow: bool = True
           ) -> Escape | None:
    """How ``path`` leaves ``root`` (and every ``allowed`` root), or None when it stays inside."""
    written = os.fspath(path)
    top = os.path.abspath(root)
    others = [os.path.abspath(os.path.expanduser(a)) for a in allowed]
    candidate = os.path.normpath(os.path.join(top, written))
    reals = [os.path.realpath(top), *(os.path.realpath(a) for a in others)] if follow else []
    if not _under(candidate, [top, *others, *reals]):
        return Escape(written, Path(candidate), symlink=False)
    if not follow:
        return None
    real = os.path.realpath(os.path.join(top, written))  # symlinks first, then their ``..``: what open() does
    if not _under(real, reals):
        return Escape(written, Path(real), symlink=True)
    return None


def confine(root: PathLike, path: PathLike, *, allowed: Iterable[PathLike] = (), root_name: str = "the project root",
            follow: bool = True) -> Path:
    """``path``'s real path inside ``root`` (or an ``allowed`` root), so the caller opens exactly what was
    checked; else :class:`~stepline.errors.OutsideRootError` naming the path and where it leads."""
    found = escape(root, path, allowed=allowed, follow=follow)
    if found is not None:
        raise OutsideRootError(found.message(root_name, root), hint="use a path inside it")
    joined = os.path.join(os.path.abspath(root), os.fspath(path))
    return Path(os.path.realpath(joined) if follow else os.path.normpath(joined))


def inside(root: PathLike, path: PathLike, *, allowed: Iterable[PathLike] = ()) -> Path | None:
    """``path``'s real path when it stays inside ``root`` (or an ``allowed`` root), else None."""
    if escape(root, path, allowed=allowed) is not None:
        return None
    return Path(os.path.realpath(os.path.join(os.path.abspath(root), os.fspath(path))))


def link_out(path: PathLike, root: PathLike) -> Path | None:
    """Where symlinks lead ``path`` out of ``root``: its real path when ``path`` as written is inside ``root`` but
    its real path is not, else None. A workflow's own files must really be in its project: the runtime reads the
    real file, and would send it to the model."""
    found = escape(root, path)
    return found.real if found is not None and found.symlink else None
