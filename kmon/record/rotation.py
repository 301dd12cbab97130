"""A recording that runs for weeks: sessions cut by time and size, the oldest removed first.

``RotatingRecorder`` records into one session (``kmon.record.recorder.Recorder``)
at a time and closes it (compacting its parts) for a new one every
``rotate_every_s`` or once it has written ``rotate_bytes``. After each cut,
retention removes whole sessions of this host, oldest first, while one is older
than ``retain_s`` or the host's recording under the root is larger than
``max_bytes``; the session being written is never touched. A session is only
removed once finished (compacted), or by age when a killed writer left its
parts behind. Files are found and removed through verified directories
(``kmon.files.OutputDir``): a link planted in the recording leads nowhere.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from kmon.files import OutputDir
from kmon.model import Event, Snapshot
from kmon.record.recorder import Recorder, Summary, new_session_id
from kmon.record.schema import SCHEMAS

# <session>.parquet (compacted) or <session>-<seq>.parquet (a part being written or left)
_FILE = re.compile(r"^(?P<session>[0-9]{8}T[0-9]{6}Z-[^/]+?)(?P<part>-[0-9]{6})?\.parquet$")


@dataclass(frozen=True)
class Limits:
    """When to cut a session and what to keep; None: no such limit."""

    rotate_every_s: float | None = 3600.0
    rotate_bytes: int | None = None
    retain_s: float | None = None
    max_bytes: int | None = None


@dataclass
class SessionFiles:
    """One session's files under the root, across tables and days."""

    files: list[tuple[OutputDir, str, int]] = field(default_factory=list)  # dir, name, size
    finished: bool = False  # compacted: its writer closed it
    newest_mtime: float = 0.0

    @property
    def bytes(self) -> int:
        return sum(size for _, _, size in self.files)


class RotatingRecorder:
    """``Recorder``'s ``add`` and ``close`` over a chain of sessions (see the module)."""

    def __init__(self, root: Path, host: str, interval_ms: int, limits: Limits,
                 flush_every_s: float = 10.0) -> None:
        self.root, self.host, self.interval_ms = Path(root), host, interval_ms
        self.limits, self.flush_every_s = limits, flush_every_s
        self.totals: dict[str, int] = dict.fromkeys(SCHEMAS, 0)
        self.files: list[Path] = []
        self.bytes = 0
        self.current = self._start()

    def _start(self) -> Recorder:
        self.started = time.monotonic()
        self._counted: dict[str, int] = dict.fromkeys(SCHEMAS, 0)
        self._written = 0
        return Recorder(self.root, self.host, new_session_id(self.host), self.interval_ms,
                        self.flush_every_s)

    def add(self, snapshot: Snapshot, events: list[Event]) -> None:
        """Record one poll; cut the session first when it is due."""
        if self._due():
            self.rotate()
        self.current.add(snapshot, events)

    def _due(self) -> bool:
        every, size = self.limits.rotate_every_s, self.limits.rotate_bytes
        if every is not None and time.monotonic() - self.started >= every:
            return True
        return size is not None and self._written_bytes() >= size

    def _written_bytes(self) -> int:
        """Bytes of the current session's parts so far (each part stat'ed once)."""
        for table, parts in self.current.parts.items():
            for part in parts[self._counted[table]:]:
                with contextlib.suppress(OSError):  # gone meanwhile: counted at the close
                    self._written += part.stat().st_size
            self._counted[table] = len(parts)
        return self._written

    def rotate(self) -> Summary:
        """Close the current session, start the next, then apply retention."""
        summary = self._close_current()
        self.current = self._start()
        self.enforce_retention()
        return summary

    def _close_current(self) -> Summary:
        summary = self.current.close()
        for table, rows in summary.rows.items():
            self.totals[table] += rows
        self.files += summary.files
        self.bytes += summary.bytes
        return summary

    def enforce_retention(self) -> None:
        """Remove this host's oldest sessions beyond the age and size limits."""
        if self.limits.retain_s is None and self.limits.max_bytes is None:
            return
        opened: list[OutputDir] = []
        try:
            self._remove_beyond_limits(host_sessions(self.root, self.host, opened))
        finally:
            for directory in opened:
                directory.close()

    def _remove_beyond_limits(self, sessions: dict[str, SessionFiles]) -> None:
        keep = self.current.session_id
        total = sum(found.bytes for found in sessions.values())
        cutoff = time.time() - self.limits.retain_s if self.limits.retain_s is not None else None
        for session_id in sorted(sessions):  # ids start with their UTC start: oldest first
            found = sessions[session_id]
            if session_id == keep:
                continue
            too_old = cutoff is not None and found.newest_mtime < cutoff
            too_big = (self.limits.max_bytes is not None and total > self.limits.max_bytes
                       and found.finished)
            if too_old or too_big:
                remove_session(found)
                total -= found.bytes
                ours = [f for f in self.files if f.name.startswith(session_id)]
                if ours:
                    self.files = [f for f in self.files if f not in ours]
                    self.bytes -= found.bytes

    def close(self) -> Summary:
        """Close the session being written (its last part written and compacted)."""
        self._close_current()
        self.enforce_retention()
        return Summary(rows=dict(self.totals), files=list(self.files), bytes=self.bytes)


def host_sessions(root_path: Path, host: str,
                  opened: list[OutputDir]) -> dict[str, SessionFiles]:
    """Every session of ``host`` under the root: ``ROOT/<table>/date=*/host=<host>/``; the
    partition directories it opens are added to ``opened`` (the caller closes them)."""
    sessions: dict[str, SessionFiles] = defaultdict(SessionFiles)
    with OutputDir.open(root_path) as root:
        for table in SCHEMAS:
            if not _is_dir(root, table):
                continue
            with root.subdir(table) as table_dir:
                for date in sorted(os.listdir(table_dir.fd)):
                    if not (date.startswith("date=") and _is_dir(table_dir, date)):
                        continue
                    with table_dir.subdir(date) as date_dir:
                        if _is_dir(date_dir, f"host={host}"):
                            opened.append(date_dir.subdir(f"host={host}"))
                            _collect(opened[-1], sessions)
    return dict(sessions)


def _is_dir(parent: OutputDir, name: str) -> bool:
    try:
        info = os.stat(name, dir_fd=parent.fd, follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode)


def _collect(directory: OutputDir, sessions: dict[str, SessionFiles]) -> None:
    """Add the session files of one partition directory (which each session then holds)."""
    for name in os.listdir(directory.fd):
        match = _FILE.match(name)
        if match is None:
            continue
        try:
            info = os.stat(name, dir_fd=directory.fd, follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode):
            continue
        found = sessions[match["session"]]
        found.files.append((directory, name, info.st_size))
        found.finished |= match["part"] is None
        found.newest_mtime = max(found.newest_mtime, info.st_mtime)


def remove_session(found: SessionFiles) -> None:
    """Remove every file of one session, each directory synced after."""
    for directory, name, _ in found.files:
        with contextlib.suppress(FileNotFoundError):
            directory.remove(name)
    for directory in {id(d): d for d, _, _ in found.files}.values():
        directory.sync()
