"""librdkafka statistics left in the kmon spool by the agent of a process."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from kmon import spool

# A record older than this many statistics intervals (plus slack) is stale:
# the client was closed or stopped serving its callbacks.
STALE_INTERVALS = 3
STALE_SLACK_MS = 2000


@dataclass(frozen=True)
class SocketCounters:
    """A socket's kernel counters, read by the agent when the statistics arrived."""

    bytes_sent: int | None
    bytes_received: int | None
    last_sent_ms: int | None
    last_recv_ms: int | None


@dataclass
class ClientStats:
    """The latest statistics of one librdkafka client instance."""

    instance: str  # librdkafka handle name, e.g. rdkafka#consumer-2
    client_id: str
    type: str
    config: dict[str, str]
    stats: dict
    written_ms: int
    path: Path
    stats_lag_ms: int = 0  # statistics made this long before they were written
    sockets_at_stats: dict[int, SocketCounters] = field(default_factory=dict)  # by inode

    def age_ms(self, now_ms: int) -> int:
        """Time since the agent wrote these statistics."""
        return max(0, now_ms - self.written_ms)

    def stats_age_ms(self, now_ms: int) -> int:
        """Time since librdkafka made these statistics."""
        return self.age_ms(now_ms) + self.stats_lag_ms

    def is_stale(self, now_ms: int) -> bool:
        interval = int(self.config.get("statistics.interval.ms", "1000") or 1000)
        return self.age_ms(now_ms) > STALE_INTERVALS * interval + STALE_SLACK_MS

    @property
    def brokers(self) -> dict[str, dict]:
        return self.stats.get("brokers") or {}


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
    candidates.append(spool.default_dir(process.uids().real, env={}))
    return list(dict.fromkeys(candidates))


def read_client_stats(process: psutil.Process, proc_start: float) -> list[ClientStats]:
    """Statistics of every instrumented client of ``process``.

    Records left by an earlier process with the same pid are ignored.
    Raises spool.SpoolError for a corrupt or unsafe spool file.
    """
    found: dict[str, ClientStats] = {}
    for directory in spool_dirs(process):
        for path, record in spool.read_records(directory, process.pid):
            if abs(float(record.get("proc_start", 0)) - proc_start) > 1.0:
                continue
            stats = record["stats"]
            name = str(stats.get("name", path.stem))
            current = found.get(name)
            if current is None or record.get("written_ms", 0) > current.written_ms:
                found[name] = ClientStats(
                    instance=name,
                    client_id=str(stats.get("client_id", "")),
                    type=str(record.get("client_type") or stats.get("type", "unknown")),
                    config={str(k): str(v) for k, v in (record.get("config") or {}).items()},
                    stats=stats,
                    written_ms=int(record.get("written_ms", 0)),
                    path=path,
                    stats_lag_ms=int(record.get("stats_lag_ms") or 0),
                    sockets_at_stats=_socket_counters(record.get("sockets")),
                )
    return sorted(found.values(), key=lambda c: c.instance)


def _socket_counters(raw: list | None) -> dict[int, SocketCounters]:
    if not isinstance(raw, list):
        return {}
    return {int(s["inode"]): SocketCounters(s.get("bytes_sent"), s.get("bytes_received"),
                                            s.get("last_sent_ms"), s.get("last_recv_ms"))
            for s in raw if isinstance(s, dict) and s.get("inode")}
