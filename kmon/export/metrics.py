"""Each watched process's metrics, folded from the host view's snapshots and events.

State is kept per live process only: a process gone from the snapshot takes
its series with it, and nothing is kept per socket, so memory follows what is
open now, not how long kmon has run. Labels carry no connection's address or port.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass, field

from kmon.evidence.findings.marks import coordinators
from kmon.model import Connection, Event, EventKind, ProcessView, Snapshot
from kmon.short_command import short_command
from kmon.sources.processes.fd_limits import open_fd_count, open_fd_limit

# idle age at close: a few small buckets, then the limits that matter (a cloud load
# balancer's 4 min and 350 s, the Java client's 9 min, the broker's 10 min)
IDLE_BUCKETS_S = (1.0, 10.0, 60.0, 240.0, 350.0, 540.0, 600.0, 900.0)
POLL_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

ConnectionLabels = tuple[str, str, str]  # client_id, role, broker_id
MAX_CLIENT_IDS = 100  # client_ids of one process with series of their own; more are "(other)"
MAX_GROUP_IDS = 100  # and group_ids
OTHER = "(other)"
CAPS = {"client_id": MAX_CLIENT_IDS, "group_id": MAX_GROUP_IDS}


class Histogram:
    """Bucket counts over fixed bounds and the sum of the observed values."""

    def __init__(self, bounds: tuple[float, ...] = IDLE_BUCKETS_S) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def copy(self) -> Histogram:
        twin = Histogram(self.bounds)
        twin.counts, twin.total = list(self.counts), self.total
        return twin

    def buckets(self) -> list[tuple[str, int]]:
        """(le, cumulative count) pairs, +Inf last."""
        out, running = [], 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            out.append(("+Inf" if bound == float("inf") else f"{bound:g}", running))
        return out


@dataclass
class ProcessMetrics:
    """One process's current gauges and its counters since kmon first saw it."""

    process: str
    cluster: str
    cmdline: str
    connections: Counter = field(default_factory=Counter)  # (*ConnectionLabels, state)
    idle: dict = field(default_factory=dict)  # ConnectionLabels -> (idle s, limit s, by)
    clients: Counter = field(default_factory=Counter)  # client type -> instances
    clients_created: int | None = None
    coordinators: dict = field(default_factory=dict)  # (client_id, group_id) -> broker_id
    members: dict = field(default_factory=dict)  # the same, uncapped: this poll's only
    coordinator_changes: Counter = field(default_factory=Counter)  # (client_id, group_id)
    opened: Counter = field(default_factory=Counter)  # ConnectionLabels
    closed: Counter = field(default_factory=Counter)  # (*ConnectionLabels, closed_by, reason)
    connect_failures: Counter = field(default_factory=Counter)  # ConnectionLabels
    idle_at_close: dict = field(default_factory=dict)  # role -> Histogram
    churn: Counter = field(default_factory=Counter)  # pattern
    open_fds: int | None = None
    max_fds: int | None = None
    findings: Counter = field(default_factory=Counter)  # reason: this poll's, not summed
    client_ids: dict = field(default_factory=dict)  # instance name -> client_id, this poll
    earlier_ids: dict = field(default_factory=dict)  # ... and the poll before (closes)
    labelled: dict = field(default_factory=lambda: {label: set() for label in CAPS})
    folded: dict = field(default_factory=lambda: {label: set() for label in CAPS})  # this poll


@dataclass
class PollStats:
    """kmon's own polls: how many, how long, how many failed."""

    errors: int = 0
    duration: Histogram = field(default_factory=lambda: Histogram(POLL_BUCKETS_S))
    last_success_s: float | None = None  # UTC epoch seconds
    processes: int = 0  # watched after the last poll
    kernel_events: bool = False  # the kernel's TCP events are read
    kernel_lost: int = 0  # ... and those the kernel dropped (a ring buffer was full)


def _broker_label(broker_id: int | None) -> str:
    return "" if broker_id is None else str(broker_id)


def _seconds(ms: int | None) -> float | None:
    return None if ms is None else ms / 1000.0


