"""``summary.json``: a run's digest kept beside its journal, for the commands that must not replay it each call.

Derived data, like ``timeline.json``: made from the journal, the manifest and the audit files, and valid only
for the very files it was made from. It carries their fingerprint (each file's size and modification time, the
journal's last bytes hashed); a reader compares it with the files on disk and uses the digest only when they
agree and no process drives the run (a live run's journal changes under the reader).
Otherwise the caller rebuilds it from the journal and saves it again. It is written without fsync and without
the run's lock: a lost or half-replaced digest is simply rebuilt, and one saved for files that changed since
never matches them.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from typing import Any

import orjson

from stepline.errors import StorageError
from stepline.store._files import atomic_write_bytes
from stepline.store._rundir import AUDIT_FILES, RunDir

__all__ = ["SUMMARY_FILE", "Fingerprint", "fingerprint", "read_summary", "save_summary"]

SUMMARY_FILE = "summary.json"
#: The files a digest is made from (besides the journal, whose last bytes are hashed too).
_SOURCES = ("manifest.json", "journal.jsonl", *AUDIT_FILES)
#: How much of the journal's end is hashed: its last records (an append, a cut or an edit there changes them).
_TAIL = 1 << 16

Fingerprint = list[Any]


def fingerprint(run_dir: RunDir) -> Fingerprint:
    """What the digest of ``run_dir`` is checked against: each source file's ``[size, mtime_ns]`` (None when it
    is absent) and the sha256 of the journal's last 64 KiB."""
    found: Fingerprint = []
    for name in _SOURCES:
        try:
            stat = os.stat(run_dir.path / name)
        except OSError:
            found.append(None)
        else:
            found.append([stat.st_size, stat.st_mtime_ns])
    tail = ""
    with contextlib.suppress(OSError), open(run_dir.journal_path, "rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        handle.seek(max(0, size - _TAIL))
        tail = hashlib.sha256(handle.read()).hexdigest()
    found.append(tail)
    return found


def read_summary(run_dir: RunDir, version: int) -> tuple[Fingerprint, dict[str, Any] | None]:
    """The run's fingerprint now, and its digest when one of ``version`` was saved for exactly these files and
    no process drives the run (else None: the caller rebuilds it)."""
    key = fingerprint(run_dir)
    try:
        saved = orjson.loads((run_dir.path / SUMMARY_FILE).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return key, None
    if not isinstance(saved, dict) or saved.get("version") != version or saved.get("fingerprint") != key:
        return key, None
    data = saved.get("data")
    if not isinstance(data, dict) or run_dir.holder() is not None:
        return key, None
    return key, data


def save_summary(run_dir: RunDir, key: Fingerprint, version: int, data: dict[str, Any]) -> bool:
    """Save ``data`` as the digest of the files ``key`` was taken from, when they are still those and no process
    drives the run; return whether it was saved. A disk that refuses it (full, read-only) is no error: the digest
    is rebuilt next time."""
    if run_dir.holder() is not None or fingerprint(run_dir) != key:
        return False
    document = orjson.dumps({"version": version, "fingerprint": key, "data": data})
    try:
        atomic_write_bytes(run_dir.path / SUMMARY_FILE, document, durable=False)
    except StorageError:
        return False
    return True
