"""Sessions of processes named by PID, live or replayed, and the recording the user may
start and stop in any session (see kmon.engine.facade)."""

from __future__ import annotations

import contextlib
import platform
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from kmon.engine.monitor import Monitor
from kmon.model import Event, Snapshot


class SnapshotSource(Protocol):
    """Where refreshes come from: a live Monitor, or a recording replayed."""

    def poll(self) -> tuple[Snapshot, list[Event]]: ...


class AttachFailed(Exception):
    """A process the user asked to attach to cannot be watched (gone, no permission, …)."""


class SessionClosed(Exception):
    """A poll of a session already closed (its samplers are released)."""


def check_open(closed: bool) -> None:
    """SessionClosed when ``closed``: a poll after the session was closed."""
    if closed:
        raise SessionClosed("the session is closed")


class RecordingFailed(OSError):
    """The recording could not write (the disk full, say): it was stopped, the refreshes go
    on without it."""


class Recordable:
    """The recording the user may start and stop in a session (``kmon record``'s files).

    A session's ``poll()`` (a worker thread) hands each refresh to ``recorded()``, so
    Parquet flushes never run on the UI thread; ``stop_recording()`` compacts the parts
    and belongs in a worker too.
    """

    interval_ms: int
    _record_lock: threading.Lock  # the session's own: recording changes never wait for a poll
    _closed: bool
    _recorder = None

    def recorded(self, polled: tuple[Snapshot, list[Event]]) -> tuple[Snapshot, list[Event]]:
        """``polled``, added to the running recording, if any. A recording that cannot
        write is stopped, and RecordingFailed says so once: the refreshes go on."""
        with self._record_lock:
            recorder = self._recorder
            if recorder is None:
                return polled
            try:
                recorder.add(*polled)
            except OSError as err:
                self._recorder = None
                with contextlib.suppress(OSError):
                    recorder.close()
                raise RecordingFailed(f"cannot write the recording: {err}") from err
        return polled

    def start_recording(self, root: Path) -> None:
        """Record every following refresh under ``root`` (as ``kmon record`` does).

        ``root`` is made and verified now (OSError saying why kmon will not write
        there); nothing is written in it before the next refresh.
        """
        from kmon.record.recorder import Recorder, new_session_id

        host = platform.node()
        with self._record_lock:
            if self._recorder is None:
                self._recorder = Recorder(root, host, new_session_id(host), self.interval_ms)

    def _close(self, poll_lock: threading.Lock, release: Callable[[], None]) -> None:
        """Stop any recording, then, once the poll under way (``poll_lock``) has finished,
        ``release`` the session's sources, once: even when the recording cannot be closed
        (the disk full); a later poll raises SessionClosed."""
        try:
            self.stop_recording()
        finally:
            with poll_lock:
                if not self._closed:
                    self._closed = True
                    release()

    def stop_recording(self) -> str:
        """Close the recording (compacting its parts: call from a worker); what it wrote."""
        with self._record_lock:
            recorder, self._recorder = self._recorder, None
            if recorder is None:
                return "not recording"
            summary = recorder.close()
        return (f"{sum(summary.rows.values())} rows in {len(summary.files)} files "
                f"under {recorder.root}")


class ProcessSession(Recordable):
    """One process's refreshes, and the recording the user may start and stop."""

    def __init__(self, source: SnapshotSource, interval_ms: int = 1000) -> None:
        self.source = source
        self.interval_ms = interval_ms
        self._poll_lock = threading.Lock()  # one poll at a time; close waits for it
        self._closed = False
        self._record_lock = threading.Lock()

    def poll(self) -> tuple[Snapshot, list[Event]]:
        """The next snapshot and its events (recorded when a recording runs)."""
        with self._poll_lock:
            check_open(self._closed)
            polled = self.source.poll()
        return self.recorded(polled)

    @property
    def finished(self) -> bool:
        """True once the source has no more to show: a replay past its recording's end."""
        return bool(getattr(self.source, "finished", False))

    def close(self) -> None:
        """Stop any recording and release the source (JMX helpers, sockets): ``_close``."""
        self._close(self._poll_lock, getattr(self.source, "close", lambda: None))


class LiveSession(ProcessSession):
    """Live processes named by PID (a Monitor's): what the text output and ``record`` ask
    of them besides their refreshes."""

    def __init__(self, monitor: Monitor, interval_ms: int = 1000,
                 kernel_notice: str | None = None) -> None:
        super().__init__(monitor, interval_ms)
        self.monitor = monitor
        self.kernel_notice = kernel_notice  # what kmon cannot see without the kernel's events

    @property
    def host(self) -> str:
        return self.monitor.host

    @property
    def pids(self) -> list[int]:
        """The processes still watched."""
        return list(self.monitor.samplers)

    @property
    def all_exited(self) -> bool:
        """True once every watched process has gone."""
        return self.monitor.all_exited

    @property
    def last_loss(self) -> str:
        """Why the most recently dropped process was dropped."""
        return self.monitor.last_loss

    @property
    def events(self) -> list[Event]:
        """The remembered events."""
        return list(self.monitor.events)
