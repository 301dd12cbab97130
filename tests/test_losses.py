"""Which sockets a process opened after it lost every connection to its cluster
(kmon.engine.losses), from the kernel's events as ``ConnectionLives`` folds them: the same
answer whenever a view polls (issue 33: one verdict in every view). The events are built by
hand in the order the kernel gives them; everything else is the product's own code."""

from __future__ import annotations

import math
import random

from kmon.engine.connection_lives import REJECTED_WITHIN_MS, ConnectionLives
from kmon.engine.losses import LossHistory
from kmon.model import Opening
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
        return {port for port, opening in self.told(events, holding, at_ms).items()
                if opening is Opening.LOST}

    def told(self, events: list[TcpEvent], holding: list[int], at_ms: float = 500,
             complete_ms: float = math.inf) -> dict[int, Opening | None]:
        """What the process held when each socket of ``holding`` opened, every event before
        ``complete_ms`` fed."""
        opened, _ = self.lives.feed(events, {PID})
        self.losses.opened(opened)
        found = self.losses.openings(PID, [pair(p) for p in holding], self.lives.unfollowed,
                                     at_ms, complete_ms)
        return {local[1]: opening for (local, _), opening in found.items()}


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


def test_a_connect_read_before_the_close_that_came_before_it_waits_for_that_close():
    """The kernel's rings are read in turn, one per CPU: a read that began at 1 000.5 ms gave
    the re-bootstrap's connect at 1 001 (its ring was read after it) but not the broker's
    close of the connection before it at 1 000 (its ring was read before the close). Told
    then, the re-bootstrap was held (the close unknown), where a view reading a moment
    later tells it opened after a loss; decided at the next read, it is told alike."""
    racy, calm = View(), View()
    for view in (racy, calm):
        view.told([], [1])
    assert racy.told(REBOOTSTRAP, [2], 1_100, complete_ms=1_000.5) == {2: None}
    assert racy.told(REAPED, [2], 1_600, complete_ms=1_500) == {2: Opening.LOST}
    assert calm.told([*REAPED, *REBOOTSTRAP], [2], 1_600, complete_ms=1_500) == {
        2: Opening.LOST}


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


def test_a_connect_after_the_client_closed_its_last_one_itself_is_alone():
    """A client per message: the process's first client connects (its bootstrap), moves on
    to its broker and closes everything; the next client's bootstrap opens with nothing
    held, the last closed by the client: ALONE (a new client or a reconnect: kmon cannot
    tell). The move from a bootstrap (the first connection, or one after a loss) to the
    broker is HELD, as is a connect beside an open connection."""
    view = View()
    view.poll([], [])  # kmon's first look: the process holds nothing
    first = opens(1_000, 11, 1)
    assert view.told(first, [1]) == {1: Opening.FIRST}
    moved = [*closes(1_010, 11, 1, "client"), *opens(1_010.5, 12, 2)]
    assert view.told(moved, [2]) == {2: Opening.HELD}
    ended = closes(1_100, 12, 2, "client")
    assert view.told([*ended, *opens(1_600, 13, 3)], [3]) == {3: Opening.ALONE}
    assert view.told(opens(1_700, 14, 4), [3, 4]) == {3: Opening.ALONE, 4: Opening.HELD}
    again = View()  # after a re-bootstrap, the client's move to its broker is HELD too
    again.poll([], [1])
    assert again.told([*REAPED, *REBOOTSTRAP, *MOVED_ON], [3]) == {3: Opening.HELD}


def test_a_connect_whose_later_steps_never_came_is_not_held():
    """The kernel's events gave a connect and nothing after it (seen in the ground-truth
    harness: its steps lost while the kernel filter changed, or the same connect given twice
    with stamps apart, the second taking the first's place): that life never closes, and was
    taken for a connection held beside every later socket, so a re-bootstrap after a loss
    was told no loss (and a new client's bootstrap a broker connection)."""
    view = View()
    view.poll([], [1])
    stray = opens(900, 21, 9)[:1]  # its SYN_SENT only
    assert view.poll([*stray, *REAPED, *REBOOTSTRAP], [2]) == {2}


