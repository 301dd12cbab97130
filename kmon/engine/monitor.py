"""The poll loop: snapshots of the watched processes, diffed into events.

Memory is bounded however long it runs: the last ``max_events`` events are
kept, and of each open connection what its close story needs; a snapshot is the
caller's to keep or drop.
"""

from __future__ import annotations

import platform
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import replace

from kmon.engine.churn import ChurnWatch
from kmon.engine.closes import SocketLife, in_words, story
from kmon.engine.connection_lives import KernelLife
from kmon.engine.findings import FindingWatch
from kmon.engine.host_churn import HostTimeWaits
from kmon.engine.kernel_watch import KernelWatch
from kmon.engine.sampler import ProcessGone, ProcessSampler, SampleError, read_ahead
from kmon.model import (
    ChurnThresholds,
    CloseStory,
    Connection,
    Event,
    EventKind,
    Opening,
    ProcessView,
    Snapshot,
    Thresholds,
)
from kmon.sources.brokers.dns import parse_endpoint
from kmon.sources.clients.spool import SpoolError
from kmon.sources.kernel.closing_sockets import closing_states
from kmon.sources.kernel.proc_fds import open_fd_count
from kmon.sources.kernel.sockets import Endpoint, TcpSocket
from kmon.tcp_state import TcpState
from kmon.units import format_duration

NEAR_REAP_FRACTION = Thresholds.idle_warning
MAX_WHY = 300  # characters of a failure's message kept in a notice (its text may be anyone's)
FD_COUNT_EVERY_MS = 5000  # open fds are counted this often: a leak takes minutes to show
# the kernel's events are fed to the lives at most this often within a poll (a host's
# hundreds of samplers each ask what the process held when each of their sockets opened)
FEED_EVERY_S = 0.005


def near_reap(conn: Connection, fraction: float) -> bool:
    """True once a connection has been idle for ``fraction`` of its idle limit."""
    return (conn.idle_ms is not None and conn.idle_limit_ms is not None
            and conn.idle_ms >= fraction * conn.idle_limit_ms)


def role_words(conn: Connection) -> str:
    """``broker 2``, ``bootstrap -1``, or ``unknown`` where no node id is known."""
    return conn.role.value + ("" if conn.node_id is None else f" {conn.node_id}")


def diff(before: ProcessView, after: ProcessView, ts_ms: int,
         fraction: float = NEAR_REAP_FRACTION,
         stories: dict[tuple[int, str], CloseStory] | None = None) -> list[Event]:
    """The events that turn ``before`` into ``after`` (the same process); ``stories`` tell
    who closed each closed connection and why, by (pid, key)."""
    old = {c.key: c for c in before.connections}  # what is left of it closed
    events: list[Event] = []

    def event(kind: EventKind, conn: Connection, detail: str,
              close: CloseStory | None = None) -> None:
        events.append(Event(ts_ms, kind, after.pid, conn.key, conn.role, conn.node_id,
                            conn.remote, detail, conn.client, conn.broker_id, close=close))

    for conn in after.connections:  # their keys are unique within the process
        prev = old.pop(conn.key, None)
        if prev is None:
            event(EventKind.OPENED, conn, f"{conn.role.value} {conn.state}")
            if conn.state == TcpState.CLOSE_WAIT:
                event(EventKind.CLOSE_WAIT, conn, "peer closed; client has not")
            continue
        if conn.state != prev.state:
            kind = (EventKind.CLOSE_WAIT if conn.state == TcpState.CLOSE_WAIT
                    else EventKind.STATE_CHANGE)
            event(kind, conn, f"{prev.state} -> {conn.state}")
        if conn.role != prev.role or conn.node_id != prev.node_id:
            event(EventKind.ROLE_CHANGE, conn,
                  f"{role_words(prev)} -> {role_words(conn)}")
        idle_ms, limit_ms = conn.idle_ms, conn.idle_limit_ms  # near_reap(conn), inline: a row
        if (idle_ms is not None and limit_ms is not None  # of every socket, every poll
                and idle_ms >= fraction * limit_ms and not near_reap(prev, fraction)):
            event(EventKind.NEAR_REAP, conn,
                  f"idle {format_duration(conn.idle_ms)} of its "
                  f"{format_duration(conn.idle_limit_ms)} limit")
    for key, conn in old.items():
        close = (stories or {}).get((after.pid, key))
        told = (in_words(close, conn.idle_limits) if close is not None
                else f"{conn.role.value} after {conn.state}")
        event(EventKind.CLOSED, conn, told, close)
    return events


