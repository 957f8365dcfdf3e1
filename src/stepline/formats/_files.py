"""Reading a workflow's small files cheaply, as UTF-8 text, and telling two versions of a file apart.

Every reader decodes through :func:`decode_text` (or :func:`read_text`): bytes that are not UTF-8 are a
:class:`~stepline.errors.ReaderError` naming the file, the line and the byte offset, never a
``UnicodeDecodeError`` traceback.

A CCW run reads each task file when the session is indexed, again when the task starts, and rewrites it when
the task completes; reading through system calls alone halves the cost of a small file, and knowing the
version read lets a later step reuse what was parsed instead of reading the file again.

Both refuse a file over the size limit (:mod:`stepline._limits`, ``STEPLINE_MAX_FILE_BYTES``) before reading
it: a workflow's files are small, and a hostile one must not take the reader's time and memory.
"""

from __future__ import annotations

import os
from pathlib import Path

from stepline._limits import read_limits
from stepline.errors import ReaderError

__all__ = ["FileVersion", "check_size", "decode_text", "file_version", "read_file", "read_text"]

_BOM = "\ufeff"

#: A file's inode, size and modification time (as :mod:`linecache` tells versions apart): a replacing write
#: (a new inode) or an edit in place (a new size or mtime) gives a new version.
FileVersion = tuple[int, int, int]


def file_version(info: os.stat_result) -> FileVersion:
    """The version of the file ``info`` describes."""
    return info.st_ino, info.st_size, info.st_mtime_ns


def check_size(size: int, path: Path | str) -> None:
    """Refuse a file of ``size`` bytes over the size limit, naming the file and the limit."""
    limit = read_limits().max_file_bytes
    if size > limit:
        raise ReaderError(f"the file is {size} bytes, over the reader's limit of {limit} bytes", path=str(path),
                          hint="STEPLINE_MAX_FILE_BYTES sets the limit")


def read_file(path: Path | str) -> tuple[bytes, FileVersion]:
    """The file's bytes and their version, by system calls alone (io's file objects double the cost of reading
    a small file); a file over the size limit is a :class:`ReaderError`."""
    fd = os.open(path, os.O_RDONLY)
    try:
        info = os.fstat(fd)
        check_size(info.st_size, path)
        chunks = []
        size = info.st_size + 1  # the whole file and its end in one read, in a buffer of its size
        while chunk := os.read(fd, size):
            chunks.append(chunk)
            size = 1 << 16
    finally:
        os.close(fd)
    return b"".join(chunks), file_version(info)


def decode_text(data: bytes, path: Path | str, *, strip_bom: bool = False) -> str:
    """``data`` (the bytes of ``path``) as UTF-8 text.

    Args:
        data: the file's bytes.
        path: the file, for the message.
        strip_bom: drop a leading byte order mark (kept otherwise, as ``open(encoding="utf-8")`` keeps it).

    Raises:
        ReaderError: the bytes are not UTF-8; the message names file:line and the offset of the first bad byte.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = " ".join(f"0x{b:02x}" for b in data[exc.start : min(exc.end, exc.start + 4)])
        raise ReaderError(f"not UTF-8 at byte {exc.start} ({exc.reason}: {bad})", path=str(path),
                          line=data.count(b"\n", 0, exc.start) + 1,
                          hint="re-save the file as UTF-8") from None
    return text[1:] if strip_bom and text.startswith(_BOM) else text


def read_text(path: Path | str, *, strip_bom: bool = False) -> str:
    """The file's text as ``Path.read_text(encoding="utf-8")`` gives it (``\\r\\n`` and ``\\r`` read as ``\\n``),
    but bytes that are not UTF-8 are a :class:`ReaderError` (see :func:`decode_text`).

    Raises:
        OSError: as :func:`open` raises it (``FileNotFoundError``, ``IsADirectoryError``…).
        ReaderError: the file is not UTF-8, or over the size limit.
    """
    with open(path, "rb") as file:
        check_size(os.fstat(file.fileno()).st_size, path)
        data = file.read()
    text = decode_text(data, path, strip_bom=strip_bom)
    if "\r" in text:  # universal newlines, as a file opened in text mode reads them
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text
