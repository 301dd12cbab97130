"""The cluster behind ``kmon watch``: periodic metadata with backoff, and the panels' numbers.

``ClusterWatcher`` refreshes brokers and consumer groups; a failed
refresh keeps the last good view and retries after 1 s, 2 s, 4 s, ... The pure
functions below merge that view with a snapshot of the local clients.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kmon.errors import UserError
from kmon.model import ClientInstance, Role, Snapshot
from kmon.sources.brokers.admin import (
    BrokerInfo,
    ClusterMetadata,
    ClusterState,
    ClusterUnreachable,
    GroupInfo,
    admin_client,
    fetch_cluster,
    fetch_metadata,
)
from kmon.sources.brokers.reachability import why_unreachable

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

SOURCE_CLUSTER = "cluster"
SOURCE_LOCAL = "local clients"


@dataclass(frozen=True)
class ClusterView:
    """What is known of the cluster: the last good refresh, and how the latest went."""

    bootstrap: str
    brokers: tuple[BrokerInfo, ...] = ()
    broker_idle_ms: int | None = None  # the brokers' connections.max.idle.ms, as described
    groups: tuple[GroupInfo, ...] | None = None  # None: not (yet) listed by the cluster
    groups_error: str | None = None  # why groups are missing, in whole or in part
    error: str | None = None  # why the latest refresh failed; None after a success
    fetched_at: int | None = None  # epoch ms of the last successful refresh
    attempts: int = 0
    failures: int = 0

    @property
    def metadata(self) -> ClusterMetadata:
        """The brokers as ClusterMetadata, e.g. for their endpoints."""
        return ClusterMetadata(self.bootstrap, self.brokers, None, self.broker_idle_ms)


class ClusterWatcher:
    """Refreshes a ClusterView every ``refresh_s``, backing off after failures.

    ``refresh`` blocks (up to a few ``timeout_s``); call it from a worker
    thread when ``due()`` says so. ``view`` is replaced whole, never mutated. A refresh
    the cluster did not answer says why, as ``kmon ps -b`` does (``why_unreachable``), in
    the view's ``error``.
    """

    def __init__(self, bootstrap: str, properties: dict[str, str], timeout_s: float = 5.0,
                 refresh_s: float = 30.0, max_backoff_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic, name: str | None = None) -> None:
        self.name = name or bootstrap
        self.properties = dict(properties)
        self.timeout_s = timeout_s
        self.refresh_s = refresh_s
        self.max_backoff_s = max_backoff_s
        self.clock = clock
        self.view = ClusterView(bootstrap)
        self._admin: AdminClient | None = None
        self._next_at = clock()
        self._failed_in_row = 0
        self._lock = threading.Lock()

    def due(self, early: bool = False) -> bool:
        """True when the next attempt is due and none is under way; with ``early``, also
        before it is due, unless the last attempt failed (its backoff stands)."""
        return not self._lock.locked() and (
            self.clock() >= self._next_at or (early and not self._failed_in_row))

    @property
    def next_retry_in_s(self) -> float | None:
        """Seconds until the next retry after a failure; None while refreshes succeed."""
        if not self._failed_in_row:
            return None
        return max(0.0, self._next_at - self.clock())

    def refresh(self) -> ClusterView:
        """Ask the cluster now; the new view (the last good data, on failure)."""
        with self._lock:
            view = self.view
            try:
                if self._admin is None:
                    self._admin = admin_client(view.bootstrap, self.properties)
                state = fetch_cluster(self._admin, view.bootstrap, self.timeout_s)
            except ClusterUnreachable as err:
                self._failed_in_row += 1
                delay = min(self.max_backoff_s, 2.0 ** (self._failed_in_row - 1))
                self._next_at = self.clock() + delay
                told = unanswered(self.name, view.bootstrap, self.properties, self.timeout_s,
                                  err)
                self.view = replace(view, error=told,
                                    attempts=view.attempts + 1, failures=view.failures + 1)
                return self.view
            self._failed_in_row = 0
            self._next_at = self.clock() + self.refresh_s
            self.view = replace(
                view, brokers=state.metadata.brokers, broker_idle_ms=state.metadata.broker_idle_ms,
                groups=state.groups, groups_error=state.groups_error, error=None,
                fetched_at=int(time.time() * 1000), attempts=view.attempts + 1)
            return self.view


def unanswered(name: str, bootstrap: str, properties: dict[str, str], timeout_s: float,
               err: ClusterUnreachable) -> str:
    """Why a cluster did not answer, and what to try next (``why_unreachable``); a
    configuration librdkafka refused, as it said it."""
    told = " ".join(str(err).split())
    if "did not answer" not in told:
        return told
    return why_unreachable(name, bootstrap, properties, timeout_s, told)


def ask_cluster(name: str, bootstrap: str, properties: dict[str, str], timeout_s: float,
                groups: bool = False) -> ClusterState:
    """The cluster's metadata, with its groups when ``groups`` (blocking: a command's
    setup); ClusterUnanswered saying why it did not answer."""
    try:
        if groups:
            return fetch_cluster(admin_client(bootstrap, properties), bootstrap, timeout_s)
        return ClusterState(fetch_metadata(bootstrap, properties, timeout_s), None, None)
    except ClusterUnreachable as err:
        raise ClusterUnanswered(unanswered(name, bootstrap, properties, timeout_s, err)) from err


class ClusterUnanswered(UserError):
    """A cluster the user named did not answer (or its configuration was refused)."""


@dataclass(frozen=True)
class GroupRow:
    """One consumer group on the dashboard's groups panel."""

    group_id: str
    state: str | None  # the cluster's state, else the local clients' own (librdkafka cgrp)
    join_state: str | None  # the local clients' join state (cgrp join_state)
    coordinator_id: int | None
    members: int | None  # as the cluster counts them; None when it does not say
    local_members: int  # members on this host: described there, or instrumented here
    source: str  # SOURCE_CLUSTER or SOURCE_LOCAL


