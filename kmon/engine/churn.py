"""Connection churn worth a look: a client per message, idle-reap cycles, reconnect storms,
file-descriptor leaks, connect failures and connections the broker refused at once.

``ChurnWatch.observe`` is fed each poll's views and events (the ``closed``
events carry who closed each connection and why) and returns ``churn``
events. Where the kernel's own TCP events run (``take_lives``), a process's
openings and closes are counted from them exactly, however short-lived, and
its failed connects and refused connections are raised too. Every window is
bounded; a pattern is reported at most once per window for a process, and a
steady client never raises one.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Collection, Iterable
from contextlib import suppress

from kmon.engine.connection_lives import REJECTED_WITHIN_MS, KernelLife
from kmon.model import Churn, ChurnThresholds, Event, EventKind, ProcessView

IDLE_REAPS = frozenset({"client_idle_reap", "broker_idle_reap", "middlebox_idle_drop"})
REOPEN_WITHIN_MS = 15 * 60_000  # a reaped broker opened again this soon is a reap cycle
CYCLE_MEMORY_MS = 60 * 60_000  # reap cycles are counted over the last hour
FD_SAMPLES = 64
RATE_MIN_SPAN_MS = 5_000  # a rate of client creation needs this long a look
MINUTE_MS = 60_000
KERNEL_ENDINGS = {  # a kernel-seen ending -> how its churn event says it
    "per_ip_rejected": "reset by the broker within {ms} ms of connecting, unread (a "
                       "per-IP connection limit refuses connections so)",
    "connect_failed": "connection attempts that never got established"}
# how many in the window make a pattern: a per-IP limit refuses a client again and again,
# where a broker starting up or going down closes one or two fresh connections so
KERNEL_ENDINGS_AT_LEAST = {"per_ip_rejected": 3, "connect_failed": 1}


class ChurnWatch:
    """Churn patterns across the polls of one Monitor."""

    def __init__(self, limits: ChurnThresholds) -> None:
        self.limits = limits
        self.opened: dict[int, deque[int]] = defaultdict(deque)  # pid -> open times
        self.closed: dict[int, deque[int]] = defaultdict(deque)  # pid -> close times
        self.short: dict[int, deque[int]] = defaultdict(deque)  # those closed short-lived
        self.reaped: dict[tuple[int, int], int] = {}  # (pid, broker) -> last idle reap
        self.cycles: dict[tuple[int, int], deque[int]] = defaultdict(deque)
        self.broker_opens: dict[int, deque[tuple[int, int]]] = defaultdict(deque)  # (ts, pid)
        self.broker_drops: dict[int, deque[tuple[int, int]]] = defaultdict(deque)  # (ts, pid)
        self.fds: dict[int, deque[tuple[int, int]]] = defaultdict(
            lambda: deque(maxlen=FD_SAMPLES))
        self.created: dict[int, deque[tuple[int, int]]] = defaultdict(deque)  # (ts, count)
        self.reported: dict[tuple[int, str], int] = {}  # (pid, pattern) -> when
        self.first_seen: dict[int, int] = {}  # pid -> when its openings were first counted
        self.exact: set[int] = set()  # processes whose opens and closes the kernel counts
        self.endings: dict[tuple[int, str], deque[tuple[int, str]]] = defaultdict(deque)

    def take_lives(self, opened: Iterable[KernelLife], closed: Iterable[KernelLife]) -> None:
        """Count openings and closes from the kernel's events (exact, for every connection
        however short-lived), with failed connects and refused connections."""
        for life in opened:
            self.exact.add(life.pid)
            self.opened[life.pid].append(int(life.opened_ms))
        for life in closed:
            self.exact.add(life.pid)
            if life.ending is not None:  # a failed connect is no client made per message
                with suppress(ValueError):
                    self.opened[life.pid].remove(int(life.opened_ms))
                self.endings[(life.pid, life.ending)].append((int(life.closed_ms or 0),
                                                              life.where()))
            else:
                self._closed(life.pid, int(life.closed_ms or 0), life.lifetime_ms or 0)

    def _closed(self, pid: int, ts_ms: int, lifetime_ms: int) -> None:
        self.closed[pid].append(ts_ms)
        if lifetime_ms <= self.limits.short_lived_ms:
            self.short[pid].append(ts_ms)

    def last_minute(self, pid: int, ts_ms: int) -> tuple[int, int] | None:
        """(opened, closed) by ``pid`` in the last minute as the kernel counted them, failed
        connects and refusals included; None when the kernel does not count its connections."""
        if pid not in self.exact:
            return None
        endings = sum(_recent([t for t, _ in self.endings.get((pid, pattern), ())], ts_ms,
                              MINUTE_MS) for pattern in KERNEL_ENDINGS)
        opened = _recent(self.opened.get(pid, ()), ts_ms, MINUTE_MS)
        closed = _recent(self.closed.get(pid, ()), ts_ms, MINUTE_MS)
        return opened + endings, closed + endings

    def observe(self, ts_ms: int, views: Iterable[ProcessView], events: Iterable[Event],
                fd_counts: dict[int, int | None]) -> list[Event]:
        """The churn events this poll raises (a reconnect storm: processes whose connection to
        a broker the broker closed, reconnecting to it within the storm window of each
        other)."""
        for event in events:
            self._take(event)
        out = []
        for view in views:
            if view.clients_created is not None:  # the agent counts the clients made
                out += self._clients_created(ts_ms, view.pid, view.clients_created)
            else:
                out += self._client_per_message(ts_ms, view.pid)
            out += self._reap_cycle(ts_ms, view.pid)
            out += self._kernel_endings(ts_ms, view.pid)
            out += self._fd_leak(ts_ms, view.pid, fd_counts.get(view.pid))
        out += self._storms(ts_ms)
        self._forget(ts_ms, {v.pid for v in views})
        return out

    def _take(self, event: Event) -> None:
        counted = event.pid in self.exact  # the kernel counts its opens and closes
        if event.kind is EventKind.OPENED:
            if not counted:
                self.opened[event.pid].append(event.ts_ms)
            if event.broker_id is not None:
                self.broker_opens[event.broker_id].append((event.ts_ms, event.pid))
                reaped = self.reaped.pop((event.pid, event.broker_id), None)
                if reaped is not None and event.ts_ms - reaped <= REOPEN_WITHIN_MS:
                    self.cycles[(event.pid, event.broker_id)].append(event.ts_ms)
        elif event.kind is EventKind.CLOSED and event.close is not None:
            lifetime = event.close.lifetime_ms
            if not counted:
                self._closed(event.pid, event.ts_ms, 1 << 62 if lifetime is None else lifetime)
            if event.close.reason in IDLE_REAPS and event.broker_id is not None:
                self.reaped[(event.pid, event.broker_id)] = event.ts_ms
            # dropped: by the broker, or gone with no closing state seen (as a broker's drop
            # the client answers at once is, told ``unknown`` without the kernel's events)
            if event.close.closed_by != "client" and event.broker_id is not None:
                self.broker_drops[event.broker_id].append((event.ts_ms, event.pid))

    def _client_per_message(self, ts_ms: int, pid: int) -> list[Event]:
        limits = self.limits
        watched_ms = ts_ms - self.first_seen.setdefault(pid, ts_ms)  # a window not yet full
        if watched_ms < RATE_MIN_SPAN_MS:
            return []
        opened = _recent(self.opened[pid], ts_ms, limits.window_ms)
        closed = _recent(self.closed[pid], ts_ms, limits.window_ms)
        short = _recent(self.short[pid], ts_ms, limits.window_ms)
        per_minute = opened * 60_000 / min(limits.window_ms, watched_ms)
        if per_minute < limits.opened_per_minute or short * 2 < closed or not closed:
            return []
        return self._report(ts_ms, pid, "client_per_message", per_minute,
                            f"{per_minute:.0f} connections opened a minute, {short} of "
                            f"{closed} closed within {limits.short_lived_ms // 1000}s")

    def _clients_created(self, ts_ms: int, pid: int, count: int | None) -> list[Event]:
        """Client per message from the agent's count of client instances: exact, where the
        connections of each client live too briefly (a few ms) for any poll to see."""
        if count is None:
            return []
        samples = self.created[pid]
        samples.append((ts_ms, count))
        while samples and ts_ms - samples[0][0] > self.limits.window_ms:
            samples.popleft()
        span = ts_ms - samples[0][0]
        if span < RATE_MIN_SPAN_MS:
            return []
        made = count - samples[0][1]
        per_minute = made * 60_000 / span
        if per_minute < self.limits.clients_per_minute:
            return []
        return self._report(ts_ms, pid, "client_per_message", per_minute,
                            f"{per_minute:.0f} client instances created a minute ({made} in "
                            f"{span // 1000}s, {count} since it started)")

    def _kernel_endings(self, ts_ms: int, pid: int) -> list[Event]:
        out = []
        for pattern, wording in KERNEL_ENDINGS.items():
            recent = [(t, where) for t, where in self.endings.get((pid, pattern), ())
                      if ts_ms - t <= self.limits.window_ms]
            if len(recent) >= KERNEL_ENDINGS_AT_LEAST[pattern]:
                rate = len(recent) * 60_000 / self.limits.window_ms
                places = ", ".join(sorted({where for _, where in recent})[:3])
                out += self._report(ts_ms, pid, pattern, rate,
                                    f"{len(recent)} "
                                    f"{wording.format(ms=REJECTED_WITHIN_MS)} ({places})")
        return out

    def _reap_cycle(self, ts_ms: int, pid: int) -> list[Event]:
        out = []
        for (owner, broker), times in self.cycles.items():
            if (owner != pid or len(times) < self.limits.reap_cycles
                    or ts_ms - times[-1] > self.limits.window_ms):  # no cycle lately
                continue
            span_min = max(1.0, (ts_ms - times[0]) / 60_000)
            out += self._report(ts_ms, pid, "idle_reap_cycle", len(times) / span_min,
                                f"broker {broker} reaped idle and reopened {len(times)} times",
                                broker)
        return out

    def _fd_leak(self, ts_ms: int, pid: int, count: int | None) -> list[Event]:
        if count is None:
            return []
        samples = self.fds[pid]
        samples.append((ts_ms, count))
        if ts_ms - samples[0][0] < self.limits.window_ms:
            return []
        counts = [c for _, c in samples]
        growth = counts[-1] - counts[0]
        if growth < self.limits.fd_growth or any(b < a for a, b in zip(counts, counts[1:],
                                                                       strict=False)):
            return []
        minutes = (ts_ms - samples[0][0]) / 60_000
        return self._report(ts_ms, pid, "fd_leak", growth / minutes,
                            f"{growth} file descriptors gained in {minutes:.0f} min, none "
                            "given back")

    def _storms(self, ts_ms: int) -> list[Event]:
        """Processes reconnecting to a broker within the storm window of each other, each
        after that broker dropped it within the last window (a restarted broker is back
        only after its start-up, longer than the storm window)."""
        out = []
        window = self.limits.storm_window_ms
        for broker, opens in self.broker_opens.items():
            dropped: dict[int, int] = {}  # pid -> its first drop in the window
            for t, pid in self.broker_drops.get(broker, ()):
                if ts_ms - t <= self.limits.window_ms:
                    dropped.setdefault(pid, t)
            recent = {pid for t, pid in opens
                      if ts_ms - t <= window and pid in dropped and t >= dropped[pid]}
            if len(recent) >= self.limits.storm_processes:
                out += self._report(ts_ms, 0, "reconnect_storm", float(len(recent)),
                                    f"{len(recent)} processes reconnected to broker {broker} "
                                    f"within {self.limits.storm_window_ms // 1000}s", broker)
        return out

    def _report(self, ts_ms: int, pid: int, pattern: str, rate: float, detail: str,
                broker_id: int | None = None) -> list[Event]:
        last = self.reported.get((pid, pattern))
        if last is not None and ts_ms - last < self.limits.window_ms:
            return []
        self.reported[(pid, pattern)] = ts_ms
        return [Event(ts_ms, EventKind.CHURN, pid, None, detail=f"{pattern}: {detail}",
                      broker_id=broker_id,
                      churn=Churn(pattern, round(rate, 2), self.limits.window_ms // 1000))]

    def _forget(self, ts_ms: int, live: set[int]) -> None:
        """Drop what fell out of every window, and processes no longer watched."""
        keep = max(self.limits.window_ms, self.limits.storm_window_ms, MINUTE_MS)
        for times in self.opened.values():
            while times and ts_ms - times[0] > keep:
                times.popleft()
        for endings in self.endings.values():
            while endings and ts_ms - endings[0][0] > keep:
                endings.popleft()
        for table in (self.closed, self.short):
            for closes in table.values():
                while closes and ts_ms - closes[0] > keep:
                    closes.popleft()
        for by_broker in (self.broker_opens, self.broker_drops):
            for opens in by_broker.values():
                while opens and ts_ms - opens[0][0] > keep:
                    opens.popleft()
        for times in self.cycles.values():
            while times and ts_ms - times[0] > CYCLE_MEMORY_MS:
                times.popleft()
        for by_pid in (self.opened, self.closed, self.short, self.fds, self.created,
                       self.first_seen):
            for pid in [p for p in by_pid if p not in live]:
                del by_pid[pid]
        for cycle in [k for k in self.cycles if k[0] not in live or not self.cycles[k]]:
            del self.cycles[cycle]
        for ending in [k for k in self.endings if k[0] not in live or not self.endings[k]]:
            del self.endings[ending]
        self.exact &= live
        for key in [k for k in self.reaped if k[0] not in live]:
            del self.reaped[key]


def _recent(times: Collection[int], ts_ms: int, span_ms: int) -> int:
    """How many of ``times`` (oldest first, pruned to a little more than ``span_ms``) fall
    within ``span_ms`` of ``ts_ms``: only the stale head is walked."""
    stale = 0
    for t in times:
        if ts_ms - t <= span_ms:
            break
        stale += 1
    return len(times) - stale
