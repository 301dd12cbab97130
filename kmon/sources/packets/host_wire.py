"""The wire of every watched process on the host, read once: one packet capture on the
brokers' ports, its segments handed to each process by socket.

``HostWire.share()`` gives each process's tap (``kmon.sources.packets.kafka_wire.WireTap``) a
``SharedCapture``: what the tap would ask of its own ``PacketCapture``, answered from the
host's one. Each poll, a process names its sockets (``own``); the host's segments go to
the process whose socket they belong to, by (local, remote) address in either direction.
A socket the kernel's TCP events saw a process open (``opened``: its connect ran in the
process) is that process's too, though no poll shows it: one that opened and closed between
two polls is read as the process's own capture reads it. A segment of no watched socket (one
opened since the last poll, another process's) waits ``UNOWNED_FOR_MS`` for a process whose
poll or connect claims it; every such table is bounded. The kernel filter keeps the ports
every tap asks for (the brokers'), with the local ports left out: thousands of them would
not fit the filter, and every segment of a Kafka connection has a broker's port on one side.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable

from kmon.sources.packets.packet_capture import Address, PacketCapture, Segment
from kmon.sources.packets.packet_filter import MAX_PORTS

HOST_BLOCKS = 128  # 8 MiB of ring: a second of the cut-short segments of a busy host
UNOWNED_FOR_MS = 10_000  # a segment of no watched socket (yet) waits this long
MAX_UNOWNED_STREAMS = 1024  # sockets whose segments wait for an owner
MAX_UNOWNED_SEGMENTS = 32  # segments kept per waiting socket (both ways), the first ones
MAX_OPENED = 4096  # sockets the kernel saw the processes open, the latest kept
MAX_QUEUED = 65_536  # segments a process has not read yet; beyond, they count as drops

Key = tuple[Address, Address]


def socket_of(key: Key) -> Key:
    """The one key of a socket's segments in either direction: a broker's answer and its FIN
    wait in one list with the client's requests and FIN, in the order captured (stamps are
    whole ms: sorting two lists by them put the client's FIN before a broker's close of the
    same ms, and told the close as the client's)."""
    flipped = key[1], key[0]
    return key if key < flipped else flipped


class SharedCapture:
    """One process's part of the host capture, read as its own ``PacketCapture``."""

    def __init__(self, host: HostWire) -> None:
        self.host = host
        self.queue: list[Segment] = []
        self.keys: set[Key] = set()  # the process's sockets at its last poll
        self.wanted: tuple[set[int], bool] = (set(), True)  # its remote ports, responses
        self.any_requests = False  # (see set_ports)
        self.missed = 0  # segments dropped from a full queue
        self.drops_before = host.capture.drops if host.capture else 0  # the ring's, until now

    @property
    def local_ports(self) -> set[int]:
        return set()  # the host filter keeps no local port

    @property
    def remote_ports(self) -> set[int]:
        return self.host.capture.remote_ports if self.host.capture else set()

    @property
    def drops(self) -> int:
        """The packets the host ring missed while the process was watched (whose they were,
        nobody knows), and the segments its own full queue did."""
        ring = self.host.capture.drops - self.drops_before if self.host.capture else 0
        return self.missed + ring

    def own(self, sockets: Collection[Key], now_ms: int) -> None:
        """The process's sockets now: their segments are its own from here on."""
        self.host.own(self, set(sockets), now_ms)

    def opened(self, sockets: Collection[Key]) -> None:
        """Sockets the kernel saw the process open (its connect): their segments are its own,
        those that waited and those to come, unless a poll shows them another's."""
        self.host.opened(self, sockets)

    def set_ports(self, local_ports: set[int], remote_ports: set[int],
                  responses: bool = True, any_requests: bool = False) -> None:
        """The remote ports the process's tap follows, and whether it needs responses (the
        filter made again when they change). ``any_requests`` is not taken: the host's one
        capture is every process's, and any port's opening requests would cost them all."""
        del local_ports, any_requests  # every segment of a Kafka connection has a broker's port
        wanted = (set(remote_ports), responses)
        if wanted != self.wanted:
            self.wanted = wanted
            self.host.refilter()

    def settle(self, before: float, poll_ms: int) -> None:
        """Wait until the host's segments captured before ``before`` can be read, and hand
        them to their processes by the sockets they had at their last poll (see
        ``HostWire.settle``)."""
        self.host.settle(before, poll_ms)

    def read(self) -> list[Segment]:
        """The process's segments since its last read."""
        self.host.drain()
        queue, self.queue = self.queue, []
        return queue

    def take(self, segments: list[Segment]) -> None:
        room = MAX_QUEUED - len(self.queue)
        self.queue.extend(segments[:room])
        self.missed += max(0, len(segments) - room)

    def close(self) -> None:
        self.host.leave(self)


