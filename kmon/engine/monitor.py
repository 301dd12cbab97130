"""The poll loop: snapshots of the watched processes, diffed into events.

Memory is bounded however long it runs: the last ``history`` snapshots and
the last ``max_events`` events are kept, nothing else grows.
"""

from __future__ import annotations

import socket
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import replace

from kmon.engine.sampler import ProcessGone, ProcessSampler, SampleError
from kmon.model import Connection, Event, EventKind, ProcessView, Snapshot, Thresholds
from kmon.sources.spool import SpoolError

NEAR_REAP_FRACTION = Thresholds.idle_warning


def near_reap(conn: Connection, fraction: float) -> bool:
    """True once a connection has been idle for ``fraction`` of its idle limit."""
    return (conn.idle_ms is not None and conn.idle_limit_ms is not None
            and conn.idle_ms >= fraction * conn.idle_limit_ms)


def diff(before: ProcessView, after: ProcessView, ts_ms: int,
         fraction: float = NEAR_REAP_FRACTION) -> list[Event]:
    """The events that turn ``before`` into ``after`` (the same process)."""
    old = {c.key: c for c in before.connections}
    new = {c.key: c for c in after.connections}
    events: list[Event] = []

    def event(kind: EventKind, conn: Connection, detail: str) -> None:
        events.append(Event(ts_ms, kind, after.pid, conn.key, conn.role, conn.node_id,
                            conn.remote, detail, conn.client, conn.broker_id))

    for key, conn in new.items():
        prev = old.get(key)
        if prev is None:
            event(EventKind.OPENED, conn, f"{conn.role.value} {conn.state}")
            if conn.state == "CLOSE_WAIT":
                event(EventKind.CLOSE_WAIT, conn, "peer closed; client has not")
            continue
        if conn.state != prev.state:
            kind = EventKind.CLOSE_WAIT if conn.state == "CLOSE_WAIT" else EventKind.STATE_CHANGE
            event(kind, conn, f"{prev.state} -> {conn.state}")
        if (conn.role, conn.node_id) != (prev.role, prev.node_id):
            event(EventKind.ROLE_CHANGE, conn,
                  f"{prev.role.value}/{prev.node_id} -> {conn.role.value}/{conn.node_id}")
        if near_reap(conn, fraction) and not near_reap(prev, fraction):
            event(EventKind.NEAR_REAP, conn,
                  f"idle {conn.idle_ms} ms of {conn.idle_limit_ms} ms limit")
    for key, conn in old.items():
        if key not in new:
            event(EventKind.CLOSED, conn, f"{conn.role.value} after {conn.state}")
    return events


class Monitor:
    """Polls samplers; keeps a bounded history of snapshots and events.

    A process that exits, or whose evidence can no longer be read, is dropped
    with a ``process_exit`` or ``process_error`` event; the others go on.
    """

    def __init__(self, samplers: Iterable[ProcessSampler], history: int = 600,
                 max_events: int = 5000, near_reap_fraction: float = NEAR_REAP_FRACTION) -> None:
        self.samplers: dict[int, ProcessSampler] = {}
        self.host = socket.gethostname()
        self.snapshots: deque[Snapshot] = deque(maxlen=history)
        self.events: deque[Event] = deque(maxlen=max_events)
        self.fraction = near_reap_fraction
        self.last_views: dict[int, ProcessView] = {}
        self.last_loss = ""  # why the most recently dropped process was dropped
        for sampler in samplers:
            self.add(sampler)

    def add(self, sampler: ProcessSampler) -> None:
        """Watch one more process (a no-op for one already watched)."""
        self.samplers.setdefault(sampler.pid, sampler)

    @property
    def all_exited(self) -> bool:
        """True once every watched process has been dropped."""
        return not self.samplers and bool(self.last_loss)

    def poll(self) -> tuple[Snapshot, list[Event]]:
        """One snapshot of every live process, and what changed since the last one."""
        ts_ms = int(time.time() * 1000)
        views, events = [], []
        for pid, sampler in list(self.samplers.items()):
            previous = self.last_views.get(pid)
            try:
                view = sampler.sample(ts_ms)
            except OSError as err:  # the kernel failed us this once: show the last view
                if previous is None:
                    self._lose(pid, err, ts_ms, events, previous)
                    continue
                view = replace(previous, notices=[*previous.notices,
                                                  f"not refreshed this time: {err}"])
                views.append(view)
                continue
            except (SampleError, SpoolError) as err:
                self._lose(pid, err, ts_ms, events, previous)
                continue
            if previous is not None:
                events.extend(diff(previous, view, ts_ms, self.fraction))
            self.last_views[pid] = view
            views.append(view)
        snapshot = Snapshot(ts_ms=ts_ms, host=self.host, processes=views)
        self.snapshots.append(snapshot)
        self.events.extend(events)
        return snapshot, events

    def close(self) -> None:
        """Release every sampler's resources (JMX helpers); polling is over."""
        for sampler in self.samplers.values():
            sampler.close()

    def _lose(self, pid: int, err: Exception, ts_ms: int, events: list[Event],
              previous: ProcessView | None) -> None:
        """Stop watching ``pid``: an exit or error event, and its connections closed."""
        kind = EventKind.PROCESS_EXIT if isinstance(err, ProcessGone) else EventKind.PROCESS_ERROR
        events.append(Event(ts_ms, kind, pid, None, detail=str(err)))
        if previous is not None:
            events.extend(diff(previous, ProcessView(pid, previous.name, previous.cmdline),
                               ts_ms))
        self.samplers.pop(pid).close()
        self.last_views.pop(pid, None)
        self.last_loss = str(err)
