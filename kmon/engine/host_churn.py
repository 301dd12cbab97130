"""Host-level churn where the kernel's TCP events cannot run: the host's connections to the
brokers closed in the last minute by no process kmon watches.

Linux keeps the 4-tuple of a connection its own side closed first in TIME_WAIT
for 60 s, so the TIME_WAIT table to the brokers' ports is the last minute's
closes on this host. Those of the watched processes' own sockets (as their polls
saw them) are taken out; the rest are a figure for the host, never attributed
to any process: without the kernel's events kmon cannot tell whose they were.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable

from kmon.sources.kernel.closing_sockets import Pair, time_wait_pairs

MAX_OWNED = 16_384  # the watched processes' recent sockets remembered
MAX_PORTS = 64  # the brokers' ports followed (the latest)
TIME_WAIT_S = 60  # how long Linux keeps a TIME_WAIT 4-tuple


class HostTimeWaits:
    """Counts the closes through TIME_WAIT to the brokers' ports that no watched process
    made."""

    def __init__(self, list_pairs: Callable[[Collection[int]], set[Pair]] = time_wait_pairs
                 ) -> None:
        self.list_pairs = list_pairs
        self.owned: OrderedDict[Pair, None] = OrderedDict()  # latest last
        self.ports: OrderedDict[int, None] = OrderedDict()  # the brokers' ports, latest last

    def own(self, pairs: Iterable[Pair]) -> None:
        """Sockets a watched process held: their closes are that process's, not the host's."""
        for pair in pairs:
            self.owned[pair] = None
            self.owned.move_to_end(pair)
        while len(self.owned) > MAX_OWNED:
            self.owned.popitem(last=False)

    def unowned(self, ports: Iterable[int]) -> int:
        """Connections this host closed in the last minute to ``ports`` (and the brokers'
        ports given before), no watched process's."""
        for port in ports:
            self.ports[port] = None
            self.ports.move_to_end(port)
        while len(self.ports) > MAX_PORTS:
            self.ports.popitem(last=False)
        return sum(pair not in self.owned for pair in self.list_pairs(self.ports.keys()))


def in_words(count: int) -> str:
    """The figure as a host-level notice."""
    return (f"host-level: {count} connections to the brokers closed through TIME_WAIT in the "
            f"last {TIME_WAIT_S} s by processes kmon does not watch (not attributed to any)")
