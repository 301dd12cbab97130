"""What the watch screen shows of churn: connections opened and closed in the last minute,
per process and per broker, each process's latest churn pattern, and a live reconnect
storm. Display state fed from the monitor's events; no I/O."""

from __future__ import annotations

from collections import Counter, deque

from kmon.model import Event, EventKind, ProcessView

WINDOW_MS = 60_000  # the "last minute" of the columns
# what a pattern's rate counts, so a rate reads apart from the opened/closed counts beside it
COUNTED = {"idle_reap_cycle": "reaps", "client_per_message": "clients", "fd_leak": "fds",
           "per_ip_rejected": "refusals", "connect_failed": "failed connects"}
STORM_SHOWN_MS = 60_000  # a storm's banner stays this long after its event


class ChurnBoard:
    """Counts over the last minute of events, bounded by that window."""

    def __init__(self) -> None:
        self.recent: deque[Event] = deque()  # opened and closed events of the last minute
        self.counts: Counter[tuple[int, EventKind]] = Counter()  # the same, by (pid, kind)
        self.patterns: dict[int, Event] = {}  # pid -> its latest churn event
        self.storm: Event | None = None

    def add(self, events: list[Event]) -> None:
        for event in events:
            if event.kind in (EventKind.OPENED, EventKind.CLOSED):
                self.recent.append(event)
                self.counts[event.pid, event.kind] += 1
            elif event.kind is EventKind.CHURN and event.churn is not None:
                if event.churn.pattern == "reconnect_storm":
                    self.storm = event
                else:
                    self.patterns[event.pid] = event

    def forget(self, now_ms: int) -> None:
        """Drop what fell out of the window."""
        while self.recent and now_ms - self.recent[0].ts_ms > WINDOW_MS:
            event = self.recent.popleft()
            self.counts[event.pid, event.kind] -= 1
            if not self.counts[event.pid, event.kind]:
                del self.counts[event.pid, event.kind]

    def per_process(self, view: ProcessView) -> tuple[int, int]:
        """(opened, closed) in the last minute by the process: the kernel's exact counts
        where it counts them (connections no poll saw included), else the polls' events."""
        if view.opened_1m is not None and view.closed_1m is not None:
            return view.opened_1m, view.closed_1m
        return self.counts[view.pid, EventKind.OPENED], self.counts[view.pid, EventKind.CLOSED]

    def per_broker(self) -> dict[int, tuple[int, int]]:
        """broker id -> (opened, closed by the broker) in the last minute."""
        opened: Counter[int] = Counter()
        dropped: Counter[int] = Counter()
        for e in self.recent:
            if e.broker_id is None:
                continue
            if e.kind is EventKind.OPENED:
                opened[e.broker_id] += 1
            elif e.close is not None and e.close.closed_by == "broker":
                dropped[e.broker_id] += 1
        return {b: (opened[b], dropped[b]) for b in opened.keys() | dropped.keys()}

    def pattern(self, pid: int, now_ms: int) -> str:
        """The pattern of ``pid``'s churn event within the window, or '': its name, its rate
        (what it counts, a minute) and the broker it is about, e.g. "idle reap cycle: 2.1
        reaps/min (broker 2)"."""
        event = self.patterns.get(pid)
        if event is None or now_ms - event.ts_ms > WINDOW_MS:
            return ""
        churn = event.churn
        counted = COUNTED.get(churn.pattern, "")
        broker = "" if event.broker_id is None else f" (broker {event.broker_id})"
        return (f"{churn.pattern.replace('_', ' ')}: {churn.rate:g}"
                f"{' ' + counted if counted else ''}/min{broker}")

    def storm_banner(self, now_ms: int) -> str:
        """The live storm's words, or '' when none happened within STORM_SHOWN_MS."""
        if self.storm is None or now_ms - self.storm.ts_ms > STORM_SHOWN_MS:
            return ""
        return f"reconnect storm: {self.storm.detail.partition(': ')[2]}"
