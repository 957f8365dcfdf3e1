"""Makes a file durable from a helper process, so that its fsync overlaps the caller's work.

A thread cannot do this in CPython: it needs the GIL to start the fsync and again to report it done, and the
caller — busy with the next step's Python work — holds the GIL, so the handovers cost about what the overlap
saves. A helper process shares no GIL. It is the journal's WAL writer: the parent writes records itself (their
order is the journal's), then asks "make everything up to record N durable" over a pipe; the helper calls
``fsync`` on its copy of the file descriptor and answers N. The helper exits when the pipe closes, so it never
outlives a killed parent for long.

Run as a script (``python -I -S _flusher.py FD REQUESTS ANSWERS``) it is the helper: nothing but the standard
library, so it starts in a few milliseconds.
"""

from __future__ import annotations

import os
import select
import struct
import sys

# As a script the helper imports nothing it does not use (subprocess or typing alone take ~20 ms to import,
# which a run waits out syncing in place); this is what typing.TYPE_CHECKING would say.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess

_MESSAGE = struct.Struct("<q")  # a record count, or minus an errno when fsync failed



def datasync(fd: int) -> None:
    """``fdatasync`` where the platform has it (the journal's blocks are allocated ahead: data is all to sync)."""
    getattr(os, "fdatasync", os.fsync)(fd)


class HelperGone(OSError):
    """The helper process is no longer there (killed, out of memory): its writer syncs in place instead."""


class Flusher:
    """The parent's end: ask for record counts to be made durable, wait for them."""

    def __init__(self, process: subprocess.Popen[bytes], requests: int, answers: int) -> None:
        self._process, self._req_w, self._ack_r = process, requests, answers
        self.durable = 0  # every record up to this count is on disk
        self._ready = False

    @classmethod
    def start(cls, fd: int) -> Flusher | None:
        """A helper for file descriptor ``fd``; None when no process can be started (fsync stays in place)."""
        import subprocess

        req_r, req_w = os.pipe()
        ack_r, ack_w = os.pipe()
        try:
            # Its own session: a Ctrl-C at the terminal is for the parent, which closes the pipe when it exits.
            process = subprocess.Popen([sys.executable, "-I", "-S", __file__, str(fd), str(req_r), str(ack_w)],
                                       pass_fds=(fd, req_r, ack_w), stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError:
            for end in (req_w, ack_r):
                os.close(end)
            return None
        finally:
            os.close(req_r)
            os.close(ack_w)
        return cls(process, req_w, ack_r)

    def ready(self) -> bool:
        """Whether the helper has started and said so (it answers 0 first); never blocks. Until then its
        writer syncs in place, so the helper's start-up (tens of ms on a busy machine) costs no one a wait."""
        if not self._ready and (self._ack_r < 0 or select.select([self._ack_r], [], [], 0)[0]):
            self._ready = True  # its first answer, or the end of the pipe, which wait() reports
        return self._ready

    def request(self, count: int) -> None:
        """Ask for the first ``count`` records (already written) to be made durable."""
        if self._req_w < 0:  # closed: its descriptor's number may be another file's by now
            raise HelperGone(f"the journal's sync helper (pid {self._process.pid}) was stopped")
        try:
            os.write(self._req_w, _MESSAGE.pack(count))
        except BrokenPipeError as exc:
            raise HelperGone(f"the journal's sync helper (pid {self._process.pid}) exited") from exc

    def wait(self, count: int) -> None:
        """Return once the first ``count`` records are durable: an OSError if the fsync failed, HelperGone if
        the helper is gone."""
        while self.durable < count:
            if self._ack_r < 0:
                raise HelperGone(f"the journal's sync helper (pid {self._process.pid}) was stopped")
            data = os.read(self._ack_r, 8 * 1024)
            if not data:
                raise HelperGone(f"the journal's sync helper (pid {self._process.pid}) exited")
            answer = _MESSAGE.unpack_from(data, len(data) - _MESSAGE.size)[0]
            if answer < 0:
                raise OSError(-answer, os.strerror(-answer))
            self.durable = answer

    def close(self) -> None:
        """Stop the helper (after the last answer it gave). Its pipes' descriptors are forgotten, so a request
        or wait after this is :class:`HelperGone`, never a write to whatever file reuses their numbers."""
        if self._req_w < 0:
            return
        os.close(self._req_w)
        self._req_w = -1
        if not self.ready():
            self._process.kill()  # asked for nothing yet: no need to wait for its start-up just to see it go
        self._process.wait()
        os.close(self._ack_r)
        self._ack_r = -1


def _serve(fd: int, requests: int, answers: int) -> None:
    os.write(answers, _MESSAGE.pack(0))  # ready
    while True:
        data = os.read(requests, _MESSAGE.size)  # one request, one sync (a pipe never splits 8 bytes)
        if not data:
            return  # the parent closed the pipe, or died
        count = _MESSAGE.unpack(data)[0]
        try:
            datasync(fd)
        except OSError as exc:
            os.write(answers, _MESSAGE.pack(-(exc.errno or 5)))
            return
        os.write(answers, _MESSAGE.pack(count))


if __name__ == "__main__":
    _serve(*(int(arg) for arg in sys.argv[1:4]))
    os._exit(0)  # nothing to flush or finalise: skip the interpreter's teardown, which the writer waits for
