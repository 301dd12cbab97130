"""Which sockets a process opened after it lost every connection to its cluster
(kmon.engine.losses), from the kernel's events as ``ConnectionLives`` folds them: the same
answer whenever a view polls (issue 33: one verdict in every view). The events are built by
hand in the order the kernel gives them; everything else is the product's own code."""

from __future__ import annotations

import random

from kmon.engine.connection_lives import ConnectionLives
from kmon.engine.losses import LossHistory
from kmon.sources.kernel.kernel_events import TcpEvent

PID = 4242
BROKER = ("127.0.0.1", 9092)
SYN_SENT, ESTABLISHED, FIN_WAIT1, CLOSE_WAIT = 2, 1, 4, 8


def opens(ts: float, skaddr: int, port: int) -> list[TcpEvent]:
    return [TcpEvent(ts, "state", PID, skaddr, ("127.0.0.1", 0), BROKER, 7, SYN_SENT),
            TcpEvent(ts + 0.2, "state", PID, skaddr, ("127.0.0.1", port), BROKER, SYN_SENT,
                     ESTABLISHED)]


def closes(ts: float, skaddr: int, port: int, by: str) -> list[TcpEvent]:
    new = FIN_WAIT1 if by == "client" else CLOSE_WAIT
    return [TcpEvent(ts, "state", 0, skaddr, ("127.0.0.1", port), BROKER, ESTABLISHED, new)]


def pair(port: int) -> tuple[tuple[str, int], tuple[str, int]]:
    return ("127.0.0.1", port), BROKER


class View:
    """One monitor's kernel history: fed the events up to each of its polls."""

    def __init__(self) -> None:
        self.lives, self.losses = ConnectionLives(), LossHistory()

    def poll(self, events: list[TcpEvent], holding: list[int], at_ms: float = 500) -> set[int]:
        """The ports of ``holding`` (the process's sockets, read at ``at_ms``) opened after a
        loss."""
        return {port for port, lost in self.told(events, holding, at_ms).items() if lost}

    def told(self, events: list[TcpEvent], holding: list[int],
             at_ms: float = 500) -> dict[int, bool | None]:
        opened, _ = self.lives.feed(events, {PID})
        self.losses.opened(opened)
        found = self.losses.after_loss(PID, [pair(p) for p in holding], self.lives.unfollowed,
                                       at_ms)
        return {local[1]: lost for (local, _), lost in found.items()}


# librdkafka under a broker's idle limit: its broker connection (open before kmon looked) is
# reaped by the broker; it re-bootstraps (port 2), closes that itself and connects to broker 1
REAPED = closes(1_000, 11, 1, "broker")
REBOOTSTRAP = opens(1_001, 12, 2)
MOVED_ON = [*closes(2_000, 12, 2, "client"), *opens(2_001, 13, 3)]


def test_a_socket_opened_once_the_broker_closed_the_last_one_is_after_a_loss():
    view = View()
    assert view.poll([], [1]) == set()  # kmon's first look: the process holds port 1
    assert view.poll([*REAPED, *REBOOTSTRAP], [2]) == {2}
    assert view.poll(MOVED_ON, [3]) == set()  # after its own close of the bootstrap


def test_every_view_decides_alike_whenever_it_polls():
    """A view that polled while the re-bootstrap was open and one that never saw it open
    (it lived between two of its polls) tell the next socket alike, and the re-bootstrap
    alike where both saw it."""
    often, seldom = View(), View()
    often.poll([], [1])
    seldom.poll([], [1])
    assert often.poll([*REAPED, *REBOOTSTRAP], [2]) == {2}
    assert often.poll(MOVED_ON, [3]) == seldom.poll([*REAPED, *REBOOTSTRAP, *MOVED_ON], [3])
    late = View()  # polled first with the process's first connection open, then the rest
    late.poll([], [1])
    late.poll(REAPED, [])
    assert late.poll(REBOOTSTRAP, [2]) == {2}


