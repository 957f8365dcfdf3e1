"""Reading a workflow's small files cheaply, and telling two versions of a file apart.

A CCW run reads each task file when the session is indexed, again when the task starts, and rewrites it when
the task completes; reading through system calls alone halves the cost of a small file, and knowing the
version read lets a later step reuse what was parsed instead of reading the file again.
"""

from __future__ import annotations

import os
from pathlib import Path

#: A file's inode, size and modification time (as :mod:`linecache` tells versions apart): a replacing write
#: (a new inode) or an edit in place (a new size or mtime) gives a new version.
FileVersion = tuple[int, int, int]


def file_version(info: os.stat_result) -> FileVersion:
    """The version of the file ``info`` describes."""
    return info.st_ino, info.st_size, info.st_mtime_ns


def read_file(path: Path | str) -> tuple[bytes, FileVersion]:
    """The file's bytes and their version, by system calls alone (io's file objects double the cost of reading
    a small file)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        info = os.fstat(fd)
        chunks = []
        size = info.st_size + 1  # the whole file and its end in one read, in a buffer of its size
        while chunk := os.read(fd, size):
            chunks.append(chunk)
            size = 1 << 16
    finally:
        os.close(fd)
    return b"".join(chunks), file_version(info)