class Monitor:
    """Polls samplers; keeps a bounded history of events.

    A process that exits, or whose evidence can no longer be read, is dropped
    with a ``process_exit`` or ``process_error`` event; the others go on. Each
    closed connection's event says who closed it and why (kmon.engine.closes),
    and connection patterns worth a look become ``churn`` events
    (kmon.engine.churn).
    """

    def __init__(self, samplers: Iterable[ProcessSampler], max_events: int = 5000,
                 near_reap_fraction: float = NEAR_REAP_FRACTION,
                 churn: ChurnThresholds | None = None,
                 kernel: KernelWatch | None = None,
                 host_closes: HostTimeWaits | None = None) -> None:
        self.samplers: dict[int, ProcessSampler] = {}
        self.host = platform.node()
        self.events: deque[Event] = deque(maxlen=max_events)
        self.fraction = near_reap_fraction
        self.last_views: dict[int, ProcessView] = {}
        self.last_loss = ""  # why the most recently dropped process was dropped
        self.lives: dict[int, dict[str, SocketLife]] = {}  # what each open socket went through
        self.churn = ChurnWatch(churn or ChurnThresholds())
        self.findings = FindingWatch()
        self._fds_counted_ms = 0
        self._fds_counted: set[int] = set()  # the processes counted since the last due count
        self.kernel = kernel  # the kernel's TCP events, where kmon may read them
        self._watched: set[int] = set()  # the samplers' processes, as this poll began
        self._fed_s = 0.0  # when the kernel's events were last fed (monotonic)
        self._lost_seen = 0  # the records the kernel had lost at the last poll
        self.host_closes = host_closes  # without them: the host's unowned closes, counted
        self.host_closed_1m: int | None = None  # as the last poll counted them
        for sampler in samplers:
            self.add(sampler)

    def add(self, sampler: ProcessSampler) -> None:
        """Watch one more process (a no-op for one already watched): it asks the kernel's
        events what it held when each of its sockets opened."""
        if self.samplers.setdefault(sampler.pid, sampler) is sampler and self.kernel:
            sampler.losses = self._openings

    def _openings(self, pid: int, sockets: list[TcpSocket], now_ms: int
                  ) -> dict[tuple[Endpoint, Endpoint], Opening | None]:
        kernel = self.kernel
        assert kernel is not None  # (given only with one)
        now = time.monotonic()
        if now - self._fed_s > FEED_EVERY_S:  # after the sockets were read: their opens in
            self._hand_over(kernel.feed(self._watched))
            self._fed_s = now
        return kernel.openings(pid, sockets, now_ms)

    def _hand_over(self, lives: Iterable[KernelLife]) -> None:
        """Each closed life's wire to the process whose connect opened it: the host's one
        capture hands a process the segments of the sockets its polls show, and one that
        lived between two polls is read as the process's own capture reads it (its close
        told from the same evidence: kmon.sources.packets.host_wire)."""
        opened: dict[int, list[tuple[tuple[str, int], tuple[str, int]]]] = {}
        for life in lives:
            if life.local is not None and life.remote is not None:
                opened.setdefault(life.pid, []).append((life.local, life.remote))
        for pid, sockets in opened.items():
            sampler = self.samplers.get(pid)
            if sampler is not None and sampler.wire_source is not None:
                sampler.wire_source.opened(sockets)

    def remove(self, pid: int) -> None:
        """Stop watching ``pid`` quietly (it turned out not to be a client)."""
        sampler = self.samplers.pop(pid, None)
        if sampler is not None:
            sampler.close()
        self.last_views.pop(pid, None)
        self.lives.pop(pid, None)

    @property
    def all_exited(self) -> bool:
        """True once every watched process has been dropped."""
        return not self.samplers and bool(self.last_loss)

    def poll(self) -> tuple[Snapshot, list[Event]]:
        """One snapshot of every live process, and what changed since the last one."""
        ts_ms = int(time.time() * 1000)
        views: list[ProcessView] = []
        events: list[Event] = []
        changes: list[tuple[ProcessView, ProcessView]] = []  # (before, after) to diff
        self._watched = set(self.samplers)
        read_ahead(self.samplers.values())
        for pid, sampler in list(self.samplers.items()):
            previous = self.last_views.get(pid)
            try:
                view = sampler.sample(ts_ms)
            except (SampleError, SpoolError) as err:
                self._lose(pid, err, ts_ms, events, previous, changes)
                continue
            # the kernel failed us this once, or kmon failed on what this one process gave
            # (its command line, its log): show the last view, and go on with the others
            except Exception as err:  # noqa: BLE001 - one process never blinds kmon to all
                why = str(err) if isinstance(err, OSError) else (
                    f"kmon could not read it ({type(err).__name__}: {err})")[:MAX_WHY]
                if previous is None:
                    self._lose(pid, SampleError(why), ts_ms, events, previous, changes)
                    continue
                view = replace(previous, notices=[*previous.notices,
                                                  f"not refreshed this time: {why}"])
                views.append(view)
                continue
            if previous is not None:
                changes.append((previous, view))
            self.last_views[pid] = view
            views.append(view)
        lives = []
        if self.kernel is not None:
            opened, closed, told = self.kernel.poll(views, ts_ms)
            self._tell_connects(opened, self.kernel.lost_any)
            self._hand_over(closed)  # read by the next poll, as the kernel's story waits
            lives = [life.recorded() for life in closed]
            self.churn.exact.update(view.pid for view in views)  # even those opening nothing
            self.churn.take_lives(opened, closed)
            events.extend(told)
        stories = self._close_stories(changes, ts_ms)
        for before, after in changes:
            events.extend(diff(before, after, ts_ms, self.fraction, stories))
        self._remember(views, ts_ms)
        fd_counts = self._fd_counts(ts_ms)
        events.extend(self.churn.observe(ts_ms, views, events, fd_counts))
        self.findings.observe(ts_ms, views, fd_counts, lives)
        for view in views:
            view.opened_1m, view.closed_1m = self.churn.last_minute(view.pid, ts_ms) or (
                None, None)
        snapshot = Snapshot(ts_ms=ts_ms, host=self.host, processes=views,
                            host_closed_1m=self._host_closes(views), lives=lives)
        self.events.extend(events)
        return snapshot, events

    def _tell_connects(self, opened: list[KernelLife], lost: int) -> None:
        """Tell the samplers' socket readers which processes connected since the last poll,
        and whether the kernel may have missed some (it lost records since the last poll:
        ``lost`` in all; a process's sockets from before its first poll are read whole)."""
        pids = {life.pid for life in opened}
        complete, self._lost_seen = lost == self._lost_seen, lost
        for reader in {id(s.reader): s.reader for s in self.samplers.values()}.values():
            reader.connects(pids, complete)

    def close(self) -> None:
        """Release every sampler's resources (JMX helpers); polling is over."""
        for sampler in self.samplers.values():
            sampler.close()
        if self.kernel is not None:
            self.kernel.close()

    def _close_stories(self, changes: list[tuple[ProcessView, ProcessView]],
                       ts_ms: int) -> dict[tuple[int, str], CloseStory]:
        """Who closed each connection gone since the last poll, asking the kernel once."""
        closed = []
        for before, after in changes:
            lives, still_open = self.lives.get(before.pid, {}), {c.key for c in after.connections}
            closed += [(before.pid, key, lives[key], after.wire_closes)
                       for key in lives.keys() - still_open]
        pairs = {(pid, key): pair for pid, key, life, _ in closed
                 if (pair := endpoints(life.last)) is not None}
        kernel = closing_states(set(pairs.values()))
        if self.host_closes is not None:
            self.host_closes.own(pairs.values())
        exact = self.kernel.life_of if self.kernel else lambda _: None
        first_close = self.kernel.first_close_of if self.kernel else lambda _: None
        stories = {}
        for pid, key, life, wire in closed:
            pair = pairs.get((pid, key))
            wire_close = wire.get((life.last.local or "", life.last.remote or ""))
            stories[(pid, key)] = story(life, kernel.get(pair) if pair else None, ts_ms,
                                        wire_close, exact(pair), first_close(pair))
        return stories

    def _remember(self, views: list[ProcessView], ts_ms: int) -> None:
        """Each open socket's life, with this poll's row, kept in place (not made again for
        every socket each poll); those of the sockets gone (their closes told by
        ``_close_stories``) dropped."""
        for view in views:
            lives = self.lives.get(view.pid)
            if lives is None:
                lives = self.lives[view.pid] = {}
            for conn in view.connections:
                life = lives.get(conn.key)
                if life is None:
                    life = lives[conn.key] = SocketLife(ts_ms, ts_ms, conn)
                life.seen(conn, ts_ms)
            if len(lives) != len(view.connections):  # some are gone
                for key in lives.keys() - {conn.key for conn in view.connections}:
                    del lives[key]
        for pid in self.lives.keys() - self.samplers.keys():  # gone: their closes are told
            del self.lives[pid]

    def _host_closes(self, views: list[ProcessView]) -> int | None:
        """The host's closes to the watched processes' brokers that none of them made."""
        if self.host_closes is None:
            return None
        ports = {int(port) for view in views for remote in view.summary.remotes
                 if (port := remote.rpartition(":")[2]).isdigit()}
        self.host_closed_1m = self.host_closes.unowned(ports)
        return self.host_closed_1m

    def _fd_counts(self, ts_ms: int) -> dict[int, int | None]:
        """Each process's open fds, every FD_COUNT_EVERY_MS; between, only those of the
        processes watched since the last count (a one-shot look counts every process)."""
        due = ts_ms - self._fds_counted_ms >= FD_COUNT_EVERY_MS
        if due:
            self._fds_counted_ms = ts_ms
        pids = self.samplers.keys() if due else self.samplers.keys() - self._fds_counted
        self._fds_counted = set(self.samplers) if due else self._fds_counted | pids
        return {pid: open_fd_count(pid) for pid in pids}

    def _lose(self, pid: int, err: Exception, ts_ms: int, events: list[Event],
              previous: ProcessView | None,
              changes: list[tuple[ProcessView, ProcessView]]) -> None:
        """Stop watching ``pid``: an exit event and its connections closed, or an error event
        (its connections are not closed: kmon no longer watches them, and a story of their
        close would be made up)."""
        gone = isinstance(err, ProcessGone)
        kind = EventKind.PROCESS_EXIT if gone else EventKind.PROCESS_ERROR
        events.append(Event(ts_ms, kind, pid, None, detail=str(err)))
        if previous is not None and gone:
            changes.append((previous, ProcessView(pid, previous.name, previous.cmdline)))
        self.samplers.pop(pid).close()
        self.last_views.pop(pid, None)
        self.last_loss = str(err)


def endpoints(conn: Connection) -> tuple[Endpoint, Endpoint] | None:
    """A row's (local, remote) endpoints, for the kernel's lookups."""
    local = parse_endpoint(conn.local or "")
    remote = parse_endpoint(conn.remote or "")
    return (local, remote) if local and remote else None