class HostMetrics:
    """The latest metrics of every watched process; ``update()`` from the poll thread,
    ``processes()`` from the scrape threads."""

    def __init__(self, count_fds: bool = True) -> None:
        self._lock = threading.Lock()
        self._processes: dict[int, ProcessMetrics] = {}
        self.polls = PollStats()
        self.generation = 0  # changes with every poll, good or failed
        self.count_fds = count_fds
        self.kernel_events = False  # the session reads the kernel's TCP events
        self.kernel_lost = 0  # the kernel's TCP events dropped, every session's

    def processes(self) -> dict[int, ProcessMetrics]:
        """Every live process's metrics (a shallow copy: safe to read while polls go on)."""
        with self._lock:
            return dict(self._processes)

    def poll_stats(self) -> PollStats:
        """A copy of the poll statistics."""
        with self._lock:
            return PollStats(self.polls.errors, self.polls.duration.copy(),
                             self.polls.last_success_s, len(self._processes),
                             self.kernel_events, self.kernel_lost)

    def poll_failed(self) -> None:
        with self._lock:
            self.polls.errors += 1
            self.generation += 1

    def update(self, snapshot: Snapshot, events: list[Event], clusters: dict[int, str],
               poll_s: float) -> None:
        """Fold one poll in: gauges replaced, counters advanced, exited processes dropped."""
        before = self.processes()
        fresh = {view.pid: self._gauges(view, before.get(view.pid),
                                        clusters.get(view.pid, ""))
                 for view in snapshot.processes}
        for event in events:
            metrics = fresh.get(event.pid)
            if metrics is not None:
                _count(metrics, event)
        with self._lock:
            self._processes = fresh
            self.polls.duration.observe(poll_s)
            self.polls.last_success_s = snapshot.ts_ms / 1000.0
            self.generation += 1

    def _gauges(self, view: ProcessView, before: ProcessMetrics | None,
                cluster: str) -> ProcessMetrics:
        """This poll's gauges for ``view``, carrying the counters of ``before``."""
        process = (before.process if before is not None and before.cmdline == view.cmdline
                   else short_command(view.cmdline, view.name) or view.name)
        metrics = ProcessMetrics(process=process, cluster=cluster, cmdline=view.cmdline)
        if before is not None:  # copies: a scrape may be reading the old ones
            for name in ("coordinator_changes", "opened", "closed", "connect_failures",
                         "churn"):
                setattr(metrics, name, type(getattr(before, name))(getattr(before, name)))
            metrics.labelled = {label: set(kept) for label, kept in before.labelled.items()}
            metrics.idle_at_close = {key: hist.copy()
                                     for key, hist in before.idle_at_close.items()}
            metrics.earlier_ids = before.client_ids
        metrics.client_ids = {c.name: c.client_id for c in view.clients}
        for conn in view.connections:
            labels = _labels(metrics, conn.client, conn.role.value, conn.broker_id)
            metrics.connections[labels + (conn.state,)] += 1
            _keep_idlest(metrics.idle, labels, conn)
        metrics.clients.update(c.type for c in view.clients)
        metrics.clients_created = view.clients_created
        metrics.findings.update(f.reason for f in view.findings)
        metrics.members = coordinators(view)
        metrics.coordinators = {_member_labels(metrics, member): broker
                                for member, broker in metrics.members.items()}
        if before is not None:
            for member, broker in metrics.members.items():
                if before.members.get(member, broker) != broker:
                    metrics.coordinator_changes[_member_labels(metrics, member)] += 1
        if self.count_fds:
            metrics.open_fds, metrics.max_fds = open_fd_count(view.pid), open_fd_limit(view.pid)
        return metrics


def _labels(metrics: ProcessMetrics, client: str | None, role: str,
            broker_id: int | None) -> ConnectionLabels:
    """A connection's labels: its client's client.id (bounded per process), role, broker.
    A client that is no instance of the process's was named by the client.id its requests
    carried (the wire): that is its client.id."""
    client_id = (metrics.client_ids.get(client) or metrics.earlier_ids.get(client) or client
                 if client else "")
    return _capped(metrics, "client_id", client_id), role, _broker_label(broker_id)


def _member_labels(metrics: ProcessMetrics, member: tuple[str, str]) -> tuple[str, str]:
    """A group member's (client_id, group_id) labels, each capped."""
    return _capped(metrics, "client_id", member[0]), _capped(metrics, "group_id", member[1])


def _capped(metrics: ProcessMetrics, label: str, value: str) -> str:
    """``value``, or "(other)" once the process has CAPS[label] others of that label (a
    client.id made per instance, a group per run, must not grow the series without end);
    the first values keep their series for the process's life."""
    kept = metrics.labelled[label]
    if value not in kept:
        if len(kept) >= CAPS[label]:
            metrics.folded[label].add(value)
            return OTHER
        kept.add(value)
    return value


def _keep_idlest(idle: dict, labels: ConnectionLabels, conn: Connection) -> None:
    """Keep, per label set, the idlest connection's age and the limit that will reap it."""
    if conn.idle_ms is None:
        return
    seen = idle.get(labels)
    if seen is None or conn.idle_ms / 1000.0 > seen[0]:
        idle[labels] = (conn.idle_ms / 1000.0, _seconds(conn.idle_limit_ms),
                        conn.idle_limit_by or "")


def _count(metrics: ProcessMetrics, event: Event) -> None:
    """Advance the counters one event moves."""
    role = event.role.value if event.role else "unknown"
    labels = _labels(metrics, event.client, role, event.broker_id)
    if event.kind is EventKind.OPENED:
        metrics.opened[labels] += 1
    elif event.kind is EventKind.CLOSED and event.close is not None:
        story = event.close
        metrics.closed[labels + (story.closed_by, story.reason)] += 1
        if story.reason == "connect_failed":
            metrics.connect_failures[labels] += 1
        if story.idle_before_ms is not None:
            metrics.idle_at_close.setdefault(role, Histogram()).observe(
                story.idle_before_ms / 1000.0)
    elif event.kind is EventKind.CHURN and event.churn is not None:
        metrics.churn[event.churn.pattern] += 1
