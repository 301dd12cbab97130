"""A broker's close after no request the wire read is no busy connection's close
(``broker_closed``) but unsettled. Two closes of the ground-truth harness (issue 33) were
told ``broker_closed`` at confidence 1 so:

* per-ip-limit: a limit's close that beat the client's first bytes - the broker's FIN
  1 ms after the connect, before any data either way (1 close in about 9 rejections; a FIN
  rather than a RST only when the acceptor closes before the client's ApiVersions lands);
* sasl-wrong-password: a socket opened before kmon's first poll, its login sent before the
  capture saw the flow; the broker's error answer and its FIN came after (1 close in ~38).

Neither is reproducible on demand with a real broker (a race of microseconds, and of kmon's
start against the client's login), hence the WireClose and KernelLife made here, as the
harness's kept evidence showed them."""

from __future__ import annotations

from kmon.engine.closes import SocketLife, kernel_story, story
from kmon.engine.connection_lives import KernelLife
from kmon.model import Connection, Role, WireClose

BROKER = ("127.0.0.1", 9092)
PRODUCE = 0
LIMITS = {"broker": 600_000}


def row(idle_ms: int) -> Connection:
    return Connection(key="sock:1", role=Role.UNKNOWN, node_id=None, broker_id=None,
                      client=None, local="127.0.0.1:5000", remote="127.0.0.1:9092",
                      state="ESTABLISHED", idle_ms=idle_ms, idle_limits=dict(LIMITS),
                      bytes_sent=188, bytes_received=759)


def polled(idle_ms: int) -> SocketLife:
    """A socket one poll saw open, ``idle_ms`` idle."""
    life = SocketLife(1_000, 1_000, row(idle_ms))
    life.seen(row(idle_ms), 1_000)
    return life


def test_a_broker_fin_before_the_client_s_first_bytes_is_unsettled():
    """The kernel timed the broker's FIN 1 ms after the connect; the wire heard it, and no
    data before it."""
    life = KernelLife(10, 1_000.0, BROKER, ("127.0.0.1", 5000), first_fin="broker",
                      closed_ms=1_001.0)
    assert life.ending is None  # a FIN, not a RST: not the kernel's refusal
    silent = WireClose("broker", reset=False, last_api=None)
    told = kernel_story(life, silent, LIMITS, None)
    assert (told.closed_by, told.reason) == ("broker", "unknown")
    # the broker's close after a request the wire read is the broker's close still
    after_produce = WireClose("broker", reset=False, last_api=PRODUCE, last_data_ms=1_000)
    assert kernel_story(life, after_produce, LIMITS, 1_000.0).reason == "broker_closed"


def test_a_broker_close_after_answers_to_requests_the_wire_never_read_is_unsettled():
    """A socket a poll saw 212 ms idle, opened before the capture saw its flow: the wire
    took the broker's answer (to the login it never read) and its FIN."""
    seen = polled(212)
    late = WireClose("broker", reset=False, last_api=None, last_data_ms=1_090)
    told = story(seen, None, 1_100, late)
    assert (told.closed_by, told.reason) == ("broker", "unknown")
    # an idle reap tells itself by the idle time, whatever the wire read
    reaped = polled(599_000)
    assert story(reaped, None, 2_000, WireClose("broker", False, None)).reason == (
        "broker_idle_reap")


def test_a_simultaneous_close_after_no_request_read_is_unsettled_whichever_side_the_kernel_saw():
    """sasl-wrong-password again (2 closes in about 100 runs, after the rule above): a socket
    ``kmon attach``'s first poll showed, its login sent before the capture opened. The broker
    answered with its error and sent its FIN; the client, reading the error, sent its own
    before it took the broker's: the wire heard the broker's FIN first, the kernel timed the
    client's socket closing first. kmon told ``client/client_closed`` at confidence 1 (the
    kernel's reason, since the rule asked the kernel to say ``broker`` too); the truth is a
    failed login."""
    life = KernelLife(10, 1_000.0, BROKER, ("127.0.0.1", 5000), first_fin="client",
                      closed_ms=1_306.3)
    broker_first = WireClose("broker", reset=False, last_api=None, last_data_ms=1_306,
                             closed_ms=1_306)
    told = kernel_story(life, broker_first, LIMITS, 1_306.0)
    assert (told.closed_by, told.reason) == ("client", "unknown")
    # the client's own close after requests the wire read stays the client's
    after_produce = WireClose("client", reset=False, last_api=PRODUCE, last_data_ms=1_306,
                              from_start=True)
    assert kernel_story(life, after_produce, LIMITS, 1_306.0).reason == "client_closed"
