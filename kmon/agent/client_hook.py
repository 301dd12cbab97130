"""In-process instrumentation for confluent-kafka (librdkafka) clients.

``instrument(conf)`` returns a client configuration that emits librdkafka
statistics and leaves each one, with a redacted summary of the client's
configuration, in the user's private kmon spool, where ``kmon attach PID``
finds it. An existing ``stats_cb`` keeps receiving every statistics string.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from kmon.agent import spool_writer
from kmon.sources.clients import spool

if TYPE_CHECKING:
    from kmon.sources.kernel.sockdiag import SockDiagReader

DEFAULT_STATS_INTERVAL_MS = 1000
CLIENTS_WRITE_EVERY_MS = 500

# The top-level statistics fields kept in the spool (brokers too, without partitions).
STATS_KEYS = ("name", "client_id", "type", "ts", "time", "age", "cgrp", "eos")

# Only these keys are ever written: a whitelist, so no secret can slip through.
CONFIG_SUMMARY_KEYS = (
    "bootstrap.servers",
    "client.id",
    "group.id",
    "transactional.id",
    "connections.max.idle.ms",
    "metadata.max.age.ms",
    "reconnect.backoff.ms",
    "reconnect.backoff.max.ms",
    "socket.connection.setup.timeout.ms",
    "security.protocol",
    "sasl.mechanism",
    "statistics.interval.ms",
)


def config_summary(conf: dict) -> dict[str, str]:
    """The whitelisted, secret-free part of a client configuration."""
    normalized = {str(k).replace("_", "."): v for k, v in conf.items()}
    return {k: str(normalized[k]) for k in CONFIG_SUMMARY_KEYS if k in normalized}


class _SpoolWriter:
    """Writes one process's statistics records; never raises into the client.

    Thread-safe (each client's callback may run on its own thread) and
    fork-aware: a forked child starts a spool of its own and never removes
    its parent's files.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pid = -1  # set, with the rest, by the first write in this process
        self.failed = False
        self.clients_created = 0
        self.clients_written_ms = 0

    def client_created(self) -> None:
        """Count one more client instance in this process, and leave the count in the spool
        (at most every CLIENTS_WRITE_EVERY_MS): the clients of a process that creates one
        per message live too briefly to be seen, or to emit statistics."""
        with self.lock:
            try:
                if os.getpid() != self.pid:
                    self._start_process()
                self.clients_created += 1
                now_ms = int(time.time() * 1000)
                if self.failed or now_ms - self.clients_written_ms < CLIENTS_WRITE_EVERY_MS:
                    return
                self.clients_written_ms = now_ms
                record = {"format": spool.FORMAT, "pid": self.pid, "proc_start": self.proc_start,
                          "written_ms": now_ms, "clients_created": self.clients_created}
                self.written.add(spool_writer.write_record(
                    self.directory, self.pid, spool.CLIENTS_INSTANCE, json.dumps(record)))
            except Exception as err:  # noqa: BLE001 - instrumentation must never break the client
                self.failed = True
                print(f"kmon agent: client count not spooled ({err}); the client runs on",
                      file=sys.stderr)

    def _start_process(self) -> None:
        self.pid = os.getpid()
        self.clients_created = 0
        self.clients_written_ms = 0
        self.proc_start = _process_start_time()
        self.directory = _spool_directory()
        self.written: set[Path] = set()
        self.socket_reader: SockDiagReader | None = None
        self.sockets_unreadable = False
        self.failed = False
        atexit.register(self.remove_all, self.pid)

    def socket_counters(self) -> list[dict] | None:
        """This process's per-socket kernel counters now, for kmon's join; None if unreadable.

        Read right when the statistics arrive, they let kmon pair each of the
        client's connections with its socket by exact byte counts.
        """
        if self.sockets_unreadable:
            return None
        try:
            if self.socket_reader is None:
                from kmon.sources.kernel.sockdiag import SockDiagReader

                self.socket_reader = SockDiagReader()
            sockets = self.socket_reader.sockets_of(self.pid)
        except Exception:  # noqa: BLE001 - no counters is fine; kmon pairs without them
            self.sockets_unreadable = True
            return None
        return [{"inode": s.inode, "bytes_sent": s.bytes_sent,
                 "bytes_received": s.bytes_received, "last_sent_ms": s.last_sent_ms,
                 "last_recv_ms": s.last_recv_ms} for s in sockets]

    def write(self, stats_json: str, summary: dict[str, str], client_type: str | None) -> None:
        with self.lock:
            try:
                if os.getpid() != self.pid:
                    self._start_process()
                if not self.failed:
                    self._write(stats_json, summary, client_type)
            except Exception as err:  # noqa: BLE001 - instrumentation must never break the client
                self.failed = True
                print(f"kmon agent: statistics not spooled ({err}); the client runs on",
                      file=sys.stderr)

    def _write(self, stats_json: str, summary: dict[str, str], client_type: str | None) -> None:
        stats = json.loads(stats_json)
        instance = str(stats.get("name", "unknown"))
        record = {
            "format": spool.FORMAT,
            "pid": self.pid,
            "proc_start": self.proc_start,
            "written_ms": int(time.time() * 1000),
            "client_type": client_type or stats.get("type", "unknown"),
            "config": summary,
            "stats_lag_ms": _stats_lag_ms(stats),
            "sockets": self.socket_counters(),
            "stats": _connection_stats(stats),
        }
        self.written.add(spool_writer.write_record(self.directory, self.pid, instance,
                                            json.dumps(record)))

    def remove_all(self, owner_pid: int) -> None:
        """At exit: remove this process's files (never a parent's, after a fork)."""
        if os.getpid() != owner_pid:
            return
        for path in self.written:
            with contextlib.suppress(OSError):
                path.unlink()


def _connection_stats(stats: dict) -> dict:
    """The statistics kmon reads: per-broker connection fields, no topics or partitions."""
    kept = {k: stats[k] for k in STATS_KEYS if k in stats}
    kept["brokers"] = {name: {k: v for k, v in broker.items() if k != "toppars"}
                       for name, broker in (stats.get("brokers") or {}).items()}
    return kept


_writer: _SpoolWriter | None = None


def _spool_directory() -> Path:
    """The user's private spool; when another user squatted the default name in /tmp, the
    fallback under the user's home, which kmon also reads (an explicit KMON_SPOOL_DIR
    never falls back)."""
    try:
        return spool_writer.ensure_private_dir(spool.default_dir())
    except spool.SpoolError:
        fallback = spool.fallback_dir(os.getuid())
        if os.environ.get(spool.ENV_DIR) or fallback is None:
            raise
        return spool_writer.ensure_private_dir(fallback)


def _shared_writer() -> _SpoolWriter:
    global _writer
    if _writer is None:
        _writer = _SpoolWriter()
    return _writer


def instrument(conf: dict, client_type: str | None = None) -> dict:
    """Return a copy of ``conf`` that spools librdkafka statistics for kmon.

    ``statistics.interval.ms`` defaults to 1000 unless set (a value of 0 is
    kept: the user turned statistics off). ``client_type`` ("producer",
    "consumer", "admin") names the client where librdkafka cannot tell
    (an AdminClient reports itself as a producer).
    """
    out = dict(conf)
    out.setdefault("statistics.interval.ms", DEFAULT_STATS_INTERVAL_MS)
    user_cb: Callable[[str], None] | None = out.get("stats_cb")
    summary = config_summary(out)
    writer = _shared_writer()
    writer.client_created()

    def stats_cb(stats_json: str) -> None:
        writer.write(stats_json, summary, client_type)
        if user_cb is not None:
            user_cb(stats_json)

    out["stats_cb"] = stats_cb
    return out


def _stats_lag_ms(stats: dict) -> int | None:
    """How long ago librdkafka made these statistics (its ``ts`` is CLOCK_MONOTONIC µs)."""
    made_us = stats.get("ts")
    if not isinstance(made_us, int):
        return None
    lag = (time.monotonic_ns() // 1000 - made_us) // 1000
    return lag if 0 <= lag < 3_600_000 else None


def _process_start_time() -> float:
    import psutil

    return psutil.Process().create_time()
