"""librdkafka statistics left in the kmon spool by the agent of a process.

Every record is validated here, once: what leaves this module has the types
the rest of kmon relies on, and a record that does not is a SpoolError that
names the file.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeGuard

import psutil

from kmon.sources.clients import spool

# Statistics older than this are stale: the client was closed, or has not
# served its callbacks (poll) for a long while.
STALE_AFTER_MS = 60_000
STALE_INTERVALS = 5

_BROKER_INTS = {"nodeid": -1, "txbytes": 0, "rxbytes": 0, "tx": 0, "rx": 0, "outbuf_cnt": 0,
                "waitresp_cnt": 0, "txidle": -1, "rxidle": -1, "connects": 1}
_BROKER_STRS = ("nodename", "source", "state")
_COUNTER_FIELDS = ("bytes_sent", "bytes_received", "last_sent_ms", "last_recv_ms")
_GROUP_STRS = ("state", "join_state")
# librdkafka cgrp name -> GroupStats field
_GROUP_INTS = {"stateage": "state_age_ms", "rebalance_age": "rebalance_age_ms",
               "rebalance_cnt": "rebalance_count", "assignment_size": "assignment_size"}


@dataclass(frozen=True)
class SocketCounters:
    """A socket's kernel counters, read by the agent when the statistics arrived."""

    bytes_sent: int | None
    bytes_received: int | None
    last_sent_ms: int | None
    last_recv_ms: int | None


@dataclass(frozen=True)
class GroupStats:
    """A consumer's group membership, from the ``cgrp`` object of its statistics."""

    state: str  # e.g. up, wait-coord, wait-broker
    join_state: str  # e.g. steady, wait-join, wait-sync
    state_age_ms: int
    rebalance_age_ms: int
    rebalance_count: int
    assignment_size: int  # partitions currently assigned to this consumer


@dataclass
class ClientStats:
    """The latest statistics of one librdkafka client instance."""

    instance: str  # librdkafka handle name, e.g. rdkafka#consumer-2
    client_id: str
    type: str
    config: dict[str, str]  # the agent's redacted summary
    brokers: dict[str, dict]  # validated broker entries, by librdkafka broker name
    written_ms: int
    path: Path
    stats_lag_ms: int = 0  # statistics made this long before they were written
    sockets_at_stats: dict[int, SocketCounters] = field(default_factory=dict)  # by inode
    group: GroupStats | None = None  # consumers in a group only

    def config_ms(self, key: str) -> int | None:
        """A millisecond setting of the client's configuration, if set and a number from 0
        to MAX_COUNTER (the spool's own word: one past it would overflow the rows' limits,
        their JSON and the close rules' arithmetic)."""
        try:
            value = int(self.config[key])
        except (KeyError, ValueError):
            return None
        return value if 0 <= value <= MAX_COUNTER else None

    def age_ms(self, now_ms: int) -> int:
        """Time since the agent wrote these statistics."""
        return max(0, now_ms - self.written_ms)

    def stats_age_ms(self, now_ms: int) -> int:
        """Time since librdkafka made these statistics."""
        return self.age_ms(now_ms) + self.stats_lag_ms

    def is_stale(self, now_ms: int) -> bool:
        interval = self.config_ms("statistics.interval.ms") or 1000
        return self.age_ms(now_ms) > max(STALE_AFTER_MS, STALE_INTERVALS * interval)


def spool_dirs(process: psutil.Process) -> list[Path]:
    """Where the agent of ``process`` may have written, most likely first."""
    candidates: list[Path] = []
    if os.environ.get(spool.ENV_DIR):
        candidates.append(Path(os.environ[spool.ENV_DIR]))
    try:
        target_env = process.environ().get(spool.ENV_DIR)
    except (psutil.AccessDenied, psutil.ZombieProcess, OSError):
        target_env = None
    if target_env:
        candidates.append(Path(target_env))
    uid = process.uids().real
    candidates.append(spool.default_dir(uid, env={}))
    fallback = spool.fallback_dir(uid)
    if fallback is not None:
        candidates.append(fallback)
    return list(dict.fromkeys(candidates))


@dataclass
class SpoolReading:
    """What the agent of one process left in the spool."""

    stats: list[ClientStats]  # every client instance's latest statistics
    notices: list[str]  # spool directories skipped as not the user's own, files left unread
    clients_created: int | None = None  # client instances made since the process started


def read_client_stats(process: psutil.Process, proc_start: float, owner_uid: int,
                      directories: list[Path], since_ms: int | None = None) -> SpoolReading:
    """Statistics of every instrumented client of ``process`` (run by ``owner_uid``), how
    many clients it created, and notices for spool directories that are not the user's
    own (skipped). With ``since_ms`` (epoch ms: the poll's start), a spool directory is
    listed once for every process the poll reads (``spool.read_records``).

    Records left by an earlier process with the same pid are ignored.
    Raises spool.SpoolError for a corrupt or unsafe spool file.
    """
    found: dict[str, ClientStats] = {}
    reading = SpoolReading([], [])
    for directory in directories:
        try:
            taken = spool.read_records(directory, process.pid, owner_uid,
                                       None if since_ms is None else since_ms * 1_000_000)
        except spool.SpoolUntrusted as err:
            reading.notices.append(f"no statistics from there: {err}")
            continue
        if taken.skipped:
            reading.notices.append(taken.skipped)
        for path, record in taken.records:
            if "stats" not in record:
                created = parse_client_count(path, record)
                if _same_process(record, proc_start):
                    reading.clients_created = max(created, reading.clients_created or 0)
                continue
            stats = parse_record(path, record)
            if not _same_process(record, proc_start):
                continue
            current = found.get(stats.instance)
            if current is None or stats.written_ms > current.written_ms:
                found[stats.instance] = stats
    reading.stats = sorted(found.values(), key=lambda c: c.instance)
    return reading


