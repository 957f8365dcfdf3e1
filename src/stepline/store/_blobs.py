"""Content-addressed copies of a run's artifacts, in its directory: ``blobs/<sha256[:2]>/<sha256>``.

Each artifact a step records (an ``ArtifactReady`` record names its path and sha256) is copied here as it is
recorded, so any earlier version of a project file can be put back from the run directory alone (``stepline
fork``) and two runs' artifacts can be compared (``stepline replay``, ``stepline diff``). A copy is written once
per content; a run recorded by a stepline older than this has no ``blobs/``: its readers say which record they
cannot read.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from stepline._paths import inside
from stepline.store._files import atomic_write_bytes

__all__ = ["BLOBS_DIR", "blob_path", "keep_artifact", "keep_blob", "link_blob", "read_blob"]

BLOBS_DIR = "blobs"


def blob_path(run_path: Path, sha256: str) -> Path:
    """Where the copy of the content with ``sha256`` lives in the run directory ``run_path``."""
    return run_path / BLOBS_DIR / sha256[:2] / sha256


def keep_artifact(run_path: Path, project_root: Path, rel: str, sha256: str, *,
                  holds_secret: Callable[[bytes], bool] | None = None) -> None:
    """Copy the project file ``rel`` into the run's blobs, if it still holds the content ``sha256`` (a file
    changed since its hash was taken is not copied under a hash that is not its own). A content that
    ``holds_secret`` is not copied: the run directory never holds a secret (R-S1), so such a version cannot be
    put back from the run alone, and its readers say so as for any version without a copy."""
    target = blob_path(run_path, sha256)
    if target.exists():
        return
    source = inside(project_root, rel)
    if source is None:
        return
    try:
        data = source.read_bytes()
    except OSError:
        return
    if hashlib.sha256(data).hexdigest() == sha256:
        keep_blob(run_path, data, holds_secret=holds_secret)


def keep_blob(run_path: Path, data: bytes, *, holds_secret: Callable[[bytes], bool] | None = None) -> str:
    """Copy ``data`` into the run's blobs (unless it ``holds_secret``, see :func:`keep_artifact`); return its
    sha256."""
    sha256 = hashlib.sha256(data).hexdigest()
    target = blob_path(run_path, sha256)
    if target.exists() or (holds_secret is not None and holds_secret(data)):
        return sha256
    target.parent.mkdir(parents=True, exist_ok=True)
    # Not fsync'd: a run's steps must not wait for a copy only time travel reads; one a power cut lost or left
    # empty fails its hash check in read_blob, and the reader names the record it cannot read.
    atomic_write_bytes(target, data, durable=False)
    return sha256


def read_blob(run_path: Path, sha256: str) -> bytes | None:
    """The content with ``sha256`` from the run's blobs; None when the run holds no (intact) copy of it."""
    try:
        data = blob_path(run_path, sha256).read_bytes()
    except OSError:
        return None
    return data if hashlib.sha256(data).hexdigest() == sha256 else None


def link_blob(source_run: Path, target_run: Path, sha256: str) -> bool:
    """Give ``target_run`` the copy ``source_run`` holds of ``sha256`` (a hard link, else a copy); False when
    ``source_run`` has none."""
    source = blob_path(source_run, sha256)
    if not source.is_file():
        return False
    target = blob_path(target_run, sha256)
    if target.exists():
        return True
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
    return True
