"""The wire of one process as the sampler gathers it: its packet tap (its own, or its part of
the host's one capture), opened at the first read, and kmon's own Metadata query to a broker
the process talks Kafka to.

``read`` hands over what the tap saw since the last read (``WireReading``), with the brokers
of a query that has answered taught to the tap first. ``ask`` starts one query, on a thread
of its own (``BrokerQuery``), to the first of the peers the evidence could not name that
was not asked yet: a slow peer delays no poll, and its answer is in a later read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kmon.sources.brokers.broker_query import BrokerQuery
from kmon.sources.kernel.sockets import Endpoint, TcpSocket
from kmon.sources.packets.host_wire import HostWire, SharedCapture
from kmon.sources.packets.kafka_wire import WireTap, WireView

MAX_ASKED = 16  # peers kmon asks for the cluster's brokers, at most, per process
NO_CAPTURE = ("roles from the wire need CAP_NET_RAW (run kmon as root); they come from the "
              "other evidence")


@dataclass(frozen=True)
class WireReading:
    """What the wire of a process told at one poll: its view, or why it cannot be read."""

    view: WireView | None
    problem: str | None = None


class ProcessWire:
    """The wire source of one process: its tap and kmon's own broker query."""

    def __init__(self, host: HostWire | None = None) -> None:
        self.host = host  # the host's one capture, else the process gets a tap of its own
        self.shared: SharedCapture | None = None
        self.tap: WireTap | None = None
        self.problem: str | None = None
        self.asked: set[Endpoint] = set()  # peers kmon asked for the cluster's brokers
        self.query: BrokerQuery | None = None  # the one under way

    def read(self, sockets: list[TcpSocket], now_ms: int) -> WireReading:
        """What the tap saw since the last read (opening it at the first)."""
        if self.problem is not None:
            return WireReading(None, self.problem)
        try:
            if self.tap is None:
                self.shared = None if self.host is None else self.host.share()
                self.tap = WireTap(sockets, now_ms, self.shared)
            pairs = [(s.local, s.remote) for s in sockets]
            if self.shared is not None and pairs != self.tap.pairs:  # the last poll's: owned
                self.shared.own([((local.ip, local.port), (remote.ip, remote.port))
                                 for local, remote in pairs], now_ms)
            elif self.shared is not None:
                self.shared.host.expire(now_ms)
            answer = self._answer()
            if answer:
                self.tap.learn(answer, now_ms)
            return WireReading(self.tap.poll(sockets, now_ms))
        except PermissionError:
            self.problem = NO_CAPTURE
        except OSError as err:
            self.problem = (f"the wire cannot be read ({err.strerror or err}); roles come from "
                            "the other evidence")
        self.close()
        return WireReading(None, self.problem)

    def ask(self, peers: Iterable[Endpoint]) -> None:
        """Ask the first of ``peers`` not asked yet for the cluster's brokers, unless a query
        is under way or ``MAX_ASKED`` have been asked."""
        if self.query is not None or len(self.asked) >= MAX_ASKED:
            return
        peer = next((p for p in peers if p not in self.asked), None)
        if peer is not None:
            self.asked.add(peer)
            self.query = BrokerQuery(peer)

    def close(self) -> None:
        """Close the tap; idempotent."""
        if self.tap is not None:
            self.tap.close()
            self.tap = None
        elif self.shared is not None:
            self.shared.close()
        self.shared = None

    def _answer(self) -> dict[int, tuple[str, int]] | None:
        """The brokers the query under way named, once it has come."""
        query = self.query
        if query is None or not query.done:
            return None
        self.query = None
        return query.answer
