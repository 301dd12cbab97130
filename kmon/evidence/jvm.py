"""The Java producer of claims: JMX and the client's log in, claims about sockets out.

One `JvmEvidence` per watched JVM owns its long-lived JMX helper (started at
the first sample, stopped by ``close`` or when the evidence is collected) and
the follower of its client log. When JMX cannot be had, a notice says why and
the connections are named from the log and the sockets alone.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path

import psutil

from kmon.evidence.claims import Claim, Evidence, Gathered, socket_key
from kmon.evidence.java_log_nodes import NodeTable
from kmon.evidence.jvm_join import join_jvm
from kmon.evidence.jvm_nodes import CounterHistory, jvm_clients, log_brokers
from kmon.evidence.stats_join import JoinSettings
from kmon.sources.java_log import LogFollower
from kmon.sources.jmx import JmxReading, JmxSource, JmxUnavailable
from kmon.sources.sockets import SocketReader, TcpSocket

FIRST_READING_S = 20.0  # the first sample waits this long for the helper's first reading
JMX_INTERVAL_MS = 500  # how often the helper reads the MBeans
LOG_CATCH_UP_POLLS = 64  # reads of the log's budget per sample, to catch up with a long log
CLOCK_SLACK_MS = 1000  # log lines this much older than the process are of an earlier run



class JvmEvidence:
    """JMX metrics and the client log of one JVM, joined with its sockets on each sample."""

    def __init__(self, pid: int, start_time: float, client_log: Path | None,
                 jmx: bool, reader: SocketReader) -> None:
        self.pid = pid
        self.reader = reader
        self._jmx_wanted = jmx
        self._jmx: JmxSource | None = None
        self._stop_jmx: weakref.finalize | None = None
        self._jmx_problem: str | None = None
        self._follower = LogFollower(client_log, from_start=True) if client_log else None
        self._table = NodeTable()
        self._history = CounterHistory()
        self._first_seen: dict[int, int] = {}
        self._not_before_ms = int(start_time * 1000) - CLOCK_SLACK_MS
        self._current: JmxReading | None = None

    def refresh(self) -> None:
        """Take the newest JMX reading and log lines (the first call waits for JMX);
        called just before the sockets are read, so both tell of the same moment."""
        self._current = self._reading()
        self._read_log()
        if self._current is not None:
            self._history.update(self._current)

    def evidence(self, gathered: Gathered, earlier: Mapping[str, Sequence[Claim]]) -> Evidence:
        """Claims about the JVM's sockets, its client instances, and what stands in the way."""
        reading = self._current
        learned = log_brokers(self._table, gathered.resolver)
        known = {**gathered.known, **learned}
        sockets = self._without_helper(gathered.sockets)
        hidden = {socket_key(s) for s in gathered.sockets} - {socket_key(s) for s in sockets}
        self._first_seen = {s.inode: self._first_seen.get(s.inode, gathered.now_ms)
                            for s in sockets}
        clients, nodes = jvm_clients(reading, self._table, self._history, known,
                                     gathered.resolver, gathered.now_ms)
        settings = JoinSettings(now_ms=gathered.now_ms, broker_idle_ms=gathered.broker_idle_ms)
        pairs = join_jvm(sockets, nodes, settings, self._first_seen)
        return Evidence(claims={socket_key(sockets[i]): c for i, c in pairs.items()},
                        clients=clients, notices=self._notices(reading), learned=learned,
                        hidden=hidden)

    def close(self) -> None:
        """Stop the JMX helper and let go of the log."""
        if self._stop_jmx is not None:
            self._stop_jmx()
        if self._follower is not None:
            self._follower.close()

    def _reading(self) -> JmxReading | None:
        if not self._jmx_wanted or self._jmx_problem is not None:
            return None
        try:
            if self._jmx is None:
                self._jmx = JmxSource(self.pid, interval_ms=JMX_INTERVAL_MS)
                self._stop_jmx = weakref.finalize(self, self._jmx.close)
                try:
                    first = self._jmx.wait_first(FIRST_READING_S)
                except JmxUnavailable:
                    return self._jmx.latest()  # slow (None), or failed (raises)
                # a second reading shows which counters move: the sign of a live connection
                self._history.update(first)
                return self._jmx.wait_newer(first.ts_ms, 4 * JMX_INTERVAL_MS / 1000)
            return self._jmx.latest()
        except JmxUnavailable as err:
            self._jmx_problem = str(err)
            if self._stop_jmx is not None:
                self._stop_jmx()
            return None

    def _read_log(self) -> None:
        follower = self._follower
        if follower is None:
            return
        for _ in range(LOG_CATCH_UP_POLLS):
            lines = follower.parsed + follower.unparsed + follower.ignored
            for event in follower.poll():
                if event.ts_ms is None or event.ts_ms >= self._not_before_ms:
                    self._table.apply(event)
            if follower.parsed + follower.unparsed + follower.ignored == lines:
                return

    def _without_helper(self, sockets: list[TcpSocket]) -> list[TcpSocket]:
        """The JVM's sockets but those of kmon's own JMX helper's connection to it."""
        if self._jmx is None or self._jmx_problem is not None:
            return sockets
        try:
            helper = {s.local for s in self.reader.sockets_of(self._jmx.helper_pid)}
        except (psutil.Error, OSError):
            return sockets
        return [s for s in sockets if s.remote not in helper]

    def _notices(self, reading: JmxReading | None) -> list[str]:
        notices = []
        if self._jmx_problem is not None:
            named = "the client log and sockets" if self._follower else (
                "sockets only (--client-log FILE names them from the client's log)")
            notices.append(f"JMX unavailable: {self._jmx_problem}; connections are named "
                           f"from {named}")
        elif self._jmx_wanted and reading is None:
            notices.append(f"JMX: no reading yet from the helper attached to PID {self.pid}")
        if self._follower is not None:
            if self._follower.problem:
                notices.append(f"client log: {self._follower.problem}")
            if self._follower.unparsed:
                notices.append(f"client log: {self._follower.unparsed} connection lines in "
                               "a format kmon does not read (counted, skipped)")
        return notices