def test_a_socket_read_before_its_close_and_fed_after_it_is_told_alike():
    """A view reads the process's sockets, then feeds the kernel's events: a re-bootstrap
    that the client closed in between is in the sockets read, its life already closed. It
    is told opened after the loss, as by a view whose feed came before the close (a
    recording named it ``broker`` at its last poll where the stream said ``bootstrap``)."""
    before_close, after_close = View(), View()
    before_close.poll([], [1])
    after_close.poll([], [1])
    assert before_close.poll([*REAPED, *REBOOTSTRAP], [2]) == {2}
    assert after_close.poll([*REAPED, *REBOOTSTRAP, *closes(2_000, 12, 2, "client")],
                            [2]) == {2}


def test_a_reconnect_after_the_client_s_own_idle_close_is_no_loss():
    view = View()
    view.poll([], [1])
    assert view.poll([*closes(1_000, 11, 1, "client"), *opens(1_500, 12, 2)], [2]) == set()


def test_a_socket_opened_beside_another_still_open_is_no_loss():
    view = View()
    view.poll([], [1, 5])  # two connections, one reaped by the broker, the other held
    assert view.poll([*REAPED, *REBOOTSTRAP], [5, 2]) == set()


def test_a_socket_whose_predecessor_s_close_was_not_seen_is_not_decided():
    view = View()
    view.poll([], [1])  # port 1's close never reaches the events (its port not followed)
    assert view.poll(REBOOTSTRAP, [2]) == set()


def test_a_socket_opened_before_a_view_s_first_look_is_not_told():
    """A view whose first look came after the socket's connect (kmon started meanwhile)
    does not know what the process held before it: it cannot tell, and says so."""
    view = View()
    assert view.told([*REAPED, *REBOOTSTRAP], [2], at_ms=1_500) == {2: None}


def test_a_connection_caught_opening_at_the_first_look_is_no_socket_from_before():
    """The first look read a socket whose life had no local port yet (its established step
    came after): once the life has it, it is that life, not a connection from before kmon
    looked that would still be held."""
    view = View()
    first = opens(400, 13, 3)
    view.lives.feed(first[:1], {PID})  # its connect only, then the first look
    view.losses.opened(view.lives.open.values())
    assert view.told([], [3]) == {}
    moved = [first[1], *closes(1_000, 13, 3, "broker"), *opens(1_001, 12, 2)]
    assert view.poll(moved, [2], at_ms=1_100) == {2}


def test_a_view_polled_at_every_change_tells_what_one_from_scratch_tells():
    """Over random sequences of connects and closes (by the client or the broker), a view
    polled after each change (most polls see no connection the kernel followed: they read
    none of the process's sockets) tells every socket as a view that looked first at the
    same moment and then only now."""
    for seed in range(40):
        rng = random.Random(seed)
        held = {port: None for port in range(1, rng.randint(1, 3) + 1)}  # from before kmon
        often, events, ts, next_port = View(), [], 1_000.0, 100
        first_look = list(held)
        assert often.told([], first_look, at_ms=500) == {}
        for _ in range(30):
            new: list[TcpEvent] = []
            if rng.random() < 0.4:
                for _ in range(rng.choice((0, 1, 1, 2))):
                    next_port += 1
                    new += opens(ts, next_port, next_port)
                    held[next_port] = None
                    ts += 1
            elif held and rng.random() < 0.6:
                port = rng.choice(list(held))
                del held[port]
                new += closes(ts, port, port, rng.choice(("client", "broker")))
            ts += rng.choice((1, 300))
            events += new
            scratch = View()
            scratch.told([], first_look, at_ms=500)
            assert often.told(new, list(held), at_ms=ts) == scratch.told(events, list(held),
                                                                          at_ms=ts)


def test_a_process_no_connection_of_which_was_followed_has_its_sockets_left_unread():
    """The cost follows change: after the first look, a poll of a process whose connections
    the kernel followed none of reads none of its sockets (a host of silent clients)."""
    view = View()
    view.told([], [1, 2])
    read = []
    sockets = (read.append(port) or pair(port) for port in (1, 2))
    assert view.losses.after_loss(PID, sockets, view.lives.unfollowed, 600) == {}
    assert read == []
