"""kmon's uprobe events in tracefs, safe by construction: every one in a group named by kmon's
pid (``kmon_<pid>``), removed when kmon exits (normally, on SIGTERM or SIGHUP), and the groups
of kmon processes that are gone (a SIGKILL leaves its group) removed before kmon makes its
first.

An event is a tracepoint of the kernel's (``uprobe_events``): one line says where (a file and
an offset) and what it reads (fetch arguments). ``uprobe_events`` is only ever appended to
(opening it with O_TRUNC would remove every uprobe on the host, other tools' too), and a path
that could break a line or a field (whitespace, control characters) is never written.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from kmon.sources.kernel.kernel_events import (
    Field,
    KernelEventsUnavailable,
    parse_format,
    process_running,
    remove_stale_scratch,
    tracefs,
)

GROUP_PREFIX = "kmon_"
MAX_EVENTS_FILE = 1 << 20  # uprobe_events read at most
MAX_EVENTS = 64  # uprobe events one kmon makes, at most
SAFE_PATH = re.compile(r"/[A-Za-z0-9._+@/-]{1,1024}")
LINE = re.compile(r"^[pr]:(?P<group>kmon_(?P<pid>\d+))/(?P<event>\w+) ", re.M)
EXIT_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Uprobes:
    """kmon's uprobe events: made on demand, each once, all removed by ``remove_all``."""

    def __init__(self) -> None:
        self.group = f"{GROUP_PREFIX}{os.getpid()}"
        # (path, offset, fetch) -> the event's name, and its tracepoint id and record fields
        self.made: dict[tuple[str, int, str], tuple[str, tuple[int, dict[str, Field]]]] = {}
        self.names: list[str] = []
        self.before_removal: list[Callable[[], None]] = []  # perf events closed first
        self.lock = threading.RLock()
        self.closed = False  # once removed, never made again: kmon is ending
        self.busy_in: int | None = None  # the thread making events or opening perf events
        self.depth = 0
        self.deferred: int | None = None  # an exit signal that came to that thread meanwhile
        self.removed_stale = remove_stale()

    def event(self, path: str, offset: int, fetch: str) -> tuple[int, dict[str, Field]]:
        """The tracepoint id and record fields of a uprobe at ``offset`` in ``path`` reading
        ``fetch``; made at the first call."""
        key = (path, offset, fetch)
        with self._busy():
            if key in self.made and self._still_there(self.made[key][0]):
                return self.made[key][1]
            if self.closed:
                raise KernelEventsUnavailable("kmon is ending: its uprobes are removed")
            if not SAFE_PATH.fullmatch(path):
                raise KernelEventsUnavailable(f"a path kmon does not write to tracefs: {path!r}")
            if len(self.names) >= MAX_EVENTS:
                raise KernelEventsUnavailable(f"more than {MAX_EVENTS} uprobes")
            name = f"w{len(self.names)}"
            with tracefs() as root:
                _append(root, f"p:{self.group}/{name} {path}:{offset:#x} {fetch}\n")
                self.names.append(name)
                with open(root / "events" / self.group / name / "format",
                          encoding="ascii") as handle:
                    made = parse_format(handle.read(64 * 1024))
                self.made[key] = (name, made)
            return made

    def _still_there(self, name: str) -> bool:
        """Whether kmon's event ``name`` is still in tracefs: another root tool (or an
        in-process ``kmon`` run's sweep) may have removed it, and its old id would then name
        nothing (or another tool's event)."""
        try:
            with tracefs() as root:
                return (root / "events" / self.group / name).is_dir()
        except (OSError, KernelEventsUnavailable):
            return True  # unknowable now: the perf event's open says

    def own(self, event: str) -> bool:
        """Whether ``event`` of kmon's group is one this registry made and keeps."""
        with self.lock:
            return event in self.names

    @contextlib.contextmanager
    def opening(self) -> Iterator[None]:
        """Held while perf events are opened on kmon's uprobes: ``remove_all`` closes them
        after, and none is opened once it ran (an open one keeps its uprobe busy: left behind
        kmon)."""
        with self._busy():
            if self.closed:
                raise KernelEventsUnavailable("kmon is ending: its uprobes are removed")
            yield

    @contextlib.contextmanager
    def _busy(self) -> Iterator[None]:
        """Hold the lock while events are made or perf events opened. An exit signal that
        comes to the holding thread meanwhile (the main thread's handler runs between two of
        its steps: a perf event opened, not yet kept where ``remove_all`` closes it) is
        handled once it let go (``deferring``)."""
        try:
            with self.lock:
                if self.depth == 0:
                    self.busy_in = threading.get_ident()
                self.depth += 1
                try:
                    yield
                finally:
                    self.depth -= 1
                    if self.depth == 0:
                        self.busy_in = None
        finally:
            if self.deferred is not None and self.busy_in is None:
                signum, self.deferred = self.deferred, None
                signal.raise_signal(signum)  # its handler runs now, in the main thread

    def deferring(self, signum: int) -> bool:
        """Whether an exit signal's handler, running in the thread now making events or
        opening perf events, leaves it until that thread let go (kept in ``deferred``)."""
        if self.busy_in != threading.get_ident():
            return False
        self.deferred = signum
        return True

    def remove_all(self) -> None:
        """Close the perf events on them, then remove every event kmon made; idempotent. No
        event is made after it: a sampler thread still running at exit would leave one."""
        with self.lock:  # re-entrant: a second signal may come while the first is handled
            self.closed = True
            closers, self.before_removal = self.before_removal, []
            names, self.names, self.made = self.names, [], {}
            for close in closers:
                close()
            if not names:
                return
            try:
                with tracefs() as root:
                    for name in names:
                        _append(root, f"-:{self.group}/{name}\n", missing_ok=True)
            except (OSError, KernelEventsUnavailable):
                pass  # the next kmon removes them (remove_stale)


