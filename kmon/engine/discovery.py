"""Finding the local client processes of a cluster, and adding them to a Monitor as they appear.

One class for every caller: ``kmon record --cluster``, the watch screen and
the host view; each picks how often the host's sockets are searched.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection

from kmon.engine.monitor import Monitor
from kmon.engine.sampler import ProcessSampler, SampleError, SamplerSettings
from kmon.sources.kernel.host_sockets import HostClients
from kmon.sources.kernel.sockets import Endpoint, SocketReader
from kmon.sources.packets.host_wire import HostWire
from kmon.sources.processes.own_processes import own_pids


class ClientDiscovery:
    """Adds a sampler for each local process newly connected to the given brokers.

    ``update`` searches at most every ``every_s`` seconds; ``find`` is the
    search (by default the host's sockets on the brokers' ports: HostClients); ``wire``,
    the host's one packet capture, if the samplers share one.
    """

    def __init__(self, reader: SocketReader, settings: SamplerSettings, every_s: float,
                 find: Callable[[Collection[Endpoint]], set[int]] | None = None,
                 wire: HostWire | None = None) -> None:
        self.reader, self.settings, self.every_s = reader, settings, every_s
        self.wire = wire  # the host's one packet capture, shared by the samplers
        self.find = find or HostClients()
        self.next_search = 0.0  # monotonic
        self.notices: list[str] = []

    def update(self, monitor: Monitor, brokers: Collection[Endpoint]) -> None:
        """Search the host when due; new clients join ``monitor`` (never one of kmon's own
        processes: kmon.sources.processes.own_processes)."""
        if time.monotonic() < self.next_search:
            return
        self.next_search = time.monotonic() + self.every_s
        try:
            found = self.find(brokers)
        except OSError as err:  # no permission to list the host's sockets, netlink failed
            self.notices = [str(err)]
            return
        for pid in sorted(found - monitor.samplers.keys() - own_pids()):
            self.add(monitor, pid, quiet=True)

    def add(self, monitor: Monitor, pid: int, quiet: bool = False) -> None:
        """Watch ``pid`` too; a process that cannot be sampled is a notice (or, when
        ``quiet``, skipped: it went away since its socket was listed)."""
        try:
            monitor.add(ProcessSampler(pid, self.reader, self.settings, host_wire=self.wire))
        except SampleError as err:
            if not quiet:
                self.notices = [str(err)]

    def close(self) -> None:
        """Release the search's netlink socket and the host's capture."""
        if self.wire is not None:
            self.wire.close()
        close = getattr(self.find, "close", None)
        if close is not None:
            close()
