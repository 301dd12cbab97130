"""The findings of each poll (kmon.evidence.findings), dated and carried on the views.

``FindingWatch.observe`` keeps each process's recent open-fd counts and reads the limit on
them when they are counted, keeps its recent marks (kmon.evidence.findings.marks), its
connects that failed lately and the connections it closed itself soon after opening them
(the kernel's TCP events), runs every finder over the poll, and
dates each finding by when it was first raised: a finding that holds from poll to poll keeps
its ``since_ms``.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable, Sequence

from kmon.evidence.findings import FINDERS, Look
from kmon.evidence.findings.marks import MARKS, Mark, mark
from kmon.evidence.findings.rebootstrap import HOLD_MS, VISIT_MS
from kmon.model import ConnectionLife, Finding, ProcessView
from kmon.sources.processes.fd_limits import open_fd_limit

FD_SAMPLES = 32  # open-fd counts kept per process (one every few seconds)
FAILED_SAMPLES = 64  # failed connects kept per process ...
FAILED_WITHIN_MS = 60_000  # ... for this long
SHORT_SAMPLES = 64  # closes soon after the open kept per process, for as long as a
# rebootstrap is named


class FindingWatch:
    """Findings across the polls of one Monitor."""

    def __init__(self) -> None:
        self.fds: dict[int, deque[tuple[int, int]]] = defaultdict(
            lambda: deque(maxlen=FD_SAMPLES))
        self.limits: dict[int, int | None] = {}
        self.marks: dict[int, deque[Mark]] = defaultdict(lambda: deque(maxlen=MARKS))
        self.since: dict[tuple[int, str, str], int] = {}  # (pid, reason, key) -> first raised
        self.failed: dict[int, deque[ConnectionLife]] = defaultdict(
            lambda: deque(maxlen=FAILED_SAMPLES))
        self.short: dict[int, deque[ConnectionLife]] = defaultdict(
            lambda: deque(maxlen=SHORT_SAMPLES))

    def observe(self, ts_ms: int, views: Sequence[ProcessView],
                fd_counts: dict[int, int | None],
                lives: Iterable[ConnectionLife] = ()) -> None:
        """Set each view's findings, newest first; ``fd_counts`` are the open fds counted
        this poll (none between counts), ``lives`` the connections the kernel saw end since
        the last poll."""
        for pid, count in fd_counts.items():
            if count is not None:
                self.fds[pid].append((ts_ms, count))
                self.limits[pid] = open_fd_limit(pid)
        for view in views:
            now, marks = mark(view, ts_ms), self.marks[view.pid]
            if not marks or not marks[-1].same(now):
                marks.append(now)
        for life in lives:
            if life.ending == "connect_failed":
                self.failed[life.pid].append(life)
            elif life.closed_by == "client" and life.closed_ms - life.opened_ms <= VISIT_MS:
                self.short[life.pid].append(life)
        _forget(self.failed, ts_ms - FAILED_WITHIN_MS)
        _forget(self.short, ts_ms - HOLD_MS)
        look = Look(ts_ms, views, self.fds, self.limits, self.marks, self.failed, self.short)
        found: dict[int, list[Finding]] = defaultdict(list)
        since = {}
        for finder in FINDERS:
            for raised in finder(look):
                key = (raised.pid, raised.reason, raised.key)
                since[key] = self.since.get(key, ts_ms)
                found[raised.pid].append(Finding(raised.reason, since[key], raised.detail,
                                                 raised.evidence, raised.fix))
        self.since = since  # a finding gone and back is new again
        for view in views:
            view.findings = sorted(found.get(view.pid, ()), key=lambda f: -f.since_ms)
        alive = {view.pid for view in views}
        for pid in self.fds.keys() - alive:
            del self.fds[pid]
            self.limits.pop(pid, None)
        for pid in self.marks.keys() - alive:
            del self.marks[pid]


def _forget(lives: dict[int, deque[ConnectionLife]], before_ms: int) -> None:
    """Drop the lives closed before ``before_ms``, and the processes left with none."""
    for pid, kept in list(lives.items()):
        while kept and kept[0].closed_ms < before_ms:
            kept.popleft()
        if not kept:
            del lives[pid]
