"""A recording file (JSON lines) read a line at a time: never the whole file in memory.

``kmon replay`` reads recordings anyone may hand it. The file must be a regular file
within a size cap, every line within a line cap; it is kept open, so that the lines
read again as the recording plays are those of the file that was checked.
"""

from __future__ import annotations

import os
import stat
import weakref
from collections.abc import Iterator
from pathlib import Path


class RecordingFileError(OSError):
    """A recording file kmon will not read; the message names it and says why."""


class RecordingFile:
    """An open recording: its lines streamed once, then any of them read again by place."""

    def __init__(self, path: Path, max_bytes: int, max_line_bytes: int) -> None:
        self.path, self.max_line_bytes = path, max_line_bytes
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        except OSError as err:
            raise RecordingFileError(f"cannot read {path}: {err.strerror or err}") from err
        weakref.finalize(self, os.close, fd)
        self.fd = fd
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RecordingFileError(f"recording {path}: not a regular file")
        if info.st_size > max_bytes:
            raise RecordingFileError(f"recording {path}: larger than {max_bytes:,} bytes")
        self.size = info.st_size  # what is read: a file that grows later is read to here

    def lines(self) -> Iterator[tuple[int, int, bytes]]:
        """(line number, offset, bytes) of every line up to the size seen at opening."""
        offset, number = 0, 0
        with os.fdopen(os.dup(self.fd), "rb") as file:
            file.seek(0)
            while offset < self.size:
                raw = file.readline(min(self.max_line_bytes + 1, self.size - offset))
                if not raw:
                    return  # the file was cut short since
                number += 1
                if len(raw) > self.max_line_bytes:
                    raise RecordingFileError(f"{self.path}:{number} is longer than "
                                             f"{self.max_line_bytes:,} bytes")
                yield number, offset, raw
                offset += len(raw)

    def read(self, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` (a line found by ``lines()``)."""
        return os.pread(self.fd, length, offset)
