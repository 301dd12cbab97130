"""A connection the broker resets right after a failed SASL login, between two polls: the
kernel alone sees a per-IP limit's refusal (a RST before any FIN within 250 ms of the
connect), the wire saw the login request and the broker's reset after it. The wire decides:
a failed login (``auth_failed``), never ``per_ip_rejected`` (seen so in the ground-truth
harness's sasl-wrong-password scenario)."""

from __future__ import annotations

from kmon.engine.kernel_watch import KernelWatch
from kmon.model import EventKind, ProcessView, WireClose
from kmon.sources.kernel.kernel_events import TcpEvent

LOCAL, BROKER = ("127.0.0.1", 50000), ("127.0.0.1", 9093)
SASL_AUTHENTICATE = 36
SYN_SENT, ESTABLISHED, CLOSE = 2, 1, 7


class ReplayedEvents:
    """A stand-in for the kernel's events replaying one recorded sequence: a broker's reset
    landing inside the per-IP window after a failed login is not produced on demand."""

    def __init__(self, events: list[TcpEvent]) -> None:
        self.events, self.lost, self.ports = events, 0, frozenset()
        self.cut_short = False

    def watch_ports(self, ports) -> None:
        self.ports = frozenset(ports)

    def read(self) -> list[TcpEvent]:
        events, self.events = self.events, []
        return events


def reset_after_login() -> list[TcpEvent]:
    return [TcpEvent(0, "state", 10, 1, LOCAL, BROKER, CLOSE, SYN_SENT),
            TcpEvent(1, "state", 10, 1, LOCAL, BROKER, SYN_SENT, ESTABLISHED),
            TcpEvent(130, "reset_in", 0, 1, LOCAL, BROKER),
            TcpEvent(130, "state", 0, 1, LOCAL, BROKER, ESTABLISHED, CLOSE)]


def test_a_reset_the_wire_saw_end_a_login_is_a_failed_login_not_a_per_ip_refusal():
    watch = KernelWatch(ReplayedEvents(reset_after_login()), {9093})
    view = ProcessView(10, "p", "p")
    view.wire_closes = {("127.0.0.1:50000", "127.0.0.1:9093"): WireClose(
        "broker", reset=True, last_api=SASL_AUTHENTICATE, answers_heard=False)}
    _, closed, told = watch.poll([view])
    assert [(life.ending, life.login_failed) for life in closed] == [(None, True)]
    closes = [e.close for e in told if e.kind is EventKind.CLOSED]
    assert [(c.closed_by, c.reason) for c in closes] == [("broker", "auth_failed")]


def test_without_the_wire_the_same_reset_is_still_a_per_ip_refusal():
    """(With another refusal by the broker soon after: one alone is unsettled.)"""
    again = [TcpEvent(ts + 400, *rest) for ts, *rest in reset_after_login()]
    watch = KernelWatch(ReplayedEvents(reset_after_login() + [
        event._replace(skaddr=2, local=("127.0.0.1", 50001)) for event in again]), {9093})
    view = ProcessView(10, "p", "p")
    watch.poll([view], 1_000)  # a refusal no poll saw waits 2 s (a dying broker refuses next)
    _, closed, _ = watch.poll([view], 3_000)
    assert [life.ending for life in closed] == ["per_ip_rejected"] * 2