class HostWire:
    """The host's one packet capture, opened with the first share (or at once, following
    ``ports``), closed with the last."""

    def __init__(self, ports: Iterable[int] = ()) -> None:
        # the named cluster's brokers' ports, followed from the start: the segments of a
        # process's connection that no poll showed are captured before its tap learns the port
        self.ports = tuple(ports)
        self.capture: PacketCapture | None = None
        self.shares: list[SharedCapture] = []
        self.owners: dict[Key, SharedCapture] = {}  # socket (either direction) -> process
        # socket (``socket_of``) -> its segments of both directions in the order captured;
        # insertion-ordered: the oldest first
        self.unowned: dict[Key, list[Segment]] = {}
        # socket (either direction) -> the process the kernel saw open it, the latest last
        self.openers: dict[Key, SharedCapture] = {}
        self.captures_opened = 0
        self.settled_poll: int | None = None  # the poll whose segments were last settled
        if self.ports:  # from now, not from the first share: a process found later (a client
            # made per message, found by its connect) has its first connections captured too
            try:
                self._open()
                self.refilter()
            except OSError:  # no CAP_NET_RAW: each process's tap says so at its first read
                self.capture = None

    def share(self) -> SharedCapture:
        """A new process's part of the capture (opening it: ``PermissionError`` without
        CAP_NET_RAW, as ``PacketCapture``)."""
        if self.capture is None:
            self._open()
        share = SharedCapture(self)
        self.shares.append(share)
        self.refilter()  # its responses wanted, until its tap says otherwise
        return share

    def tick(self, now_ms: int) -> None:
        """Once a poll: what the capture holds handed on (to waiting sockets, where no
        process owns them yet) and the oldest waiting forgotten, so that a capture opened
        before any process shares it keeps room for what comes."""
        self.drain()
        self.expire(now_ms)

    def _open(self) -> None:
        self.capture = PacketCapture(set(), set(), blocks=HOST_BLOCKS)
        self.captures_opened += 1

    def own(self, share: SharedCapture, keys: set[Key], now_ms: int) -> None:
        """``share``'s sockets are ``keys`` now; the segments that waited for them are its."""
        self.drain()
        owners = self.owners
        for key in share.keys - keys:
            for either in (key, (key[1], key[0])):
                if owners.get(either) is share:
                    del owners[either]
        for key in keys - share.keys:
            owners[key] = owners[key[1], key[0]] = share
            share.take(self.unowned.pop(socket_of(key), []))
        share.keys = keys
        self.expire(now_ms)

    def opened(self, share: SharedCapture, keys: Collection[Key]) -> None:
        """``share``'s process opened the sockets ``keys`` (the kernel's events say so): the
        segments that waited for them are its, and so are those the capture holds (read here,
        uncut: a waiting socket's are cut short) and reads next."""
        openers = self.openers
        for key in keys:
            for either in (key, (key[1], key[0])):
                openers.pop(either, None)
                openers[either] = share
            if waited := self.unowned.pop(socket_of(key), None):
                share.take(waited)
        while len(openers) > 2 * MAX_OPENED:
            del openers[next(iter(openers))]
        self.drain()

    def settle(self, before: float, poll_ms: int) -> None:
        """``PacketCapture.settle``, once a poll (``poll_ms``): the processes' sockets are read
        together at its start (``read_ahead``), before the first to settle; then drained to
        the processes by their last poll's sockets."""
        if self.capture is None:
            return
        if poll_ms != self.settled_poll:
            self.settled_poll = poll_ms
            self.capture.settle(before)
        self.drain()

    def refilter(self) -> None:
        """Rebuild the kernel filter for the ports every share follows (only if changed): the
        named cluster's, then those the most processes follow, as many as the filter takes.
        A process follows its brokers' ports, and a broker's answer names them: one that
        answers its own client with hundreds of ports would otherwise push every other
        process's brokers out of the filter (it is the first watched, say)."""
        if self.capture is None:
            return
        followed = Counter(port for share in self.shares for port in share.wanted[0])
        ports = dict.fromkeys(self.ports)
        ports.update(dict.fromkeys(sorted(followed, key=lambda port: -followed[port])))
        remote = set(list(ports)[:MAX_PORTS // 4])
        self.capture.set_ports(set(), remote, responses=not self.shares or any(
            share.wanted[1] for share in self.shares))

    def drain(self) -> None:
        """Hand what the capture queued since the last drain to the processes it belongs to."""
        if self.capture is None:
            return
        owners, openers, unowned = self.owners, self.openers, self.unowned
        routed: dict[SharedCapture, list[Segment]] = {}
        for seg in self.capture.read():
            share = owners.get((seg.src, seg.dst)) or openers.get((seg.src, seg.dst))
            if share is not None:
                routed.setdefault(share, []).append(seg)
                continue
            stream = socket_of((seg.src, seg.dst))
            waiting = unowned.get(stream)
            if waiting is None:
                if len(unowned) >= MAX_UNOWNED_STREAMS:
                    del unowned[next(iter(unowned))]
                waiting = unowned[stream] = []
            if len(waiting) < MAX_UNOWNED_SEGMENTS:
                waiting.append(seg)
        for share, segments in routed.items():
            share.take(segments)

    def leave(self, share: SharedCapture) -> None:
        """``share``'s process is no longer watched; the capture closes with the last one."""
        if share not in self.shares:
            return
        self.shares.remove(share)
        self.own(share, set(), 0)
        self.openers = {key: other for key, other in self.openers.items() if other is not share}
        if not self.shares:
            self.close()
        else:
            self.refilter()

    def close(self) -> None:
        """Close the capture; idempotent (a later share opens a new one)."""
        if self.capture is not None:
            self.capture.close()
            self.capture = None
        self.owners.clear()
        self.openers.clear()
        self.unowned.clear()

    def expire(self, now_ms: int) -> None:
        """Forget the oldest waiting segments once no poll has claimed them for long."""
        unowned = self.unowned
        while unowned:
            oldest = next(iter(unowned))
            if now_ms - unowned[oldest][-1].ts_ms <= UNOWNED_FOR_MS:
                break
            del unowned[oldest]