def remove_stale() -> int:
    """Remove the uprobe groups of kmon processes that are gone (and the events of kmon's own
    pid its registry did not make, left by an earlier kmon that had the pid), after the private
    tracefs mounts a killed kmon left (``remove_stale_scratch``): the events removed."""
    remove_stale_scratch()
    try:
        with tracefs() as root:
            with open(root / "uprobe_events", encoding="ascii", errors="replace") as handle:
                text = handle.read(MAX_EVENTS_FILE)
            removed = 0
            for line in LINE.finditer(text):
                pid = int(line["pid"])
                mine = pid == os.getpid()
                if mine and _registry is not None and _registry.own(line["event"]):
                    continue
                if mine or not process_running(pid):
                    removed += _append(root, f"-:{line['group']}/{line['event']}\n",
                                       missing_ok=True)
            return removed
    except (OSError, KernelEventsUnavailable):
        return 0


def _append(root: Path, line: str, missing_ok: bool = False) -> int:
    """One command appended to ``uprobe_events`` (never truncated): 1 if it took."""
    fd = os.open(root / "uprobe_events", os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, line.encode())
        return 1
    except OSError as err:
        if missing_ok and err.errno in (2, 16):  # gone already; in use (a live kmon's)
            return 0
        raise KernelEventsUnavailable(f"uprobe_events: {err.strerror}") from err
    finally:
        os.close(fd)


_registry: Uprobes | None = None
_registry_lock = threading.Lock()
_hooked = False


def registry() -> Uprobes:
    """This kmon's one ``Uprobes``, its removal hooked to atexit at its first use (and to the
    signals, from the main thread: ``hook_exit_signals``)."""
    global _registry
    with _registry_lock:
        if _registry is None:
            _registry = Uprobes()
            atexit.register(_registry.remove_all)
        if threading.current_thread() is threading.main_thread():
            hook_exit_signals()
        return _registry


def hook_exit_signals() -> None:
    """Remove kmon's uprobes when a signal ends it (from the main thread, once: the command
    line calls it at start, since the samplers may make the uprobes on other threads)."""
    global _hooked
    if _hooked:
        return
    _hooked = True
    for sig in EXIT_SIGNALS:
        signal.signal(sig, _on_signal(signal.getsignal(sig)))


def _on_signal(previous) -> Callable:
    """A handler doing what the signal did before: kmon's own handler (which ends in an
    orderly exit, atexit's removal included, or goes on: ``kmon serve``'s reload); else,
    where the signal would end kmon at once, removing the uprobes first."""

    def handle(signum, frame) -> None:
        if _registry is not None and _registry.deferring(signum):
            return
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            if _registry is not None:
                _registry.remove_all()
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    return handle
