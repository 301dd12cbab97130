"""A watched JVM as the sampler gathers it: its JMX helper process and its client log follower.

One ``JvmSource`` per JVM owns the long-lived JMX helper (started at the first read, stopped
by ``close`` or when the source is collected) and the follower of the client log; ``read``
hands over the newest JMX reading and the log lines read since the last read;
``helper_locals``, read after the JVM's sockets, the local endpoints of the JMX helpers'
connections to the JVM, its own and other kmon commands' (never the user's): every view hides
the same sockets.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from kmon.sources.jvm.java_log import JavaLogEvent, LogFollower
from kmon.sources.jvm.jmx import JmxReading, JmxSource, JmxUnavailable, helpers_of
from kmon.sources.kernel.sockets import Endpoint, SocketReader

FIRST_READING_S = 20.0  # the first read waits this long for the helper's first reading
JMX_INTERVAL_MS = 500  # how often the helper reads the MBeans
LOG_CATCH_UP_POLLS = 64  # reads of the log's budget per read, to catch up with a long log


@dataclass(frozen=True)
class JvmReading:
    """What the JVM's sources told at one poll."""

    jmx_wanted: bool
    readings: tuple[JmxReading, ...] = ()  # new JMX readings, oldest first (the last is current)
    jmx_problem: str | None = None  # why JMX cannot be had
    # the JMX helpers' connections to the JVM (this kmon's and other kmon commands'), read
    # after the JVM's sockets (``JvmSource.helper_locals``)
    helper_locals: frozenset[Endpoint] = frozenset()
    has_log: bool = False
    log_events: list[JavaLogEvent] = field(default_factory=list)  # read since the last poll
    log_problem: str | None = None
    log_unparsed: int = 0  # connection lines in a format kmon does not read, so far

    @property
    def current(self) -> JmxReading | None:
        """The newest JMX reading, if any."""
        return self.readings[-1] if self.readings else None


class JvmSource:
    """The JMX helper and the client log of one JVM."""

    def __init__(self, pid: int, client_log: Path | None, jmx: bool,
                 reader: SocketReader) -> None:
        self.pid = pid
        self.reader = reader
        self._jmx_wanted = jmx
        self._jmx: JmxSource | None = None
        self._stop_jmx: weakref.finalize | None = None
        self._jmx_problem: str | None = None
        self._follower = LogFollower(client_log, from_start=True) if client_log else None

    def read(self) -> JvmReading:
        """The newest JMX reading (the first read waits for JMX) and the new log lines; read
        just before the sockets, so that both tell of the same moment."""
        readings = self._readings()
        follower = self._follower
        return JvmReading(
            jmx_wanted=self._jmx_wanted, readings=readings, jmx_problem=self._jmx_problem,
            has_log=follower is not None,
            log_events=self._log_events(),
            log_problem=follower.problem if follower else None,
            log_unparsed=follower.unparsed if follower else 0)

    def close(self) -> None:
        """Stop the JMX helper and let go of the log; idempotent."""
        if self._stop_jmx is not None:
            self._stop_jmx()
        if self._follower is not None:
            self._follower.close()

    def _readings(self) -> tuple[JmxReading, ...]:
        if not self._jmx_wanted or self._jmx_problem is not None:
            return ()
        try:
            if self._jmx is None:
                self._jmx = JmxSource(self.pid, interval_ms=JMX_INTERVAL_MS)
                self._stop_jmx = weakref.finalize(self, self._jmx.close)
                try:
                    first = self._jmx.wait_first(FIRST_READING_S)
                except JmxUnavailable:
                    latest = self._jmx.latest()  # slow (None), or failed (raises)
                    return () if latest is None else (latest,)
                # a second reading shows which counters move: the sign of a live connection
                second = self._jmx.wait_newer(first.ts_ms, 4 * JMX_INTERVAL_MS / 1000)
                return (first,) if second is None else (first, second)
            latest = self._jmx.latest()
            return () if latest is None else (latest,)
        except JmxUnavailable as err:
            self._jmx_problem = str(err)
            if self._stop_jmx is not None:
                self._stop_jmx()
            return ()

    def _log_events(self) -> list[JavaLogEvent]:
        follower = self._follower
        if follower is None:
            return []
        events: list[JavaLogEvent] = []
        for _ in range(LOG_CATCH_UP_POLLS):
            lines = follower.parsed + follower.unparsed + follower.ignored
            events.extend(follower.poll())
            if follower.parsed + follower.unparsed + follower.ignored == lines:
                break
        return events

    def helper_locals(self) -> frozenset[Endpoint]:
        """The local endpoints of the JMX helpers' sockets, read after the JVM's own: a helper's
        connect completes before the JVM accepts, so every helper socket the JVM's list holds
        is found (read before, one accepted in between showed as the JVM's own connection,
        in whichever view polled then)."""
        helpers = helpers_of(self.pid)
        if self._jmx is not None and self._jmx_problem is None:
            helpers.add(self._jmx.helper_pid)
        found: set[Endpoint] = set()
        for helper in helpers:
            try:
                found.update(s.local for s in self.reader.sockets_of(helper))
            except (psutil.Error, OSError):
                continue
        return frozenset(found)
