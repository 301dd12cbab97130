"""What a process's Kafka connections carry on the wire: API keys, client ids, the brokers
and coordinators its responses name.

``WireTap`` owns a ``PacketCapture`` filtered to the process's local ports and
to its brokers' ports (so that a connection opened between two polls is seen
from its first request), or reads its part of the host's one capture
(``kmon.sources.packets.host_wire``), and keeps one ``Flow`` per socket: the API key and
client_id of every segment that starts with a request header (the kernel
filter passes no other request bytes; a request that shares a segment with
the one before it goes uncounted), and, while the brokers are not known yet,
the Metadata and FindCoordinator responses. Segments of another process's
sockets to the same brokers are dropped once the polls show they are not
this process's. Every table here has a bound (the brokers and coordinators
named keep the latest ``MAX_BROKERS``/``MAX_COORDINATORS``): a peer that
answers with endless names costs a bounded table.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from kmon.model import WireClose
from kmon.sources import bounded
from kmon.sources import kafka_protocol as kp
from kmon.sources.kernel.sockets import Endpoint, TcpSocket
from kmon.sources.packets.host_wire import SharedCapture
from kmon.sources.packets.packet_capture import Address, PacketCapture, Segment
from kmon.sources.packets.packet_filter import OPENING_APIS, TCP_CLOSING, TCP_RST, TCP_SYN

MAX_PENDING = 64  # outstanding Metadata/FindCoordinator requests remembered per socket
UNOWNED_FOR_MS = 10_000  # a stream not (yet) among the process's sockets is kept this long
MAX_FLOWS = 4096
MAX_BROKERS = 256  # broker ids remembered from Metadata responses, the latest kept
MAX_COORDINATORS = 256  # coordinators remembered from FindCoordinator responses, the latest kept
MAX_REMOTE_PORTS = 256  # the remote ports remembered: a broker with no socket open stays watched
MAX_WAITING = 1024  # TLS writes waiting for their socket's flow (``Waiting``), the latest kept
# While the tap learns the process's brokers, and for this long at most from its first port, it
# keeps the headers of any port's opening requests (ApiVersions, Metadata) too: a client
# connects to its other brokers within ms of its first Metadata answer and sends its first
# requests at once, before a poll follows their ports (a socket silent afterwards would never
# be named)
ANY_PORT_S = 10.0
TLS_HANDSHAKE = b"\x16\x03"  # a TLS connection's first record (its ClientHello)
TLS_RECORDS = (b"\x15\x03", TLS_HANDSHAKE, b"\x17\x03")  # alert, handshake, application data
# their responses name brokers, or say that a login failed
ANSWERS_KMON_READS = frozenset({kp.METADATA, kp.FIND_COORDINATOR, *kp.SASL_APIS})
# a TLS write's start: (socket inode, epoch ms, bytes, the 4-tuple of a socket no poll saw)
TlsWriteStart = tuple[int, float, bytes, "tuple[Address, Address] | None"]
UNHEARD = WireClose("unknown", False, None, heard=False)  # a close the ring still held back


@dataclass
class Flow:
    """What one socket carried, as far as kmon has seen."""

    first_ms: int
    api_counts: Counter = field(default_factory=Counter)
    api_last_ms: dict[int, int] = field(default_factory=dict)
    first_request_ms: int | None = None
    client_id: str | None = None
    tls: bool = False
    from_start: bool = False  # opened after the tap started: its first requests were seen
    # ... yet its first segment read was none of its opening (``_opens``): the port came to
    # be followed after it opened, so what it sent first went unread (its close is unsettled)
    late: bool = False
    pending: dict[int, tuple[int, int]] = field(default_factory=dict)  # correlation -> api
    last_api: int | None = None  # the API key of the last request seen
    close: WireClose | None = None  # the first FIN or RST seen, and from which side
    auth_failed: bool = False  # a SASL request was answered with an error
    requests: int = 0  # request segments taken: what the flow says changes with each only
    last_data_ms: int | None = None  # the last segment with data taken (WireClose's)
    inode: int | None = None  # the socket whose TLS writes it holds (another's are not its)
    shown: int | None = None  # the socket a poll showed on its 4-tuple while it held none

    def seen(self) -> tuple[tuple[str, int], ...]:
        """The API keys seen, most frequent first, each as ``Fetch×12`` and when it was last
        seen (``last_seen`` says when)."""
        return tuple((f"{kp.api_name(key)}×{count}", self.api_last_ms[key])
                     for key, count in self.api_counts.most_common())


def _login_pending(flow: Flow) -> bool:
    """Whether a SASL request of ``flow`` waits for its answer: the capture did not read it
    (responses not kept, or not yet kept for the flow's ports: a process's first connection,
    opened while the filter followed no port), so whether the login failed is unknown."""
    return any(api in kp.SASL_APIS for api, _ in flow.pending.values())


def _opens(seg: Segment, request: bool) -> bool:
    """Whether ``seg``, the first segment read of a connection whose SYN was not, is still
    its first exchange: an opening request (ApiVersions, Metadata) or a TLS handshake
    record. A close, an answer or a later request was read because its port came to be
    followed after the connection opened (a port the kernel saw the process connect to, or a
    poll showed): its first requests went unseen, so it was not seen from its start."""
    if not request or seg.flags & TCP_CLOSING:
        return False
    if seg.data.startswith(TLS_HANDSHAKE):
        return True
    header = kp.request_header(seg.data)
    return header is not None and header[1] in OPENING_APIS


def _holds(flow: Flow, inode: int) -> bool:
    """Whether ``flow`` is the socket ``inode``'s: it holds that socket's TLS writes, or none,
    open, and no poll showed another socket on its 4-tuple while it was there."""
    return flow.inode == inode or (flow.inode is None and flow.close is None
                                   and flow.shown in (None, inode))


def _shown(flow: Flow, sock: TcpSocket, now_ms: int) -> None:
    """``sock``, shown by the poll of ``now_ms`` on ``flow``'s 4-tuple, is ``flow``'s socket
    if the flow began before the poll (a SYN captured since may be a new socket's) and no
    earlier poll showed one (a later poll may show a new socket whose SYN the ring holds)."""
    if flow.inode is None and flow.shown is None and flow.first_ms < now_ms:
        flow.shown = sock.inode


def last_seen(seen: tuple[tuple[str, int], ...]) -> str:
    """``Flow.seen`` with the local time each was last seen: ``Fetch×12 (last 14:02:07.4)
    Heartbeat×3 (last 14:02:05.1)``; the same text poll after poll while nothing new is
    seen."""
    return " ".join([f"{text} (last {_clock(last_ms)})" for text, last_ms in seen])


def _clock(ts_ms: int) -> str:
    """``14:02:07.4``: the local time of ``ts_ms`` to a tenth of a second."""
    return time.strftime("%H:%M:%S", time.localtime(ts_ms // 1000)) + f".{ts_ms % 1000 // 100}"


class Waiting(NamedTuple):
    """A TLS write of a socket whose 4-tuple's flow is another socket's (an older connection
    on it, whose close and the new one's SYN the capture's ring has not handed over yet)."""

    key: tuple[Address, Address]
    inode: int
    ts_ms: float
    data: bytes
    refused: Flow  # the flow it is not of: it goes to the next flow on its 4-tuple
    poll: int  # the poll it came with


@dataclass
class WireView:
    """What the tap knows after a poll."""

    flows: dict[tuple[Endpoint, Endpoint], Flow]  # (local, remote) of the process's sockets
    brokers: dict[int, tuple[str, int]]  # broker id -> (host, port), from Metadata responses
    coordinators: dict[tuple[str, int], int]  # (host, port) -> broker id, from FindCoordinator
    cluster_learned_ms: int | None  # the first Metadata response naming brokers
    drops: int  # packets the kernel could not queue
    closes: dict[tuple[Endpoint, Endpoint], WireClose]  # sockets gone since the last poll
    # the sockets whose flows took a segment since the last poll, when the sockets are the
    # last poll's (None: any flow may have changed)
    changed: set[tuple[Endpoint, Endpoint]] | None = None
    polls: int = 0  # the tap's polls so far, this one included
    # of ``closes``, those of sockets no poll showed that carried none of the process's TLS
    # writes: maybe another process's (a tap follows its ports, whoever talks on them)
    untied: frozenset[tuple[Endpoint, Endpoint]] = frozenset()


def _address(endpoint: Endpoint) -> Address:
    return endpoint.ip, endpoint.port


class WireTap:
    """The wire source of one process."""

    def __init__(self, sockets: list[TcpSocket], now_ms: int,
                 capture: SharedCapture | None = None) -> None:
        self.flows: dict[tuple[Address, Address], Flow] = {}
        self.brokers: dict[int, tuple[str, int]] = {}
        self.coordinators: dict[tuple[str, int], int] = {}
        self.cluster_learned_ms: int | None = None
        self.started = {(_address(s.local), _address(s.remote)) for s in sockets}
        self.last_polled: set[tuple[Address, Address]] = set(self.started)
        self.remote_ports: dict[int, None] = {}  # insertion-ordered, the latest last
        # the last poll's sockets: their endpoints, by address, and the brokers then
        self.pairs: list[tuple[Endpoint, Endpoint]] | None = None
        self.mine: dict[tuple[Address, Address], TcpSocket] = {}
        self.ported: dict[int, tuple[str, int]] = {}
        self.found: dict[tuple[Endpoint, Endpoint], Flow] = {}  # the last poll's flows
        self.taken: set[tuple[Address, Address]] = set()  # the flows a segment went to
        self.polls = 0
        self.drops = 0  # the capture's drops at the last poll
        self.hearing = True  # the capture keeps the brokers' answers (until brokers are known)
        self.any_until: float | None = None  # any port's opening requests kept until (monotonic)
        # closes of sockets no poll showed (the kernel's events may know them the process's)
        self.unpolled: dict[tuple[Address, Address], WireClose] = {}
        self.untied: set[tuple[Address, Address]] = set()  # of those, no TLS write of its
        self.waiting: list[Waiting] = []  # oldest first
        ports = self._ports(sockets)  # (its own capture attaches its filter before its ring)
        self.capture = capture or PacketCapture(*ports)
        self._set_ports(*ports)  # (the host's: its part; its own: any port's opening requests)

    def close(self) -> None:
        self.capture.close()

    def losing(self, pairs: list[tuple[Endpoint, Endpoint]]) -> bool:
        """True when a socket of the last poll is not among ``pairs`` (the (local, remote) of
        this poll's): its closing segments may still be in the capture's ring (``settle``
        before reading)."""
        return (self.pairs is not None and pairs != self.pairs
                and not set(self.pairs) <= set(pairs))

    def learn(self, brokers: dict[int, tuple[str, int]], now_ms: int) -> None:
        """Brokers named by another source (kmon's own Metadata request): the process, which
        talks Kafka to them, knew them by ``now_ms``."""
        bounded.put_all(self.brokers, brokers, MAX_BROKERS)
        if self.cluster_learned_ms is None:
            self.cluster_learned_ms = now_ms
        # watched from now on, not from the next poll: a connection the process opens to one
        # of them meanwhile is seen from its first request
        self.hearing = False
        self._set_ports(self.capture.local_ports, self.capture.remote_ports | {
            port for _, port in brokers.values()})

    def follow(self, ports: Iterable[int]) -> None:
        """Remote ports the kernel saw the process connect to (``opened``): captured from now
        on, as its brokers' are, though no poll showed a socket to them (a client made per
        message holds none at the instant of a poll; its closes went unheard, told
        ``unknown`` where a view whose polls caught one told them)."""
        new = [port for port in ports if port not in self.remote_ports]
        if new:
            for port in new:
                bounded.put(self.remote_ports, port, None, MAX_REMOTE_PORTS)
            self._set_ports(self.capture.local_ports, set(self.remote_ports))

    def quiet(self) -> bool:
        """Whether a poll now would take nothing in (a part of the host's capture only: a
        capture of its own is not looked at but by a poll): no segment queued for it, none
        dropped since its last poll, no close waiting to be told."""
        capture = self.capture
        if not isinstance(capture, SharedCapture) or self.unpolled or not self.polls:
            return False
        capture.host.drain()
        return not capture.queue and capture.drops == self.drops

    def poll(self, sockets: list[TcpSocket], now_ms: int,
             tls_writes: Sequence[TlsWriteStart] = ()) -> WireView:
        """Take in the segments queued since the last poll, and ``tls_writes``, the starts of
        the process's TLS writes as (socket inode, epoch ms, bytes, 4-tuple of a socket no poll
        saw) (kmon.sources.tls), oldest first, each before the first segment not older than it
        (a socket's writes come before its FIN, a new socket's after its SYN and the close of
        the one before it on the 4-tuple); follow ``sockets`` from now on. A socket gone
        without its FIN or RST read is closed unheard: the capture missed its close (the ring
        still held it back, or dropped it), so its last exchange is not known."""
        pairs = [(s.local, s.remote) for s in sockets]
        same = pairs == self.pairs  # the sockets of the last poll (the same endpoints)
        mine = self.mine if same else {(_address(s.local), _address(s.remote)): s
                                         for s in sockets}
        taken: set[tuple[Address, Address]] = set()
        self.taken = taken
        # the sockets of the last poll (one closed since wrote before it closed) and this one's
        by_inode = {s.inode: (_address(s.local), _address(s.remote))
                    for s in [*self.mine.values(), *sockets]} if tls_writes else {}
        at = 0
        for seg in self.capture.read():
            # the writes before it: its ms began no later (a segment's time is a whole ms)
            while at < len(tls_writes) and tls_writes[at][1] < seg.first_ms + 1:
                self._take_tls(tls_writes[at], by_inode)
                at += 1
            self._take(seg, mine)
        for write in tls_writes[at:]:
            self._take_tls(write, by_inode)
        if self.waiting:
            self._settle_waiting()
        flows, closes = self.flows, {}
        gone = set() if same else self.last_polled - mine.keys()
        # every flow a socket's of the last poll, and no segment of another: none to drop
        kept = same and len(flows) == len(self.found) and taken <= mine.keys()
        for key in [] if kept else [key for key in flows if key not in mine]:
            flow = flows[key]
            if key in gone:  # the process's socket, closed since the last poll
                if flow.close is not None:
                    closes[(Endpoint(*key[0]), Endpoint(*key[1]))] = flow.close
                del flows[key]
            elif now_ms - flow.first_ms > UNOWNED_FOR_MS:
                del flows[key]
        for local, remote in gone:
            closes.setdefault((Endpoint(*local), Endpoint(*remote)), UNHEARD)
        for (local, remote), close in self.unpolled.items():
            closes[(Endpoint(*local), Endpoint(*remote))] = close
        untied = frozenset((Endpoint(*local), Endpoint(*remote))
                           for local, remote in self.untied & self.unpolled.keys())
        self.unpolled, self.untied = {}, set()
        trimmed = len(flows) > MAX_FLOWS
        while len(flows) > MAX_FLOWS:
            del flows[next(iter(flows))]
        if (not same or self.brokers != self.ported
                or self.capture.any_requests != self._any_requests()):
            self.hearing = not self.brokers
            self._set_ports(*self._ports(sockets))
            self.ported = dict(self.brokers)
        if not same:
            self.pairs, self.mine, self.last_polled = pairs, mine, set(mine)
        changed: set[tuple[Endpoint, Endpoint]] | None = None
        if same and not trimmed:  # the last poll's flows, and those a segment went to
            found, changed = self.found, set()
            for key in taken:
                sock, seen = mine.get(key), flows.get(key)
                if sock is not None and seen is not None:
                    found[sock.local, sock.remote] = seen
                    changed.add((sock.local, sock.remote))
                    _shown(seen, sock, now_ms)
        else:
            found = {}
            for key, sock in mine.items():
                seen = flows.get(key)
                if seen is not None:
                    found[sock.local, sock.remote] = seen
                    _shown(seen, sock, now_ms)
        self.found = found
        self.polls += 1
        self.drops = self.capture.drops
        return WireView(dict(found), dict(self.brokers), dict(self.coordinators),
                        self.cluster_learned_ms, self.drops, closes, changed, self.polls,
                        untied)

    def _set_ports(self, local: set[int], remote: set[int]) -> None:
        """The capture's ports, its responses kept while the tap is hearing, and the request
        headers of any port's opening requests while ``_any_requests``."""
        if self.any_until is None and (local or remote):
            self.any_until = time.monotonic() + ANY_PORT_S
        self.capture.set_ports(local, remote, responses=self.hearing,
                               any_requests=self._any_requests())

    def _any_requests(self) -> bool:
        """Whether the capture keeps any port's opening requests besides its ports: while
        the brokers are not known, for ``ANY_PORT_S`` at most from the first port."""
        return self.hearing and self.any_until is not None and time.monotonic() < self.any_until

    def _ports(self, sockets: list[TcpSocket]) -> tuple[set[int], set[int]]:
        """(local ports, remote ports) to capture: the process's, and its brokers' (those it
        had a socket to lately too: a client reconnecting every few ms, refused by the broker,
        may have none open at the instant of a poll)."""
        ports = [s.remote.port for s in sockets] + [p for _, p in self.brokers.values()]
        latest = dict.fromkeys(reversed(ports))  # each port once, where it was last named
        for port in reversed(latest):
            bounded.put(self.remote_ports, port, None, MAX_REMOTE_PORTS)
        return {s.local.port for s in sockets}, set(self.remote_ports)

    def _opened(self, key: tuple[Address, Address], before: Flow | None, ts_ms: int,
                syn: bool = False) -> Flow:
        """A new flow for the socket ``key``, first seen at ``ts_ms`` (at its ``syn``: seen
        from its start). A client's SYN on a 4-tuple whose flow (``before``) a poll showed
        carrying data or closing opens a new connection: the old socket's close is told with
        the next poll's (a SYN sent again before any data is the same connection's). A SYN
        older than the flow is not one (``_take``): the flow's TLS writes, read while the
        capture's ring still held it, came after it on the same connection."""
        if (before is not None and key in self.last_polled and len(self.unpolled) < MAX_FLOWS
                and (before.close is not None or before.last_data_ms is not None)):
            self.last_polled.discard(key)  # (gone: not the new connection's to drop)
            self.unpolled.setdefault(key, before.close or UNHEARD)
        flow = self.flows[key] = Flow(ts_ms, from_start=syn or key not in self.started)
        return flow

    def _take(self, seg: Segment, mine: dict) -> None:
        forward = seg.src, seg.dst
        if forward in mine:
            request, key = True, forward
        elif (backward := (seg.dst, seg.src)) in mine:
            request, key = False, backward
        elif forward in self.flows:  # a socket the polls have not shown (yet), whose first
            request, key = True, forward  # segment (its SYN, where seen) named its client
        elif backward in self.flows:
            request, key = False, backward
        else:  # a socket new to the tap: towards a broker port, a request; from one, not;
            # while no port was watched, the filter kept nothing but requests (and SYNs, FINs
            # and RSTs), and from ports not followed (``any_requests``) requests only
            capture, remote = self.capture, self.capture.remote_ports
            request = seg.dst[1] in remote or seg.src[1] not in remote and (
                capture.any_requests or not (capture.local_ports or remote))
            key = forward if request else (seg.dst, seg.src)
        flow, syn = self.flows.get(key), bool(request and seg.flags & TCP_SYN)
        # a flow opened by a TLS write began in the SYN's ms, or after it: that SYN is its own
        # (unless the flow's close came before it)
        if flow is None or (syn and (flow.close is not None
                                     or seg.first_ms > flow.first_ms - (flow.inode is None))):
            flow = self._opened(key, flow, seg.first_ms, syn)
            if not syn and not _opens(seg, request):
                flow.late = True
        elif syn:  # older than the flow: its own opening, read after its TLS writes
            flow.from_start = True
        self.taken.add(key)
        if seg.flags & TCP_SYN:
            return
        if seg.flags & TCP_CLOSING:
            if flow.inode is not None and seg.first_ms < flow.first_ms:
                return  # before the socket's first TLS write: an older connection's close
            if flow.close is None and self.waiting:  # its socket's writes that waited for it
                self._catch_up(key, flow, seg.first_ms + 1)
            if flow.close is None:
                flow.close = WireClose("client" if request else "broker",
                                       bool(seg.flags & TCP_RST), flow.last_api,
                                       flow.auth_failed, tls=flow.tls,
                                       answers_heard=not _login_pending(flow),
                                       last_data_ms=flow.last_data_ms,
                                       from_start=flow.from_start and not flow.late,
                                       closed_ms=seg.ts_ms)
                if (key not in mine and key not in self.last_polled
                        and len(self.unpolled) < MAX_FLOWS):
                    self.unpolled[key] = flow.close
                    if flow.inode is None:
                        self.untied.add(key)
        elif request:
            self._request(flow, seg)
        else:
            self._response(flow, seg)

    def _take_tls(self, write: TlsWriteStart,
                  by_inode: dict[int, tuple[Address, Address]]) -> None:
        """The request header at the start of a TLS write, into its socket's flow (marked
        TLS: kmon's own plaintext query is not sent to its peer). A flow not the socket's
        (``_holds``) is an older connection on the 4-tuple: the write waits for its own flow
        (``Waiting``)."""
        inode, ts_ms, data, pair = write
        key = by_inode.get(inode, pair)
        if key is None:
            return
        flow = self.flows.get(key)
        if flow is None:
            flow = self._opened(key, None, int(ts_ms))
        elif not _holds(flow, inode):
            if len(self.waiting) >= MAX_WAITING:
                del self.waiting[0]
            self.waiting.append(Waiting(key, inode, ts_ms, data, flow, self.polls))
            return
        self._write(key, flow, inode, ts_ms, data)

    def _write(self, key: tuple[Address, Address], flow: Flow, inode: int, ts_ms: float,
               data: bytes) -> None:
        flow.inode, flow.tls = inode, True
        self.taken.add(key)
        ts = int(ts_ms)
        self._request(flow, Segment(ts, key[0], key[1], data, 0, 1, ts), prefix=True)

    def _catch_up(self, key: tuple[Address, Address], flow: Flow, before_ms: float) -> None:
        """Into ``flow``, a newer flow on ``key`` than the one each refused, the waiting writes
        of its socket older than ``before_ms``."""
        left = []
        for wait in self.waiting:
            if (wait.key == key and wait.refused is not flow and wait.ts_ms < before_ms
                    and _holds(flow, wait.inode)):
                self._write(key, flow, wait.inode, wait.ts_ms, wait.data)
            else:
                left.append(wait)
        self.waiting = left

    def _settle_waiting(self) -> None:
        """After a poll's segments, each waiting write into the open flow that followed the
        one it was refused by (its SYN read); one that waited a whole poll more (the SYN went
        uncaptured: dropped, or its port not yet watched) opens a flow of its own, the older
        one on the 4-tuple told closed (``_opened``)."""
        left = []
        for wait in self.waiting:
            flow = self.flows.get(wait.key)
            if flow is None or flow is wait.refused or not _holds(flow, wait.inode):
                if flow is not None and wait.poll == self.polls:
                    left.append(wait)
                    continue
                flow = self._opened(wait.key, flow, int(wait.ts_ms))
            self._write(wait.key, flow, wait.inode, wait.ts_ms, wait.data)
        self.waiting = left

    def _request(self, flow: Flow, seg: Segment, prefix: bool = False) -> None:
        flow.last_data_ms = seg.ts_ms
        header = kp.request_header(seg.data, prefix)
        flow.requests += 1
        if header is None:
            flow.tls |= flow.first_request_ms is None and seg.data.startswith(TLS_RECORDS)
            return
        _, api_key, api_version, correlation_id, client_id = header
        flow.api_counts[api_key] += seg.repeats
        flow.last_api = api_key
        flow.api_last_ms[api_key] = seg.ts_ms
        if flow.first_request_ms is None:
            flow.first_request_ms = seg.first_ms
        if client_id:
            flow.client_id = client_id
        if api_key in ANSWERS_KMON_READS:
            if len(flow.pending) >= MAX_PENDING:
                flow.pending.pop(next(iter(flow.pending)))
            flow.pending[correlation_id] = (api_key, api_version)

    def _response(self, flow: Flow, seg: Segment) -> None:
        flow.last_data_ms = seg.ts_ms
        if flow.first_request_ms is None and seg.data.startswith(TLS_RECORDS):
            # the broker's TLS record (a plaintext response of this size would be ~386 MB): a
            # socket busy since before kmon attached may start no request segment with one
            flow.tls = True
            return
        correlation = kp.response_correlation(seg.data)
        api = None if correlation is None else flow.pending.pop(correlation, None)
        if api is None:
            return
        key, version = api
        if key == kp.METADATA:
            brokers = kp.metadata_brokers(seg.data, version)
            if brokers:
                bounded.put_all(self.brokers, brokers, MAX_BROKERS)
                if self.cluster_learned_ms is None:
                    self.cluster_learned_ms = seg.ts_ms
        elif key == kp.FIND_COORDINATOR:
            answer = kp.coordinator_answer(seg.data, version)
            if answer is not None:
                broker_id, host, port = answer
                bounded.put(self.coordinators, (host, port), broker_id, MAX_COORDINATORS)
        elif key in kp.SASL_APIS:
            flow.auth_failed |= kp.error_code(seg.data, key, version) not in (0, None)