def groups_view(cluster_view: ClusterView, snapshot: Snapshot | None) -> list[GroupRow]:
    """One row per consumer group: the cluster's groups, and those of the local clients.

    A group's local members are those the cluster describes on one of this host's
    addresses (its clients' own ends), or, where more, the instrumented clients in it: an
    uninstrumented consumer is a member all the same."""
    local: dict[str, list[ClientInstance]] = {}
    here: set[str] = set()
    for process in snapshot.processes if snapshot is not None else ():
        here.update(conn.local.rpartition(":")[0].strip("[]") for conn in process.connections
                    if conn.local)
        for client in process.clients:
            if client.group_id:
                local.setdefault(client.group_id, []).append(client)
    rows = {}
    for group in cluster_view.groups or ():
        members = local.get(group.group_id, [])
        described = sum(m.host.lstrip("/") in here for m in group.members or ())
        rows[group.group_id] = GroupRow(
            group_id=group.group_id, state=group.state,
            join_state=_agreed(c.group_join_state for c in members),
            coordinator_id=group.coordinator_id,
            members=None if group.members is None else len(group.members),
            local_members=max(len(members), described), source=SOURCE_CLUSTER)
    for group_id, members in local.items():
        if group_id not in rows:
            coordinators = Counter(c.group_coordinator_id for c in members
                                   if c.group_coordinator_id is not None)
            rows[group_id] = GroupRow(
                group_id=group_id, state=_agreed(c.group_state for c in members),
                join_state=_agreed(c.group_join_state for c in members),
                coordinator_id=coordinators.most_common(1)[0][0] if coordinators else None,
                members=None, local_members=len(members), source=SOURCE_LOCAL)
    return [rows[g] for g in sorted(rows)]


def _agreed(values: Iterable[str | None]) -> str | None:
    """The one value the clients report, or all of them ("up/wait-coord") when they differ."""
    distinct = sorted({v for v in values if v})
    return "/".join(distinct) or None


def broker_connection_counts(snapshot: Snapshot) -> dict[int, Counter[Role]]:
    """Per broker id, the local connections that reach it, by role."""
    counts: dict[int, Counter[Role]] = {}
    for process in snapshot.processes:
        for conn in process.connections:
            if conn.broker_id is not None:
                counts.setdefault(conn.broker_id, Counter())[conn.role] += 1
    return counts


def groups_coordinated(group_rows: Iterable[GroupRow]) -> Counter[int]:
    """Per broker id, how many of the groups it coordinates."""
    return Counter(r.coordinator_id for r in group_rows if r.coordinator_id is not None)
