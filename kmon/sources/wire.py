"""What a process's Kafka connections carry on the wire: API keys, client ids, the brokers
and coordinators its responses name.

``WireTap`` owns a ``PacketCapture`` filtered to the process's local ports and
to its brokers' ports (so that a connection opened between two polls is seen
from its first request), follows each TCP stream's message boundaries by
sequence number, reads the request headers and the Metadata and
FindCoordinator responses, and keeps one ``Flow`` per socket. Segments of
another process's sockets to the same brokers are dropped once the polls
show they are not this process's. Request bodies are never captured
(``kmon.sources.packet_filter``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from kmon.sources import kafka_protocol as kp
from kmon.sources.packet_capture import PacketCapture, Segment
from kmon.sources.sockets import Endpoint, TcpSocket

SEQ_MOD = 1 << 32
MAX_PENDING = 256  # outstanding requests remembered per socket
UNOWNED_FOR_MS = 10_000  # a stream not (yet) among the process's sockets is kept this long
MAX_FLOWS = 4096
TLS_RECORDS = (b"\x16\x03", b"\x17\x03", b"\x15\x03")  # handshake, application data, alert


class _Stream:
    """Message boundaries in one direction of a TCP connection."""

    def __init__(self) -> None:
        self.next_seq: int | None = None

    def starts(self, seg: Segment, plausible) -> list[bytes]:
        """The captured prefixes of the messages that start in ``seg``."""
        offset = None
        if self.next_seq is not None:
            ahead = (self.next_seq - seg.seq) % SEQ_MOD
            if ahead < seg.length:
                offset = ahead
            elif ahead < SEQ_MOD // 2:
                return []  # the middle of a message, or a retransmission
        if offset is None:  # not in step: a message must start right here
            if not plausible(seg.data):
                self.next_seq = None
                return []
            offset = 0
        found = []
        while offset < seg.length:
            prefix = seg.data[offset:]
            size = int.from_bytes(prefix[:4], "big", signed=True) if len(prefix) >= 4 else -1
            if not 0 < size < 1 << 30:
                self.next_seq = None  # where the next one starts is out of sight
                return found
            found.append(prefix)
            offset += 4 + size
        self.next_seq = (seg.seq + offset) % SEQ_MOD
        return found


@dataclass
class Flow:
    """What one socket carried, as far as kmon has seen."""

    local: Endpoint
    remote: Endpoint
    first_ms: int
    last_ms: int
    api_counts: Counter = field(default_factory=Counter)
    api_last_ms: dict[int, int] = field(default_factory=dict)
    first_request_ms: int | None = None
    client_id: str | None = None
    tls: bool = False
    owned: bool = False  # seen among the process's sockets
    from_start: bool = False  # opened after the tap started: its first requests were seen
    requests: _Stream = field(default_factory=_Stream)
    responses: _Stream = field(default_factory=_Stream)
    pending: dict[int, tuple[int, int]] = field(default_factory=dict)  # correlation -> api

    def apis(self) -> str:
        """The API keys seen, most frequent first: ``Fetch×12 Heartbeat×3``."""
        return " ".join(f"{kp.api_name(k)}×{n}" for k, n in self.api_counts.most_common())


@dataclass
class WireView:
    """What the tap knows after a poll."""

    flows: dict[tuple[Endpoint, Endpoint], Flow]  # (local, remote) of the process's sockets
    brokers: dict[int, tuple[str, int]]  # broker id -> (host, port), from Metadata responses
    coordinators: dict[tuple[str, int], int]  # (host, port) -> broker id, from FindCoordinator
    cluster_learned_ms: int | None  # the first Metadata response naming brokers
    drops: int  # packets the kernel could not queue


class WireTap:
    """The wire source of one process."""

    def __init__(self, sockets: list[TcpSocket], now_ms: int) -> None:
        self.flows: dict[tuple[Endpoint, Endpoint], Flow] = {}
        self.brokers: dict[int, tuple[str, int]] = {}
        self.coordinators: dict[tuple[str, int], int] = {}
        self.cluster_learned_ms: int | None = None
        self.started = {(s.local, s.remote) for s in sockets}
        self.capture = PacketCapture(*self._ports(sockets))

    def close(self) -> None:
        self.capture.close()

    def poll(self, sockets: list[TcpSocket], now_ms: int) -> WireView:
        """Take in the segments queued since the last poll; follow ``sockets`` from now on."""
        mine = {(s.local, s.remote) for s in sockets}
        for seg in self.capture.read():
            self._take(seg, mine)
        for key in list(self.flows):
            flow = self.flows[key]
            flow.owned |= key in mine
            if (key not in mine and (flow.owned or now_ms - flow.first_ms > UNOWNED_FOR_MS)
                    or len(self.flows) > MAX_FLOWS):
                del self.flows[key]
        self.capture.set_ports(*self._ports(sockets))
        return WireView({k: f for k, f in self.flows.items() if k in mine}, dict(self.brokers),
                        dict(self.coordinators), self.cluster_learned_ms, self.capture.drops)

    def learn(self, brokers: dict[int, tuple[str, int]]) -> None:
        """Brokers named by another source (kmon's own Metadata request)."""
        self.brokers.update(brokers)

    def _ports(self, sockets: list[TcpSocket]) -> tuple[set[int], set[int]]:
        """(local ports, remote ports) to capture: the process's, and its brokers'."""
        remote = {s.remote.port for s in sockets} | {port for _, port in self.brokers.values()}
        return {s.local.port for s in sockets}, remote

    def _flow(self, local: Endpoint, remote: Endpoint, ts_ms: int) -> Flow:
        key = (local, remote)
        flow = self.flows.get(key)
        if flow is None:
            flow = self.flows[key] = Flow(local, remote, ts_ms, ts_ms,
                                          from_start=key not in self.started)
        flow.last_ms = ts_ms
        return flow

    def _take(self, seg: Segment, mine: set) -> None:
        if (seg.src, seg.dst) in mine:
            request = True
        elif (seg.dst, seg.src) in mine:
            request = False
        else:  # a socket the polls have not shown (yet): towards a broker port, a request
            request = seg.dst.port in self.capture.remote_ports
        if request:
            self._requests(self._flow(seg.src, seg.dst, seg.ts_ms), seg)
        else:
            self._responses(self._flow(seg.dst, seg.src, seg.ts_ms), seg)

    def _requests(self, flow: Flow, seg: Segment) -> None:
        if flow.first_request_ms is None and seg.data.startswith(TLS_RECORDS):
            flow.tls = True
        if flow.tls:
            return
        for prefix in flow.requests.starts(seg, lambda d: kp.request_header(d) is not None):
            header = kp.request_header(prefix)
            if header is None:
                continue
            flow.api_counts[header.api_key] += 1
            flow.api_last_ms[header.api_key] = seg.ts_ms
            if flow.first_request_ms is None:
                flow.first_request_ms = seg.ts_ms
            if header.client_id:
                flow.client_id = header.client_id
            if header.api_key in (kp.METADATA, kp.FIND_COORDINATOR):
                if len(flow.pending) >= MAX_PENDING:
                    flow.pending.pop(next(iter(flow.pending)))
                flow.pending[header.correlation_id] = (header.api_key, header.api_version)

    def _responses(self, flow: Flow, seg: Segment) -> None:
        def plausible(data: bytes) -> bool:
            return kp.response_correlation(data) in flow.pending

        for prefix in flow.responses.starts(seg, plausible):
            api = flow.pending.pop(kp.response_correlation(prefix), None)
            if api is None:
                continue
            key, version = api
            if key == kp.METADATA:
                brokers = kp.metadata_brokers(prefix, version)
                if brokers:
                    self.brokers.update(brokers)
                    if self.cluster_learned_ms is None:
                        self.cluster_learned_ms = seg.ts_ms
            elif key == kp.FIND_COORDINATOR:
                answer = kp.coordinator_answer(prefix, version)
                if answer is not None:
                    broker_id, host, port = answer
                    self.coordinators[(host, port)] = broker_id
