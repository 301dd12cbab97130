"""Finding the local client processes of a cluster, and adding them to a Monitor as they appear.

One class for every caller: ``kmon record --cluster``, the watch screen and
the host view; each picks how often the host's sockets may be searched. Where the
monitor reads the kernel's TCP events, a search follows what changed: a process not
watched that connected (one the last search passed over only when it connects to a
broker), the processes connected to new brokers (a look at them, where ``find`` can tell
them), or events the kernel dropped; and every ``FULL_EVERY_S`` all the same, a safety
net. Where only connects to ports not followed were lost (a host's flood of them fills
their small rings) and every broker's port is followed, a process's first connect
elsewhere may be among them, not one to a broker: the processes that appeared since the
last listing of the host are looked at, not the host searched. Without the events,
every ``every_s``, as a host of unknown change needs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection

from kmon.engine.directory import Directory
from kmon.engine.kernel_watch import KernelWatch
from kmon.engine.monitor import Monitor
from kmon.engine.sampler import ProcessSampler, SampleError, SamplerSettings
from kmon.sources.kernel.host_sockets import HostClients
from kmon.sources.kernel.proc_fds import host_pids
from kmon.sources.kernel.sockets import Endpoint, SocketReader, normalize_ip
from kmon.sources.packets.host_wire import HostWire
from kmon.sources.processes.own_processes import own_pids

FULL_EVERY_S = 30.0  # a search at least this often, whatever the kernel's events said
MAX_PASSED = 4096  # processes a search passed over, remembered until the next full one


class ClientDiscovery:
    """Adds a sampler for each local process newly connected to the given brokers.

    ``update`` searches the whole host at most every ``every_s`` seconds (at once after
    ``search_now``); ``find`` is the search (by default the host's sockets on the brokers'
    ports: HostClients), and where it has ``check(strangers, brokers)``, that looks at the
    processes that just connected alone; ``wire``, the host's one packet capture, if the
    samplers share one; the samplers share ``directory``.
    """

    def __init__(self, reader: SocketReader, settings: SamplerSettings, directory: Directory,
                 every_s: float, find: Callable[[Collection[Endpoint]], set[int]] | None = None,
                 wire: HostWire | None = None) -> None:
        self.reader, self.settings, self.every_s = reader, settings, every_s
        self.directory = directory
        self.wire = wire  # the host's one packet capture, shared by the samplers
        self.find = find or HostClients()
        self.next_search = 0.0  # monotonic
        self.next_full = 0.0  # monotonic: the safety net's next search
        self.searched_for: frozenset[Endpoint] | None = None  # the brokers of the last search
        self.passed: set[int] = set()  # processes looked at and passed over since a full one
        # processes that connected since the last look, and the endpoints they connected to
        self.pending: dict[int, set[Endpoint]] = {}
        self.listed: set[int] = set()  # the host's processes at the last search or listing
        self.notices: list[str] = []

    def search_now(self) -> None:
        """Make the next ``update`` search, however soon after the last: for the clients of
        brokers not searched for yet, the whole host, or where the kernel's events follow it
        and ``find`` can tell them (``connected``), the processes connected to those."""
        self.next_search = 0.0

    def update(self, monitor: Monitor, brokers: Collection[Endpoint]) -> None:
        """Look for new clients (see the module's docstring); they join ``monitor`` (never
        one of kmon's own processes: kmon.sources.processes.own_processes)."""
        now = time.monotonic()
        if self.wire is not None:
            self.wire.tick(round(time.time() * 1000))
        brokers = frozenset(brokers)
        strangers = self._strangers(monitor.kernel, monitor.samplers.keys(), brokers)
        check = getattr(self.find, "check", None)
        if strangers is not None and check is not None and brokers != self.searched_for:
            strangers = self._of_new_brokers(brokers, monitor.samplers.keys())
        full = strangers is None or now >= self.next_full or brokers != self.searched_for
        if not full and check is None:
            full = bool(strangers)  # this search can only look at the whole host
        if full and now >= self.next_search:
            found = self._search(brokers, now)
        elif strangers and check is not None:
            found = self._look(check, strangers, brokers)
        else:
            return
        for pid in sorted(found - monitor.samplers.keys() - own_pids()):
            self.add(monitor, pid, quiet=True)

    def _search(self, brokers: Collection[Endpoint], now: float) -> set[int]:
        """The whole host searched (``find``)."""
        self.next_search = now + self.every_s
        if now >= self.next_full:
            self.next_full, self.passed = now + FULL_EVERY_S, set()
        self.searched_for = frozenset(brokers)
        self.listed = host_pids()
        try:
            found = self.find(brokers)
        except OSError as err:  # no permission to list the host's sockets, netlink failed
            self.notices = [str(err)]
            return set()
        self._pass(self.pending.keys() - found, now)
        return found

    def _of_new_brokers(self, brokers: frozenset[Endpoint],
                        watched: Collection[int]) -> dict[int, set[Endpoint]] | None:
        """The strangers with the processes not watched connected to brokers the last search
        did not look for (``find.connected``: their connects may predate the kernel's
        following their ports), those brokers searched for from now on; None where ``find``
        cannot tell them (then the whole host is searched)."""
        connected = getattr(self.find, "connected", None)
        if self.searched_for is None or connected is None:
            return None
        try:
            found = connected(brokers - self.searched_for)
        except OSError:  # no sock_diag: the whole host's search says what it can
            return None
        self.searched_for = brokers
        me = os.getpid()
        for pid, remotes in found.items():
            if pid not in watched and pid != me:
                self.pending.setdefault(pid, set()).update(remotes)
        return self.pending

    def _look(self, check: Callable[[dict[int, set[Endpoint]], Collection[Endpoint]], set[int]],
              strangers: dict[int, set[Endpoint]],
              brokers: Collection[Endpoint]) -> set[int]:
        """Only the processes that connected since the last look (``find.check``)."""
        try:
            found = check(strangers, brokers)
        except OSError as err:
            self.notices = [str(err)]
            return set()
        self._pass(strangers.keys() - found, time.monotonic())
        return found

    def _pass(self, pids: Collection[int], now: float) -> None:
        self.pending = {}
        self.passed.update(pids)
        if len(self.passed) > MAX_PASSED:
            self.next_full = now  # too many to follow: the next search is a full one

    def _strangers(self, kernel: KernelWatch | None, watched: Collection[int],
                   brokers: Collection[Endpoint]) -> dict[int, set[Endpoint]] | None:
        """The processes to look at (PID -> the endpoints each connected to): those that
        connected since the last look, neither watched nor kmon, nor passed over before
        unless they connected to a broker, and where connects elsewhere were lost those new
        on the host; None when any process may be one (no kernel events, or the kernel
        dropped connects to a broker's port)."""
        if kernel is None:
            return None
        strangers = kernel.strangers()
        lost_to_brokers = kernel.connects_missed and not kernel.followed.issuperset(
            b.port for b in brokers)
        if strangers is None or lost_to_brokers:  # anyone may have connected to a broker
            self.next_full = 0.0
            return None
        if kernel.connects_missed and self.listed:  # their first connects may be lost
            listed, self.listed = self.listed, host_pids()
            strangers = {**dict.fromkeys(self.listed - listed, set()), **strangers}
        me = os.getpid()  # kmon asks the brokers itself
        for pid, remotes in strangers.items():
            if pid in watched or pid == me:
                continue
            to = {Endpoint(normalize_ip(ip), port) for ip, port in remotes}
            if pid not in self.passed or not to.isdisjoint(brokers):
                self.pending.setdefault(pid, set()).update(to)
        return self.pending

    def add(self, monitor: Monitor, pid: int, quiet: bool = False) -> None:
        """Watch ``pid`` too; a process that cannot be sampled is a notice (or, when
        ``quiet``, skipped: it went away since its socket was listed)."""
        try:
            monitor.add(ProcessSampler(pid, self.reader, self.settings, host_wire=self.wire,
                                       directory=self.directory))
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
