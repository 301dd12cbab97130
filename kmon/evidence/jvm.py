"""The Java producer of claims: what the JVM's sources read (JMX, the client log) in, claims
about sockets out.

One ``JvmEvidence`` per watched JVM keeps what the readings add up to (the log's node
table, the JMX counters' history, when each socket was first seen); it reads nothing
itself: ``kmon.sources.jvm.jvm_reading`` gathers ``Gathered.jvm``. When JMX cannot be had, a
notice says why and the connections are named from the log and the sockets alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kmon.evidence.claims import Claim, Evidence, Gathered, socket_key
from kmon.evidence.java_log_nodes import NodeTable
from kmon.evidence.jvm_join import join_jvm
from kmon.evidence.jvm_nodes import CounterHistory, jvm_clients, log_brokers
from kmon.evidence.stats_join import JoinSettings
from kmon.sources.jvm.jvm_reading import JvmReading

CLOCK_SLACK_MS = 1000  # log lines this much older than the process are of an earlier run


class JvmEvidence:
    """JMX metrics and the client log of one JVM, joined with its sockets on each sample."""

    def __init__(self, pid: int, start_time: float) -> None:
        self.pid = pid
        self._table = NodeTable()
        self._history = CounterHistory()
        self._first_seen: dict[int, int] = {}
        self._helpers: set[str] = set()  # the JMX helpers' connections to the JVM, by key
        self._not_before_ms = int(start_time * 1000) - CLOCK_SLACK_MS

    def evidence(self, gathered: Gathered, earlier: Mapping[str, Sequence[Claim]]) -> Evidence:
        """Claims about the JVM's sockets, its client instances, and what stands in the way
        (none where fresh librdkafka statistics speak for the process; the readings are
        folded in all the same)."""
        reading = gathered.jvm
        if reading is None:
            return Evidence()
        self._take(reading)
        if gathered.stats:  # librdkafka's statistics speak for the process's sockets
            return Evidence()
        learned = log_brokers(self._table, gathered.resolver)
        known = {**gathered.known, **learned}
        helper = reading.helper_locals
        # a helper's connection stays hidden for its life (an exiting helper's sockets may no
        # longer be readable while the JVM's end is still open)
        hidden = self._helpers = {socket_key(s) for s in gathered.sockets
                                  if s.remote in helper or socket_key(s) in self._helpers}
        sockets = [s for s in gathered.sockets if socket_key(s) not in hidden]
        self._first_seen = {s.inode: self._first_seen.get(s.inode, gathered.now_ms)
                            for s in sockets}
        clients, nodes = jvm_clients(reading.current, self._table, self._history, known,
                                     gathered.resolver, gathered.now_ms)
        settings = JoinSettings(now_ms=gathered.now_ms, broker_idle_ms=gathered.broker_idle_ms)
        pairs = join_jvm(sockets, nodes, settings, self._first_seen)
        return Evidence(claims={socket_key(sockets[i]): c for i, c in pairs.items()},
                        clients=clients, notices=self._notices(reading), learned=learned,
                        hidden=hidden)

    def _take(self, reading: JvmReading) -> None:
        """Fold the new JMX readings and log events in (lines of an earlier run left out)."""
        for jmx in reading.readings:
            self._history.update(jmx)
        for event in reading.log_events:
            if event.ts_ms is None or event.ts_ms >= self._not_before_ms:
                self._table.apply(event)

    def _notices(self, reading: JvmReading) -> list[str]:
        notices = []
        if reading.jmx_problem is not None:
            named = "the client log and sockets" if reading.has_log else (
                "sockets only (--client-log FILE names them from the client's log)")
            notices.append(f"JMX unavailable: {reading.jmx_problem}; connections are named "
                           f"from {named}")
        elif reading.jmx_wanted and reading.current is None:
            notices.append(f"JMX: no reading yet from the helper attached to PID {self.pid}")
        if reading.log_problem:
            notices.append(f"client log: {reading.log_problem}")
        if reading.log_unparsed:
            notices.append(f"client log: {reading.log_unparsed} connection lines in a format "
                           "kmon does not read (counted, skipped)")
        return notices