def parse_client_count(path: Path, record: dict) -> int:
    """The validated count of a ``<pid>-clients.json`` record."""
    _number(path, record, "proc_start")
    created = record.get("clients_created")
    if not _is_int(created, 0):
        raise _corrupt(path, "clients_created is not a count")
    return created


def _same_process(record: dict, proc_start: float) -> bool:
    return abs(record["proc_start"] - proc_start) <= 1.0


def _corrupt(path: Path, what: str) -> spool.SpoolError:
    return spool.SpoolError(f"spool file {path} is corrupt ({what})")


MAX_COUNTER = 2**63 - 1  # what Parquet's int64 and the kernel's counters hold
INT32 = (-(2**31), 2**31 - 1)  # Kafka node ids


def _is_int(value: object, low: int = -1, high: int = MAX_COUNTER) -> TypeGuard[int]:
    """A whole number within [low, high] (bools are not numbers here)."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _number(path: Path, record: dict, key: str, default: float | None = None) -> float:
    value = record.get(key, default)
    if (not (_is_int(value, -MAX_COUNTER) or isinstance(value, float))
            or not math.isfinite(value) or abs(value) > MAX_COUNTER):
        raise _corrupt(path, f"{key} is not a number within range")
    return value


def parse_record(path: Path, record: dict) -> ClientStats:
    """A validated ClientStats from one spool record; SpoolError naming the bad field."""
    _number(path, record, "proc_start")
    stats = record["stats"]
    config = record.get("config", {})
    if not isinstance(config, dict):
        raise _corrupt(path, "config is not an object")
    names = [stats.get(k, "") for k in ("name", "client_id", "type")]
    if not all(isinstance(n, str) for n in names) or not isinstance(record.get("client_type"),
                                                                     (str, type(None))):
        raise _corrupt(path, "client names are not strings")
    return ClientStats(
        instance=names[0] or path.stem, client_id=names[1],
        type=record.get("client_type") or names[2] or "unknown",
        config={str(k): str(v) for k, v in config.items()},
        brokers=_brokers(path, stats.get("brokers", {})),
        written_ms=int(_number(path, record, "written_ms")),
        path=path,
        stats_lag_ms=(0 if record.get("stats_lag_ms") is None
                      else int(_number(path, record, "stats_lag_ms"))),
        sockets_at_stats=_socket_counters(path, record.get("sockets")),
        group=_group(path, stats.get("cgrp")),
    )


def _brokers(path: Path, raw: object) -> dict[str, dict]:
    if not isinstance(raw, dict):
        raise _corrupt(path, "brokers is not an object")
    brokers = {}
    for name, entry in raw.items():
        if not isinstance(entry, dict):
            raise _corrupt(path, f"broker {name!r} is not an object")
        clean: dict = {}
        for key, default in _BROKER_INTS.items():
            clean[key] = entry.get(key, default)
            if not _is_int(clean[key], *(INT32 if key == "nodeid" else (-1, MAX_COUNTER))):
                raise _corrupt(path, f"broker {name!r} {key} is not a whole number in range")
        for key in _BROKER_STRS:
            clean[key] = entry.get(key, "")
            if not isinstance(clean[key], str):
                raise _corrupt(path, f"broker {name!r} {key} is not a string")
        rtt = entry.get("rtt", {})
        avg = rtt.get("avg", 0) if isinstance(rtt, dict) else None
        if (not (_is_int(avg) or isinstance(avg, float)) or not math.isfinite(avg)
                or not -1 <= avg <= MAX_COUNTER):
            raise _corrupt(path, f"broker {name!r} rtt is not a window of numbers")
        clean["rtt_avg_us"] = avg
        brokers[name] = clean
    return brokers


def _socket_counters(path: Path, raw: object) -> dict[int, SocketCounters]:
    if raw is None:
        return {}
    if not isinstance(raw, list) or not all(isinstance(s, dict) for s in raw):
        raise _corrupt(path, "sockets is not a list of objects")
    counters = {}
    for entry in raw:
        values = [entry.get(k) for k in _COUNTER_FIELDS]
        if not _is_int(entry.get("inode"), 0) or not all(v is None or _is_int(v, 0)
                                                         for v in values):
            raise _corrupt(path, "socket counters are not whole numbers")
        counters[entry["inode"]] = SocketCounters(*values)
    return counters


def _group(path: Path, raw: object) -> GroupStats | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise _corrupt(path, "cgrp is not an object")
    values: dict = {}
    for key in _GROUP_STRS:
        values[key] = raw.get(key, "")
        if not isinstance(values[key], str):
            raise _corrupt(path, f"cgrp {key} is not a string")
    for key, name in _GROUP_INTS.items():
        values[name] = raw.get(key, 0)
        if not _is_int(values[name], -1):
            raise _corrupt(path, f"cgrp {key} is not a whole number in range")
    return GroupStats(**values)
