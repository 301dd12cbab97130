"""``kmon serve``'s ``cluster`` label: a process's cluster id, never a guess that changes.

A process is labelled by the cluster kmon's own Metadata query to one of its brokers
named (its cluster id). Its series wait while that query is under way, for at most
WAIT_POLLS polls and WAIT_S seconds (a poll or two for a reachable cluster, and never
minutes at a long interval or behind a host's queue of queries); a process kmon cannot ask
about (TLS or SASL listeners, brokers kmon cannot reach) is then ``UNKNOWN``, or with
``-b`` that cluster's id as its metadata named it (else the name ``-b`` gave). Never the
brokers a process happened to reach first, which changed as it reached more; and a process
once named keeps its cluster while it lives, connections or none (a client whose idle
connections were all reaped holds none until it needs a broker again). A process labelled
once never waits again: its series stay while it lives (any query of kmon's under way, for
another process's brokers too, counts as asking for every process).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping

UNKNOWN = "unknown"
WAIT_POLLS = 3
WAIT_S = 10.0


class ClusterNames:
    """Each poll's labels; ``named`` is the cluster ``-b`` names (None: every cluster)."""

    def __init__(self, named: str | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.named, self.clock = named, clock
        self._polls: dict[int, int] = {}  # pid -> polls it has been seen in
        self._first: dict[int, float] = {}  # pid -> when it was first seen
        self._named: dict[int, str] = {}  # pid -> the cluster an answer named, while it lives
        self._labelled: set[int] = set()  # pids labelled at the last call: they wait no more

    def __call__(self, pids: Collection[int], answered: Mapping[int, str],
                 asking: Collection[int]) -> dict[int, str]:
        """The label of every process of ``pids`` that is not waiting: ``answered`` holds
        those kmon's queries named, ``asking`` those whose brokers kmon is asking still."""
        now = self.clock()
        self._polls = {pid: self._polls.get(pid, 0) + 1 for pid in pids}
        self._first = {pid: self._first.get(pid, now) for pid in pids}
        self._named = {pid: answered.get(pid) or self._named[pid] for pid in pids
                       if pid in answered or pid in self._named}
        answered = self._named
        fallback = self.named or UNKNOWN
        labels = {pid: answered.get(pid, fallback) for pid in pids
                  if pid in answered or pid in self._labelled or pid not in asking
                  or self._polls[pid] > WAIT_POLLS or now - self._first[pid] >= WAIT_S}
        self._labelled = set(labels)
        return labels