def test_a_connection_gone_from_the_sockets_with_its_close_unseen_is_not_held():
    """A view whose first look found a connection and whose events never gave its close
    (the kernel filter followed its port only from that look on: seen in the ground-truth
    harness's ``kmon record``), or a life whose close step was lost: once a read of the
    process's sockets lacks it, it had closed, and no later socket opened beside it."""
    view = View()
    view.poll([], [1], at_ms=500)  # port 1 held at the first look; its close never comes
    assert view.told([], [], at_ms=1_000) == {}  # gone from the sockets read at 1 s
    assert view.told(opens(1_500, 12, 2), [2], at_ms=1_600) == {2: Opening.ALONE}
    lost_close = View()
    lost_close.poll([], [], at_ms=500)
    assert lost_close.told(opens(600, 11, 1), [1], at_ms=700) == {1: Opening.FIRST}
    lost_close.told([], [], at_ms=1_000)  # port 1 gone, its close step never given
    assert lost_close.told(opens(1_500, 12, 2), [2], at_ms=1_600) == {2: Opening.ALONE}
    still = View()  # one still among the sockets read is held
    still.poll([], [1], at_ms=500)
    assert still.told(opens(1_500, 12, 2), [1, 2], at_ms=1_600) == {2: Opening.HELD}


def test_a_connect_after_the_bootstrap_closed_and_a_broker_refused_is_alone():
    """Seen in the per-ip-limit scenario: the client's first connect to broker 1 is refused
    (the broker's FIN at once) as it closes its bootstrap connection, and it bootstraps
    again: the next connect may be that bootstrap or broker 1 again, so ALONE, not the move
    from a bootstrap to the brokers (HELD)."""
    view = View()
    view.poll([], [])
    assert view.told(opens(1_000, 11, 1), [1]) == {1: Opening.FIRST}
    refused = [*opens(2_000, 12, 2), *closes(2_001, 12, 2, "broker")]
    moved = [*closes(2_001.2, 11, 1, "client"), *opens(2_003, 13, 3)]
    assert view.told([*refused, *moved], [3]) == {3: Opening.ALONE}


def test_a_connect_after_a_broker_refused_the_last_one_is_unplaced_not_a_loss():
    """Seen in the per-ip-limit scenario (the harness named a socket of librdkafka's handle
    ``/1`` bootstrap at 0.7): the client closes its bootstrap connection as it connects to
    broker 1, and the broker, still counting the bootstrap one against its per-IP limit,
    closes that connect at once, after the bootstrap's close. The next connect may be broker
    1's retry or a re-bootstrap, to the same address: REFUSED (kmon cannot place it), not
    LOST (a re-bootstrap). A broker's close of a connection that had lived is a loss."""
    view = View()
    view.poll([], [])
    assert view.told(opens(1_000, 11, 1), [1]) == {1: Opening.FIRST}
    moved = [*opens(2_000, 12, 2), *closes(2_000.5, 11, 1, "client")]
    refused = closes(2_002, 12, 2, "broker")
    assert view.told([*moved, *refused, *opens(2_100, 13, 3)], [3]) == {3: Opening.REFUSED}
    lived = View()
    lived.poll([], [])
    lived.told(opens(1_000, 11, 1), [1])
    later = closes(2_000 + REJECTED_WITHIN_MS + 1, 12, 2, "broker")
    assert lived.told([*moved, *later, *opens(2_400, 13, 3)], [3]) == {3: Opening.LOST}


def test_a_view_polled_at_every_change_tells_what_one_from_scratch_tells():
    """Over random sequences of connects and closes (by the client or the broker), a view
    polled after each change tells every socket as a view that looked first at the same
    moment and then only now."""
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
