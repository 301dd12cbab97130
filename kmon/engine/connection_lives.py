"""Each connection's life from the kernel's own TCP events: who opened it and when, who
sent the first FIN or a RST, when it closed; and how it ended in a word.

A connection is followed from the ``SYN_SENT`` transition made in a watched
process's context (``connect()`` runs there, so that event names the opener);
its later transitions and resets are joined by the socket's kernel address.
Sockets no watched process opened (the brokers' side, other programs) are
never followed. The table is bounded: a process opening sockets without end
cannot make it grow past ``MAX_OPEN``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from kmon.model import ConnectionLife, Opening
from kmon.sources.kernel.kernel_events import TCP_CLOSE, TCP_SYN_SENT, TcpEvent

MAX_OPEN = 8192  # connections followed at once; past it the oldest are forgotten
MAX_UNFOLLOWED = 4096  # first close steps of connections not followed, the latest kept
MAX_STRANGERS = 1024  # processes not watched that connected, kept between two searches
MAX_STRANGER_REMOTES = 64  # ... and the remotes each connected to
REJECTED_WITHIN_MS = 250  # reset by the broker this soon after its connect: refused
TCP_ESTABLISHED, TCP_FIN_WAIT1, TCP_CLOSE_WAIT = 1, 4, 8


@dataclass
class KernelLife:
    """One connection as the kernel saw it (times in UTC epoch ms, exact)."""

    pid: int
    opened_ms: float
    remote: tuple[str, int] | None
    local: tuple[str, int] | None = None
    first_fin: str | None = None  # who closed first: client or broker
    reset: str | None = None  # who reset it: client or broker
    closed_ms: float | None = None  # its first FIN or RST (or CLOSE): when it began to close
    never_established: bool = False  # it went from SYN_SENT straight to CLOSE
    # it reached ESTABLISHED (a RST it sends before, in SYN_SENT, answers an ACK that fits
    # no SYN of its own, the broker's end of an earlier connection on the same ports in
    # TIME_WAIT: the kernel sends its SYN again, and the connect goes on)
    established: bool = False
    # what the process held when it opened (``losses``); None: not decided yet
    opening: Opening | None = None
    # when a read of its process's sockets first lacked it, its close not seen (``losses``)
    gone_ms: float | None = None
    # its broker was going: connects to it were refused right after it closed, or the
    # broker closed other connections at once (kmon.engine.kernel_watch)
    listener_gone: bool = False
    # refused at once, yet no other connect to its broker was within REFUSED_AGAIN_WITHIN_MS:
    # a limit's refusal or a dying broker's reset, unsettled (kmon.engine.kernel_watch)
    alone: bool = False
    login_failed: bool = False  # the wire saw the broker close it on a failed SASL login

    @property
    def lifetime_ms(self) -> int | None:
        return None if self.closed_ms is None else round(self.closed_ms - self.opened_ms)

    @property
    def closed_by(self) -> str:
        """client, broker or unknown: the first FIN's side, else the RST's."""
        return self.first_fin or self.reset or "unknown"

    @property
    def refused(self) -> bool:
        """A connect answered by a RST: nothing listens there (a per-IP limit accepts first)."""
        return self.never_established and self.reset == "broker"

    @property
    def ending(self) -> str | None:
        """connect_failed (never established), per_ip_rejected (reset by the broker, no FIN
        first, within REJECTED_WITHIN_MS of its connect, while the broker still listens, and
        not ``alone``: another connect to the broker was refused so near it) or
        None (an ordinary close, or one whose steps the port filter did not yet pass: its
        port was learned from its open).

        A per-IP limit's acceptor closes before reading a byte, and every Kafka client speaks
        first (ApiVersions, a TLS ClientHello): Linux answers a close with unread data by a
        RST. A broker's FIN says it had read all that came, so it may have answered: a failed
        login is closed so, ``connection.failed.authentication.delay.ms`` (100 ms) after its
        error, well within the window; a limit's FIN (a close that beat the client's first
        bytes) is left an ordinary close. A reset the wire saw end a failed login
        (``login_failed``: the broker read the login and answered) is no refusal either."""
        if self.closed_ms is None:
            return None
        if self.never_established:
            return "connect_failed"
        if (self.reset == "broker" and self.first_fin is None and not self.listener_gone
                and not self.login_failed and not self.alone
                and self.closed_ms - self.opened_ms <= REJECTED_WITHIN_MS):
            return "per_ip_rejected"
        return None

    def recorded(self) -> ConnectionLife:
        """The life as a recording keeps it (once it has closed)."""
        return ConnectionLife(self.pid, _text(self.local), _text(self.remote),
                              round(self.opened_ms), round(self.closed_ms or self.opened_ms),
                              self.closed_by,
                              self.ending)

    def where(self) -> str:
        return f"{self.remote[0]}:{self.remote[1]}" if self.remote else "?"


def _text(address: tuple[str, int] | None) -> str | None:
    """An address as kmon prints endpoints (kmon.sources.kernel.sockets.Endpoint)."""
    if address is None:
        return None
    ip, port = address
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


class ConnectionLives:
    """The open connections of the watched processes, followed event by event."""

    def __init__(self) -> None:
        self.open: dict[int, KernelLife] = {}  # by socket address, oldest first
        self.forgotten = 0  # connections dropped because the table was full
        # processes not watched that connected since ``take_strangers``: PID -> remotes
        self.strangers: dict[int, set[tuple[str, int]]] = {}
        self.strangers_overflowed = False  # more of them than MAX_STRANGERS
        # the first close step of a connection not followed (opened before the events ran):
        # (local, remote) -> (when, who closed it first: client, broker or unknown)
        self.unfollowed: OrderedDict[tuple[tuple[str, int], tuple[str, int]],
                                     tuple[float, str]] = OrderedDict()
        # ... those the broker began, since ``take_broker_ends``: ((local, remote), when)
        self.broker_ends: list[tuple[tuple[tuple[str, int], tuple[str, int]], float]] = []

    def feed(self, events: Iterable[TcpEvent],
             watched: set[int]) -> tuple[list[KernelLife], list[KernelLife]]:
        """Fold in ``events`` (oldest first): the connections they opened and those they
        closed (at their first FIN or RST: what follows tells nothing more). A received RST
        is timed but ends the life only at the state change it causes, which tells a
        refused connect (``SYN_SENT`` to ``CLOSE``) from a reset connection. A RST the
        client sends is recorded just after the close it follows (the kernel closes the
        socket, then sends it): one read later in this batch still names the client."""
        opened, closed = [], []
        ended: dict[int, KernelLife] = {}  # lives this batch closed, by socket address
        for event in events:
            if event.kind == "state" and event.new_state == TCP_SYN_SENT:
                if event.pid in watched:
                    opened.append(self._start(event))
                else:
                    self.open.pop(event.skaddr, None)  # the address now holds another socket
                    self._stranger(event)
                continue
            life = self.open.get(event.skaddr)
            if life is None:
                aborted = ended.get(event.skaddr)
                if event.kind == "reset_out" and aborted is not None and (
                        aborted.closed_by == "unknown"):
                    aborted.reset = "client"
                else:
                    self._unfollowed(event)
                continue
            if event.kind == "reset_in":  # from the socket's side: its local address too
                life.reset, life.local = "broker", event.local or life.local
                life.closed_ms = event.ts_ms
                continue
            if event.kind == "reset_out":
                if not life.established:  # it answered a stale ACK: its connect goes on
                    continue
                life.reset = "client"
            elif not self._step(life, event):
                continue
            if life.closed_ms is None:
                life.closed_ms = event.ts_ms
            closed.append(self.open.pop(event.skaddr))
            ended[event.skaddr] = life
        return opened, closed

    def _unfollowed(self, event: TcpEvent) -> None:
        """Note the first close step of an established connection no life follows."""
        if event.local is None or event.remote is None:
            return
        if event.kind == "reset_in":
            side = "broker"
        elif event.kind == "state" and event.old_state == TCP_ESTABLISHED:
            side = {TCP_FIN_WAIT1: "client", TCP_CLOSE_WAIT: "broker"}.get(event.new_state,
                                                                          "unknown")
        else:
            return
        pair = (event.local, event.remote)
        if pair not in self.unfollowed:
            self.unfollowed[pair] = (event.ts_ms, side)
            while len(self.unfollowed) > MAX_UNFOLLOWED:
                self.unfollowed.popitem(last=False)
            if side == "broker" and len(self.broker_ends) < MAX_UNFOLLOWED:
                self.broker_ends.append((pair, event.ts_ms))

    def _stranger(self, event: TcpEvent) -> None:
        ports = self.strangers.get(event.pid)
        if ports is None:
            if len(self.strangers) >= MAX_STRANGERS:
                self.strangers_overflowed = True
                return
            ports = self.strangers[event.pid] = set()
        if event.remote is not None:
            if len(ports) >= MAX_STRANGER_REMOTES:
                self.strangers_overflowed = True
                return
            ports.add(event.remote)

    def take_strangers(self) -> tuple[dict[int, set[tuple[str, int]]], bool]:
        """The processes not watched that connected since the last call (PID -> the (ip,
        port) they connected to), and whether there were more than could be kept."""
        strangers, overflowed = self.strangers, self.strangers_overflowed
        self.strangers, self.strangers_overflowed = {}, False
        return strangers, overflowed

    def take_broker_ends(self) -> list[tuple[tuple[tuple[str, int], tuple[str, int]], float]]:
        """The connections no life follows whose close the broker began since the last call:
        ((local, remote), when), at most MAX_UNFOLLOWED."""
        ends, self.broker_ends = self.broker_ends, []
        return ends

    def _start(self, event: TcpEvent) -> KernelLife:
        self.open.pop(event.skaddr, None)
        while len(self.open) >= MAX_OPEN:
            del self.open[next(iter(self.open))]
            self.forgotten += 1
        life = KernelLife(event.pid, event.ts_ms, event.remote)
        self.open[event.skaddr] = life
        return life

    @staticmethod
    def _step(life: KernelLife, event: TcpEvent) -> bool:
        """Fold in one state change; True when it ends the life."""
        if event.local and event.local[1]:
            life.local = event.local
        old, new = event.old_state, event.new_state
        life.established = life.established or TCP_ESTABLISHED in (old, new)
        if old == TCP_SYN_SENT and new == TCP_CLOSE:
            life.never_established = True
        elif new == TCP_FIN_WAIT1:
            life.first_fin = "client"
        elif new == TCP_CLOSE_WAIT:
            life.first_fin = "broker"
        # ESTABLISHED -> CLOSE with no RST read says no side: the broker's RST unread, the
        # client's still to come (``feed``), or the kernel's retries run out
        return new == TCP_CLOSE or old == TCP_ESTABLISHED
