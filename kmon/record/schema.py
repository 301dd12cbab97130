"""The recorded tables, schema version 4. Documented in docs/recording.md.

Version 4 adds the ``findings`` table: one row per finding (kmon.evidence.findings) of a
process in each poll, with its reason, since when, what kmon saw, its evidence as JSON
and the fix. Older recordings have no such table (read as no rows).

Version 3 adds to ``events`` the exact open and close times of a close the
kernel's TCP events timed (``opened_ms``, ``closed_ms``), and the ``lives``
table: one row per connection those events followed from its connect to its
close, however short-lived, failed connects (``connect_failed``) and
connections the broker refused (``per_ip_rejected``) among them. Version 1 and
2 files lack those columns and that table (read as nulls and no rows).

Version 2 adds to ``events`` why each connection closed (``closed_by``,
``reason``, ``idle_before_ms``, ``lifetime_ms`` and its totals) and the
``churn`` events' ``pattern``, ``rate`` and ``window_s``; version 1 files,
which lack those columns, are still read (the columns are null).

Files live under ``ROOT/<table>/date=YYYY-MM-DD/host=NAME/``; the ``date`` and
``host`` columns come from those directory names (Spark's partition
discovery), so the files themselves do not hold them.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pyarrow as pa

from kmon.model import Event, Snapshot

SCHEMA_VERSION = 4
READABLE_VERSIONS = (1, 2, 3, 4)
TABLES = ("snapshots", "events", "sessions", "lives", "findings")

SNAPSHOTS = pa.schema([
    ("schema_version", pa.int32()),
    ("session_id", pa.string()),
    ("ts_ms", pa.int64()),  # UTC epoch ms of the poll
    ("pid", pa.int32()),
    ("process_name", pa.string()),
    ("client", pa.string()),  # librdkafka instance name / Java client id; null if unpaired
    ("client_id", pa.string()),
    ("client_type", pa.string()),  # producer, consumer, admin
    ("key", pa.string()),  # stable identity of the connection within its process
    ("role", pa.string()),  # bootstrap, coordinator, broker, unknown
    ("node_id", pa.int64()),  # Java convention
    ("broker_id", pa.int32()),
    ("local", pa.string()),
    ("remote", pa.string()),
    ("state", pa.string()),  # TCP state
    ("idle_ms", pa.int64()),
    ("idle_limit_ms", pa.int64()),
    ("reap_in_ms", pa.int64()),
    ("bytes_sent", pa.int64()),
    ("bytes_received", pa.int64()),
    ("requests_sent", pa.int64()),
    ("requests_received", pa.int64()),
    ("in_flight", pa.int32()),
    ("rtt_ms", pa.float64()),
    ("tcp_rtt_ms", pa.float64()),
    ("broker_name", pa.string()),
    ("evidence_role", pa.string()),
    ("evidence_idle", pa.string()),
    ("confidence", pa.float64()),
])

EVENTS = pa.schema([
    ("schema_version", pa.int32()),
    ("session_id", pa.string()),
    ("ts_ms", pa.int64()),
    ("kind", pa.string()),  # opened, closed, state_change, close_wait, near_reap, ...
    ("pid", pa.int32()),
    ("client", pa.string()),
    ("key", pa.string()),
    ("role", pa.string()),
    ("node_id", pa.int64()),
    ("broker_id", pa.int32()),
    ("remote", pa.string()),
    ("detail", pa.string()),
    # schema 2: closed events (kmon.engine.closes)
    ("closed_by", pa.string()),  # client, broker, unknown
    ("reason", pa.string()),  # client_idle_reap, broker_idle_reap, middlebox_idle_drop, ...
    ("idle_before_ms", pa.int64()),
    ("lifetime_ms", pa.int64()),
    ("bytes_sent", pa.int64()),
    ("bytes_received", pa.int64()),
    ("requests_sent", pa.int64()),
    ("requests_received", pa.int64()),
    # schema 2: churn events (kmon.engine.churn)
    ("pattern", pa.string()),  # client_per_message, idle_reap_cycle, reconnect_storm, fd_leak
    ("rate", pa.float64()),  # per minute
    ("window_s", pa.int32()),
    # schema 3: a close the kernel's TCP events timed (UTC epoch ms)
    ("opened_ms", pa.int64()),
    ("closed_ms", pa.int64()),  # its first FIN or RST
])
# the columns schema 3 added, by table: a version 1 or 2 file lacks these
ADDED_IN_V3 = {"events": ("opened_ms", "closed_ms")}
# the columns schema 2 added, by table: a version 1 file lacks these too
ADDED_IN_V2 = {"events": tuple(EVENTS.names[EVENTS.names.index("closed_by"):
                                            EVENTS.names.index("opened_ms")])}

LIVES = pa.schema([  # schema 3
    ("schema_version", pa.int32()),
    ("session_id", pa.string()),
    ("pid", pa.int32()),  # the process whose connect() opened it
    ("local", pa.string()),
    ("remote", pa.string()),
    ("opened_ms", pa.int64()),  # its connect (UTC epoch ms, exact)
    ("closed_ms", pa.int64()),  # its first FIN or RST
    ("closed_by", pa.string()),  # client, broker, unknown
    ("ending", pa.string()),  # connect_failed, per_ip_rejected, or null for an ordinary close
])

FINDINGS = pa.schema([  # schema 4
    ("schema_version", pa.int32()),
    ("session_id", pa.string()),
    ("ts_ms", pa.int64()),  # UTC epoch ms of the poll
    ("pid", pa.int32()),
    ("process_name", pa.string()),
    ("reason", pa.string()),  # fd_near_limit, duplicate_client_id, ...
    ("since_ms", pa.int64()),  # when it was first raised (UTC epoch ms)
    ("detail", pa.string()),
    ("evidence_json", pa.string()),  # its evidence, a JSON object
    ("fix", pa.string()),
])

SESSIONS = pa.schema([
    ("schema_version", pa.int32()),
    ("session_id", pa.string()),
    ("user", pa.string()),
    ("kmon_version", pa.string()),
    ("started_ms", pa.int64()),
    ("stopped_ms", pa.int64()),  # null while running or after a crash
    ("interval_ms", pa.int64()),
    # [{"pid", "process_name", "name", "client_id", "type", "config", "group_id"}], config redacted
    ("clients_json", pa.string()),
])

SCHEMAS = {"snapshots": SNAPSHOTS, "events": EVENTS, "sessions": SESSIONS, "lives": LIVES,
           "findings": FINDINGS}


def partition_date(ts_ms: int) -> str:
    """The ``date=`` partition (UTC) of a timestamp."""
    return datetime.fromtimestamp(ts_ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d")


def snapshot_rows(snapshot: Snapshot, session_id: str) -> list[dict]:
    """One row per connection of every process in ``snapshot``."""
    rows = []
    for process in snapshot.processes:
        clients = {c.name: c for c in process.clients}
        for conn in process.connections:
            client = clients.get(conn.client) if conn.client else None
            rows.append({
                "schema_version": SCHEMA_VERSION, "session_id": session_id,
                "ts_ms": snapshot.ts_ms, "pid": process.pid, "process_name": process.name,
                "client": conn.client, "client_id": client.client_id if client else None,
                "client_type": client.type if client else None, "key": conn.key,
                "role": conn.role.value, "node_id": conn.node_id, "broker_id": conn.broker_id,
                "local": conn.local, "remote": conn.remote, "state": conn.state,
                "idle_ms": conn.idle_ms, "idle_limit_ms": conn.idle_limit_ms,
                "reap_in_ms": conn.reap_in_ms, "bytes_sent": conn.bytes_sent,
                "bytes_received": conn.bytes_received, "requests_sent": conn.requests_sent,
                "requests_received": conn.requests_received, "in_flight": conn.in_flight,
                "rtt_ms": conn.rtt_ms, "tcp_rtt_ms": conn.tcp_rtt_ms,
                "broker_name": conn.broker_name,
                "evidence_role": conn.evidence.get("role"),
                "evidence_idle": conn.evidence.get("idle"), "confidence": conn.confidence,
            })
    return rows


def event_rows(events: list[Event], session_id: str) -> list[dict]:
    """One row per event (the close and churn columns null where they don't apply)."""
    added = dict.fromkeys(ADDED_IN_V2["events"] + ADDED_IN_V3["events"])
    return [{**added, **{k: v for k, v in e.to_dict().items() if k in added},
             "schema_version": SCHEMA_VERSION, "session_id": session_id, "ts_ms": e.ts_ms,
             "kind": e.kind.value, "pid": e.pid, "client": e.client, "key": e.key,
             "role": e.role.value if e.role else None, "node_id": e.node_id,
             "broker_id": e.broker_id, "remote": e.remote, "detail": e.detail}
            for e in events]


def life_rows(snapshot: Snapshot, session_id: str) -> list[dict]:
    """One row per connection the kernel's events followed to its close in this poll."""
    return [{"schema_version": SCHEMA_VERSION, "session_id": session_id, "pid": life.pid,
             "local": life.local, "remote": life.remote, "opened_ms": life.opened_ms,
             "closed_ms": life.closed_ms, "closed_by": life.closed_by, "ending": life.ending}
            for life in snapshot.lives]


def finding_rows(snapshot: Snapshot, session_id: str) -> list[dict]:
    """One row per finding of every process in ``snapshot``."""
    return [{"schema_version": SCHEMA_VERSION, "session_id": session_id,
             "ts_ms": snapshot.ts_ms, "pid": process.pid, "process_name": process.name,
             "reason": f.reason, "since_ms": f.since_ms, "detail": f.detail,
             "evidence_json": json.dumps(f.evidence, sort_keys=True), "fix": f.fix}
            for process in snapshot.processes for f in process.findings]


def clients_json(snapshot: Snapshot) -> list[dict]:
    """The client instances seen in ``snapshot``, with their redacted configuration."""
    return [{"pid": p.pid, "process_name": p.name, "name": c.name, "client_id": c.client_id,
             "type": c.type, "config": c.config, "group_id": c.group_id}
            for p in snapshot.processes for c in p.clients]


def session_row(session_id: str, user: str, kmon_version: str, started_ms: int,
                stopped_ms: int | None, interval_ms: int, clients: list[dict]) -> dict:
    """The one row describing a recording session."""
    return {"schema_version": SCHEMA_VERSION, "session_id": session_id, "user": user,
            "kmon_version": kmon_version, "started_ms": started_ms, "stopped_ms": stopped_ms,
            "interval_ms": interval_ms, "clients_json": json.dumps(clients, sort_keys=True)}
