"""Who closed a connection and why: the rules on constructed histories, then real clients,
a real cluster killed, a stand-in proxy that closes or resets idle connections, and a
stand-in broker that resets a busy one or ends a login (as the wire sees them)."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import struct
import sys
import threading
import time
from dataclasses import replace

import pytest
from helpers import PER_MESSAGE, Child, closed_events, read_until

from kmon.engine.closes import SocketLife, closed_by, in_words, reason, story
from kmon.model import Connection, Role, WireClose

BROKER_LIMITS = {"broker": 600_000}


def row(state: str = "ESTABLISHED", idle: int = 0, limits: dict | None = None) -> Connection:
    return Connection(key="sock:1", role=Role.BROKER, node_id=1, broker_id=1, client="c",
                      local="127.0.0.1:5000", remote="127.0.0.1:9092", state=state,
                      idle_ms=idle, idle_limits=limits or dict(BROKER_LIMITS),
                      bytes_sent=10, bytes_received=20, requests_sent=2, requests_received=2)


def life(*states: str, idle: int = 0, limits: dict | None = None) -> SocketLife:
    lived = SocketLife(1_000, 1_000, row(states[0], idle, limits))
    for ts, state in enumerate(states, start=2):
        lived.seen(row(state, idle, limits), ts * 1000)
    return lived


def test_the_side_that_closed_first_is_in_the_states_or_the_kernel():
    assert closed_by(life("ESTABLISHED", "FIN_WAIT2"), None) == "client"
    assert closed_by(life("ESTABLISHED", "CLOSE_WAIT"), None) == "broker"
    assert closed_by(life("ESTABLISHED"), "TIME_WAIT") == "client"
    assert closed_by(life("ESTABLISHED"), "LAST_ACK") == "broker"
    # gone from the kernel too, no closing state seen: a broker's close the client answered
    # at once, or the client's own reset (test_a_close_gone_without_a_closing_state_...)
    assert closed_by(life("ESTABLISHED"), None) == "unknown"
    # unless the kernel's events saw its first FIN or RST (a socket they did not follow from
    # its connect), after kmon first saw it open: not an earlier socket's on its 4-tuple
    assert closed_by(life("ESTABLISHED"), None, (2_500.0, "broker")) == "broker"
    assert closed_by(life("ESTABLISHED"), None, (500.0, "broker")) == "unknown"
    assert closed_by(life("ESTABLISHED"), None, (2_500.0, "unknown")) == "unknown"


def test_the_reason_follows_the_side_and_the_idle_time_against_each_limit():
    limits = {"client": 3000, "broker": 600_000, "middlebox": 350_000}
    assert reason("client", 2950, limits, True) == "client_idle_reap"
    assert reason("client", 100, limits, True) == "client_closed"
    assert reason("broker", 599_000, {"broker": 600_000}, True) == "broker_idle_reap"
    assert reason("broker", 340_000, limits, True) == "middlebox_idle_drop"
    assert reason("broker", 1_000, limits, True) == "broker_closed"
    assert reason("unknown", 1_000, limits, True) == "unknown"
    assert reason("client", 0, limits, False) == "connect_failed"
    # the client's own limit unknown (no statistics, no JMX): a reap or its application's
    # close after 4 s idle cannot be told apart; a busy connection's close can
    assert reason("client", 4000, {"broker": 600_000}, True) == "unknown"
    assert reason("client", 300, {"broker": 600_000}, True) == "client_closed"


def test_a_client_s_close_is_its_reap_exactly_within_librdkafka_s_window():
    """librdkafka reaps once its idle (never more than the wire's) reaches the limit less a
    jitter of up to 2 s (drawn per broker handle, for a limit of 4 s or more), checked each
    second (closes.client_reap_floor, from its source). Within that window a client's close
    is its reap: 3.1 s of a 5 s limit was ``unknown`` (under the old 78% share), though a
    handle that drew a 1.9 s jitter reaps there. Under it no reap can fall: 2.5 s of a 3 s
    limit (no jitter under 4 s) or 8 minutes of Java's 9 were told a reap (over 78%)."""
    five = {"client": 5000}
    for inside in (2950, 3100, 3500, 3900, 4081, 5191):
        assert reason("client", inside, five, True) == "client_idle_reap", inside
    assert reason("client", 2800, five, True) == "client_closed"  # 2 s and 4% short
    assert reason("client", 2500, {"client": 3000}, True) == "client_closed"
    assert reason("client", 2000, {"client": 3000}, True) == "client_closed"
    assert reason("client", 7100, {"client": 10_000}, True) == "client_closed"
    assert reason("client", 7900, {"client": 10_000}, True) == "client_idle_reap"
    assert reason("client", 480_000, {"client": 540_000}, True) == "client_closed"
    assert reason("client", 538_000, {"client": 540_000}, True) == "client_idle_reap"
    # between two polls: a close the window may hold is the reap (the limit reached in the gap)
    assert reason("client", 2400, five, True, window_ms=1000) == "client_idle_reap"
    assert reason("client", 1800, five, True, window_ms=1000) == "client_closed"


def test_a_close_is_never_idle_longer_than_it_lived():
    """A client's idle stamps can predate its connection (exact open: idle clamped to life);
    a connection opened before kmon saw it lived at least as long as it was idle."""
    from kmon.engine.closes import SocketLife, story
    from kmon.engine.connection_lives import KernelLife
    from kmon.model import Connection, Role

    conn = Connection("sock:1", Role.BROKER, 1, 1, None, "127.0.0.1:50000", "127.0.0.1:9092",
                      "ESTABLISHED", idle_ms=3320, idle_limits={"client": 8000})
    life = SocketLife(10_000, 13_000, conn, {"ESTABLISHED", "FIN_WAIT2"})
    seen = story(life, None, 13_100)
    assert (seen.idle_before_ms, seen.lifetime_ms) == (3320, 3320)
    kernel = KernelLife(10, 5_500.0, ("127.0.0.1", 9092), ("127.0.0.1", 50000),
                        first_fin="client", closed_ms=13_003.0)
    exact = story(life, None, 13_100, exact=kernel)  # idle from 9.68 s, opened at 5.5 s
    assert exact.idle_before_ms <= exact.lifetime_ms == 7503


def test_the_error_code_of_a_sasl_response_is_read_in_either_header_layout():
    from kmon.sources.kafka_protocol import SASL_AUTHENTICATE, SASL_HANDSHAKE, error_code

    def response(correlation: int, body: bytes, flexible: bool) -> bytes:
        header = correlation.to_bytes(4, "big") + (b"\x00" if flexible else b"")
        return (len(header + body)).to_bytes(4, "big") + header + body

    failed = (58).to_bytes(2, "big") + b"\x00\x00\x00\x00"  # SASL_AUTHENTICATION_FAILED
    assert error_code(response(7, failed, False), SASL_AUTHENTICATE, 1) == 58
    assert error_code(response(7, failed, True), SASL_AUTHENTICATE, 2) == 58
    assert error_code(response(7, bytes(2), False), SASL_HANDSHAKE, 1) == 0
    assert error_code(response(7, b"", True)[:9], SASL_AUTHENTICATE, 2) is None  # cut short


def test_a_story_carries_the_totals_and_is_told_in_words():
    told = story(life("ESTABLISHED", idle=599_000), "LAST_ACK", 10_000)
    assert (told.closed_by, told.reason, told.idle_before_ms) == ("broker", "broker_idle_reap",
                                                                  599_000)
    # seen open for 1 s, but idle 599 s: it lived at least that long
    assert (told.bytes_sent, told.requests_sent, told.lifetime_ms) == (10, 2, 599_000)
    assert in_words(told) == "broker idle reap · closed by the broker after 9 m 59 s idle"
    assert in_words(told, {"client": 900_000, "broker": 600_000}) == (
        "broker idle reap · closed by the broker after 9 m 59 s idle (limit 10 m)")
    never = story(life("SYN_SENT"), None, 3_000)
    assert (never.closed_by, never.reason) == ("unknown", "connect_failed")
    # only ever seen in CLOSE (its fd still open): refused, or reset, kmon cannot tell
    closed = story(life("CLOSE"), None, 3_000)
    assert (closed.closed_by, closed.reason) == ("unknown", "unknown")
    # seen connecting, then in CLOSE (a RST answered its SYN, its fd still open): never
    # seen established, so never a broker's close (CI's truth run told one so)
    refused = story(life("SYN_SENT", "CLOSE"), None, 3_000)
    assert (refused.closed_by, refused.reason) == ("unknown", "connect_failed")


def test_the_wire_s_first_fin_or_rst_decides_the_side_and_tells_a_reset_or_failed_login():
    busy = life("ESTABLISHED", idle=200)
    # the kernel would say broker (gone, no TIME_WAIT); the wire saw the client's FIN first
    # gone within 500 ms of a poll that saw it 200 ms idle: busy, closed by the application
    told = story(busy, None, 2_500, WireClose("client", reset=False, last_api=1))
    assert (told.closed_by, told.reason) == ("client", "client_closed")
    assert in_words(told) == "closed by the client after 200 ms idle"
    told = story(busy, None, 5_000, WireClose("broker", reset=True, last_api=1))
    assert (told.closed_by, told.reason) == ("broker", "reset")
    assert in_words(told, {"broker": 600_000}) == "reset · closed by the broker after 200 ms idle"
    told = story(busy, None, 5_000, WireClose("broker", reset=False, last_api=36))
    assert (told.closed_by, told.reason) == ("broker", "auth_failed")
    # librdkafka closes first once it reads the broker's error (a real broker's order)
    told = story(busy, None, 5_000, WireClose("client", reset=False, last_api=36,
                                              auth_failed=True))
    assert (told.closed_by, told.reason) == ("client", "auth_failed")
    told = story(busy, None, 2_500, WireClose("client", reset=False, last_api=36))
    assert told.reason == "client_closed"  # no error seen: a client that just went away
    # the client's close after no request read, of a flow open before the capture saw it:
    # its login (sent before kmon looked) may have failed (the truth harness found one
    # told client_closed at confidence 1, truly auth_failed)
    told = story(busy, None, 2_500, WireClose("client", reset=False, last_api=None,
                                              from_start=False))
    assert (told.closed_by, told.reason) == ("client", "unknown")
    told = story(busy, None, 2_500, WireClose("client", reset=False, last_api=None))
    assert told.reason == "client_closed"  # seen from its opening: nothing went unread
    # one that lived longer than a login takes was past it: told as if seen from its opening
    idle = life("ESTABLISHED", idle=5_000, limits={"client": 5_000})
    told = story(idle, None, 2_500, WireClose("client", reset=False, last_api=None,
                                              from_start=False))
    assert told.reason == "client_idle_reap"
    idle = life("ESTABLISHED", "ESTABLISHED", "ESTABLISHED", "ESTABLISHED", idle=200)
    told = story(idle, None, 5_300, WireClose("client", reset=False, last_api=None,
                                              from_start=False))
    assert told.reason == "client_closed"
    # the idle time explains a reset after the idle limit: a reap, not a reset
    reaped = story(life("ESTABLISHED", idle=599_000), None, 5_000,
                   WireClose("broker", reset=True, last_api=12))
    assert reaped.reason == "broker_idle_reap"


def test_a_close_the_capture_still_held_back_is_told_from_the_kernel_and_unsettled():
    """The wire runs, but the socket went while its capture's ring still held the last
    packets back (the wait for them timed out): whether a FIN, a RST or a failed login ended
    it went unread. The side comes from the kernel, the reason is unsettled; an idle limit
    still explains it, and a kernel that timed the close keeps its own word."""
    from kmon.engine.connection_lives import KernelLife
    from kmon.sources.packets.kafka_wire import UNHEARD

    busy = life("ESTABLISHED", idle=200)
    told = story(busy, None, 5_000, UNHEARD)  # gone, no closing state: either side's
    assert (told.closed_by, told.reason) == ("unknown", "unknown")
    assert in_words(told) == "reason unknown · closed by either side after 200 ms idle"
    told = story(life("ESTABLISHED", "CLOSE_WAIT", idle=200), None, 5_000, UNHEARD)
    assert (told.closed_by, told.reason) == ("broker", "unknown")
    assert in_words(told) == "reason unknown · closed by the broker after 200 ms idle"
    assert story(busy, "TIME_WAIT", 5_000, UNHEARD).closed_by == "client"
    reaped = story(life("ESTABLISHED", idle=599_000), "LAST_ACK", 5_000, UNHEARD)
    assert (reaped.closed_by, reaped.reason) == ("broker", "broker_idle_reap")
    kernel = KernelLife(10, 1_000.0, ("127.0.0.1", 9092), ("127.0.0.1", 5000),
                        reset="broker", closed_ms=4_000.0)
    exact = story(busy, None, 5_000, UNHEARD, exact=kernel)
    assert (exact.closed_by, exact.reason) == ("broker", "reset")


def test_a_timed_close_whose_fin_the_wire_missed_is_unsettled():
    """The kernel timed a client's FIN on a busy connection, but the wire never read it (the
    ring dropped it, or held it back): the last exchange is unknown (a failed login's close
    as much as a plain one), so the side is the kernel's and the reason unsettled; an idle
    limit still explains a reap (issue 33: a failed login told ``client_closed`` at
    confidence 1)."""
    from kmon.engine.closes import kernel_story
    from kmon.engine.connection_lives import KernelLife
    from kmon.sources.packets.kafka_wire import UNHEARD

    closed = KernelLife(10, 1_000.0, ("127.0.0.1", 9092), ("127.0.0.1", 5000),
                        first_fin="client", closed_ms=1_300.0)
    told = kernel_story(closed, UNHEARD, {"broker": 600_000}, 1_299.0)
    assert (told.closed_by, told.reason) == ("client", "unknown")
    reaped = replace(closed, first_fin="broker", closed_ms=601_500.0)
    assert kernel_story(reaped, UNHEARD, {"broker": 600_000}, 1_299.0).reason == (
        "broker_idle_reap")


def test_a_refused_connect_is_closed_by_no_one_whichever_reset_a_view_read():
    """cluster-stopped: the stream's kernel events read a refused connect's SYN_SENT ->
    CLOSE, the recording's the broker's RST too; the recording told it broker/connect_failed,
    the stream unknown/connect_failed. A connect never established was closed by no one:
    every view tells it unknown/connect_failed, as a poll's story does."""
    from kmon.engine.closes import kernel_story
    from kmon.engine.connection_lives import KernelLife

    refused = KernelLife(10, 1_000.0, ("127.0.0.1", 9092), ("127.0.0.1", 5000),
                         reset="broker", closed_ms=1_001.0, never_established=True)
    unread = replace(refused, reset=None)
    assert refused.refused and not unread.refused
    for life in (refused, unread):
        told = kernel_story(life, None, {"broker": 600_000}, None)
        assert (told.closed_by, told.reason) == ("unknown", "connect_failed")


def test_two_views_that_read_a_socket_at_different_moments_time_its_idle_alike():
    """librdkafka closes its ``/bootstrap`` about 1 s after its last request, at the edge
    past which a client's close (its limit unknown) is ``unknown``. Two views of the process
    (the stream and the recording) each last saw it 460 ms idle, one having read its sockets
    60 ms after its poll's time: from their polls one counts it 1007 ms idle, the other 947.
    The capture's stamp of its last data is the same in both: one verdict."""
    from kmon.engine.connection_lives import KernelLife

    kernel = KernelLife(10, 904_910.0, ("127.0.0.1", 9092), ("127.0.0.1", 5000),
                        first_fin="client", closed_ms=905_864.0)
    wire = WireClose("client", reset=False, last_api=3, last_data_ms=904_912)
    read_late = SocketLife(905_317, 905_317, row(idle=460, limits={}))
    read_at_once = SocketLife(905_377, 905_377, row(idle=460, limits={}))
    told = [story(seen, None, 906_000, wire, kernel) for seen in (read_late, read_at_once)]
    assert told[0] == told[1]
    assert (told[0].closed_by, told[0].reason, told[0].idle_before_ms) == (
        "client", "client_closed", 952)


def test_a_close_the_kernel_did_not_time_is_idle_from_the_capture_s_stamps():
    """A consumer's coordinator connection (the truth matrix's rolling-restart): a poll saw
    it 2,960 ms idle; a heartbeat went on it after that poll, and the client closed it 365 ms
    later, before the next. The kernel's events did not follow it. From the poll alone it
    was more than 1 s idle, which a client of unknown limit may have reaped (``unknown``); the
    capture's stamps of its last data and its FIN say 365 ms: the client's close, as another
    view whose poll came after the heartbeat tells it."""
    seen = SocketLife(700_000, 710_320, row(idle=2_960, limits={}), {"ESTABLISHED"})
    wire = WireClose("client", reset=False, last_api=12, last_data_ms=710_370,
                     closed_ms=710_735)
    told = story(seen, None, 710_820, wire)
    assert (told.closed_by, told.reason, told.idle_before_ms) == ("client", "client_closed", 365)
    later = SocketLife(700_000, 710_500, row(idle=130, limits={}), {"ESTABLISHED"})
    again = story(later, None, 710_820, wire)
    assert (again.closed_by, again.reason, again.idle_before_ms) == ("client", "client_closed", 365)
    unstamped = story(seen, None, 710_820, WireClose("client", reset=False, last_api=12))
    assert (unstamped.reason, unstamped.idle_before_ms) == ("unknown", 2_960)


# --- real parts ---------------------------------------------------------------------------

@pytest.mark.integration
def test_librdkafka_idle_reaping_is_the_client_s(start_client):
    producer = start_client("producer", idle_ms=3000)
    stream = Child([sys.executable, "-m", "kmon", "attach", str(producer.pid), "--json",
                    "--interval", "250ms"])
    try:
        closed = closed_events(stream, wanted=2)
        assert len(closed) >= 2, "no connection was reaped within 30 s"
        for event in closed:
            assert (event["closed_by"], event["reason"]) == ("client", "client_idle_reap"), event
            assert event["idle_before_ms"] >= 2700 and event["lifetime_ms"] >= 0
            assert "closed by the client" in event["detail"]
    finally:
        stream.stop()


@pytest.mark.integration
@pytest.mark.root(reason="the packets are the truth: tcpdump needs root")
@pytest.mark.skipif(shutil.which("tcpdump") is None, reason="tcpdump is not installed")
def test_a_killed_cluster_closes_as_the_broker_where_the_packets_say_so(spool_dir):
    """A SIGKILLed cluster closes its sockets one by one as the process exits (50 ms for a
    consumer's handful on a loaded host): librdkafka, having lost one connection to a broker,
    closes its others to it itself meanwhile - its coordinator connection sent the first FIN
    in CI, 0.4 ms before the dying broker's. Each close is told as its packets show it (the
    first FIN or RST; either side where both FINs crossed; ``unknown`` is never wrong), a
    reset where that was a RST, and the broker's among them."""
    from benchmarks.truth.capture import Capture

    cluster = Child([sys.executable, "-m", "kmon", "devcluster", "--brokers", "3"])
    consumer = stream = capture = None
    try:
        bootstrap = cluster.wait_line("127.0.0.1:", timeout=30)
        ports = {int(address.rpartition(":")[2]) for address in bootstrap.split(",")}
        capture = Capture(ports).start()  # before the consumer: each socket from its SYN
        consumer = Child([sys.executable, "-m", "kmon.devtools.workload", "consumer",
                          bootstrap, "--instrument"])
        consumer.wait_line("READY")
        stream = Child([sys.executable, "-m", "kmon", "attach", str(consumer.pid), "--json",
                        "--interval", "200ms"])
        for _ in range(150):  # the start-up settled: the group steady, every socket named
            views = json.loads(stream.wait_line("{"))["processes"]
            roles = {c["role"] for view in views for c in view["connections"]}
            if any(c.get("group_join_state") == "steady" and c.get("group_assignment_size")
                   for view in views for c in view["clients"]) and not (
                    roles & {"bootstrap", "unknown"}):
                break
        else:
            pytest.fail("the consumer's group never settled")
        # the sockets the cluster held: reconnects after the kill may reach a port another
        # test's listener took over meanwhile (the suite runs on two workers)
        held = {c["key"]: c["local"] for view in views for c in view["connections"]}
        killed_ms = int(time.time() * 1000)
        cluster.proc.send_signal(signal.SIGKILL)
        events, _ = read_until(stream, lambda events, _: held.keys() <= {
            e["key"] for e in events if e["kind"] == "closed"}, 30)
        flows = capture.stop()
        capture = None
    finally:
        for child in (stream, consumer, cluster):
            if child is not None:
                child.stop()
        if capture is not None:
            capture.stop()
    told = []
    for e in events:
        if e["kind"] != "closed" or e["ts_ms"] < killed_ms or e["key"] not in held:
            continue
        flow = flows.get((int(held[e["key"]].rpartition(":")[2]),
                          int(e["remote"].rpartition(":")[2])))
        first = None if flow is None or flow.first_close_by is None else (
            "either" if flow.simultaneous else flow.first_close_by.replace("server", "broker"))
        told.append((e["closed_by"], first, e["reason"], flow and flow.first_close_kind,
                     e["role"], held[e["key"]], e["remote"], e["detail"]))
    assert len(told) == len(held) and all(first for _, first, *_ in told), told
    assert any(side == "broker" for side, *_ in told), told
    assert all(side in (first, "unknown") or first == "either" for side, first, *_ in told), told
    assert all((why == "reset") == (kind == "RST") or why == "unknown"
               for _, _, why, kind, *_ in told), told


class IdleProxy:
    """A stand-in for a broker (or a load balancer) that closes idle connections: it
    forwards to an upstream port and, once a connection has carried nothing for
    ``idle_s``, closes it with a FIN, or with a RST (``reset``) as a middlebox does. Its
    idle clock starts once the test says kmon is ``watching``: a kmon slow to start on a
    busy machine would otherwise find the connection already gone."""

    def __init__(self, upstream: int, idle_s: float, reset: bool) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.upstream, self.idle_s, self.reset = upstream, idle_s, reset
        self.watching = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        client, _ = self.listener.accept()
        upstream = socket.create_connection(("127.0.0.1", self.upstream))
        self.watching.wait(60)
        client.settimeout(self.idle_s)
        try:
            while data := client.recv(4096):
                upstream.sendall(data)
        except TimeoutError:
            pass
        if self.reset:
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
        client.close()
        upstream.close()

    def close(self) -> None:
        self.listener.close()


HOLDER = """
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"hello")
print("CONNECTED", flush=True)
try:
    while s.recv(4096):
        pass
except OSError:
    pass
s.close()
time.sleep(60)
"""


@pytest.mark.integration
@pytest.mark.parametrize(("reset", "expected"), [(False, "broker_idle_reap"),
                                                 (True, "middlebox_idle_drop")])
def test_a_broker_or_middlebox_idle_close_through_a_proxy(tmp_path, reset, expected):
    config = tmp_path / "kmon.toml"
    config.write_text('[thresholds]\nmiddlebox_idle = "1500ms"\n' if reset else "")
    with socket.create_server(("127.0.0.1", 0)) as upstream:
        proxy = IdleProxy(upstream.getsockname()[1], idle_s=2.0, reset=reset)
        holder = Child([sys.executable, "-c", HOLDER, str(proxy.port)])
        stream = None
        try:
            holder.wait_line("CONNECTED")
            stream = Child([sys.executable, "-m", "kmon", "attach", str(holder.pid), "--json",
                            "--any-process", "--interval", "200ms", "--config", str(config),
                            "--broker-idle-ms", "2000" if not reset else "600000"])
            stream.wait_line("{", timeout=60)  # kmon has seen the connection once
            proxy.watching.set()
            (event,) = closed_events(stream)
            assert event["closed_by"] == "broker" and event["reason"] == expected, event
            assert event["idle_before_ms"] >= 1500
        finally:
            for child in (stream, holder):
                if child is not None:
                    child.stop()
            proxy.close()


KAFKA_TALKER = """
import socket, struct, sys, time
keys = [int(k) for part in sys.argv[2].split(",")
        for k, _, n in [part.partition("x")] for _ in range(int(n or 1))]
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
print("CONNECTED", flush=True)
try:
    for correlation, api_key in enumerate(keys):  # a request every 100 ms: never idle
        body = struct.pack(">hhih", api_key, 0, correlation, 4) + b"kmon"
        s.sendall(struct.pack(">i", len(body)) + body)
        time.sleep(0.1)
    while s.recv(4096):  # until the broker ends it
        pass
except OSError:
    pass
s.close()
time.sleep(60)
"""


class ClosingBroker:
    """A stand-in for a broker that ends a busy connection on demand (the embedded cluster
    cannot): after ``requests`` requests, once told to (``go``), it resets it (``reset``) or
    closes it with a FIN, as a broker does when an authentication fails."""

    def __init__(self, requests: int, reset: bool) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.requests, self.reset = requests, reset
        self.go = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        client, _ = self.listener.accept()
        with client:
            for _ in range(self.requests):
                (size,) = struct.unpack(">i", client.recv(4, socket.MSG_WAITALL))
                client.recv(size, socket.MSG_WAITALL)
            self.go.wait(60)
            if self.reset:
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    def close(self) -> None:
        self.listener.close()


@pytest.mark.integration
@pytest.mark.root(reason="the wire needs CAP_NET_RAW (root)")
@pytest.mark.parametrize(("requests", "reset", "wire", "expected"), [
    ("12x60", True, "auto", "reset"),  # Heartbeats, a RST after the 30th
    ("18x30,17,36", False, "auto", "auth_failed"),  # ApiVersions, SASL, then the broker's FIN
    ("12x60", True, "off", "broker_closed"),  # without the wire, a RST is a broker's close
])
def test_a_reset_and_a_failed_login_as_the_wire_sees_them(requests, reset, wire, expected):
    broker = ClosingBroker(requests=30 if reset else 32, reset=reset)
    talker = Child([sys.executable, "-c", KAFKA_TALKER, str(broker.port), requests])
    stream = None
    try:
        talker.wait_line("CONNECTED")
        stream = Child([sys.executable, "-m", "kmon", "attach", str(talker.pid), "--json",
                        "--any-process", "--interval", "200ms", "--wire", wire])
        # the close once kmon watches (two polls made: its wire and kernel events open at the
        # first), not while it starts on a busy host
        for _ in range(2):
            stream.wait_line("{")
        broker.go.set()
        (event,) = closed_events(stream)
        assert (event["closed_by"], event["reason"]) == ("broker", expected), event
    finally:
        for child in (stream, talker):
            if child is not None:
                child.stop()
        broker.close()





def churn_events(pid: int, seconds: float) -> list[dict]:
    """The churn events of ``kmon attach PID`` within ``seconds`` (the first poll that has
    any)."""
    stream = Child([sys.executable, "-m", "kmon", "attach", str(pid), "--json", "--interval",
                    "250ms"])
    found, deadline = [], time.monotonic() + seconds
    try:
        while not found and time.monotonic() < deadline:
            record = json.loads(stream.wait_line("{", timeout=seconds))
            found = [e for e in record["events"] if e["kind"] == "churn"]
    finally:
        stream.stop()
    return found


@pytest.mark.integration
def test_a_producer_per_message_raises_churn_and_a_steady_consumer_none(cluster, spool_dir,
                                                                        start_client):
    steady = start_client("consumer")
    steady_churn: list[list[dict]] = []  # watched for 8 s beside the other one
    watch_steady = threading.Thread(target=lambda: steady_churn.append(
        churn_events(steady.pid, 8)), daemon=True)
    watch_steady.start()
    # an unmodified program under kmon's agent: its clients live a few ms, too briefly for
    # any poll to see their sockets, but the agent counts each one made
    per_message = Child([sys.executable, "-m", "kmon", "run", "--", sys.executable, "-c",
                         PER_MESSAGE, cluster])
    try:
        per_message.wait_line("SENT")
        (event,) = churn_events(per_message.pid, 20)[:1]
        assert event["pattern"] == "client_per_message" and event["rate"] >= 60, event
        assert "client instances created a minute" in event["detail"]
    finally:
        per_message.stop()
        watch_steady.join(60)
    assert steady_churn == [[]]


@pytest.mark.integration
def test_the_kernel_lookup_is_what_kmon_runs(tmp_path):
    """closing_states on real sockets: the first closer in TIME_WAIT, the other CLOSE_WAIT."""
    from kmon.sources.kernel.closing_sockets import closing_states
    from kmon.sources.kernel.sockets import Endpoint

    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        first = socket.create_connection(("127.0.0.1", port))
        peer, _ = server.accept()
        pair = (Endpoint("127.0.0.1", first.getsockname()[1]), Endpoint("127.0.0.1", port))
        first.close()
        peer.close()
        deadline = time.monotonic() + 10
        while closing_states([pair]).get(pair) != "TIME_WAIT" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert closing_states([pair]) == {pair: "TIME_WAIT"}


def _closed(way: str) -> tuple[str, list[str], str | None]:
    """A loopback connection closed one ``way``, as kmon's polls read it without the kernel's
    TCP events or the wire: the client's local address, the states polls saw it in, and the
    closing state the kernel holds for its 4-tuple once the client's socket is gone.
    ``reset``: the client closes by a RST (SO_LINGER 0); ``fin``: by a FIN; ``answered``: the
    listening side (the broker) closes, the client at once (as librdkafka does); ``held``: the
    broker closes and a poll sees the client in CLOSE_WAIT before it closes too."""
    from kmon.sources.kernel.closing_sockets import closing_states
    from kmon.sources.kernel.sockets import Endpoint

    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
        local, remote = client.getsockname(), client.getpeername()
        pair = (Endpoint(*local), Endpoint(*remote))
        seen = ["ESTABLISHED"]
        if way in ("answered", "held"):
            peer.close()
            client.recv(1)  # the broker's FIN read
            if way == "held":
                seen += closing_states([pair]).values()  # a poll's read of the open socket
        elif way == "reset":
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()
        peer.close()
        time.sleep(0.2)  # the last segments crossed
        return f"{local[0]}:{local[1]}", seen, closing_states([pair]).get(pair)


@pytest.mark.integration
@pytest.mark.parametrize(("way", "expected"), [
    ("reset", "unknown"),  # the client's RST: no TIME_WAIT, and not the broker's doing
    ("answered", "unknown"),  # the broker's FIN answered at once: no trace either
    ("fin", "client"),  # the client's FIN: TIME_WAIT
    ("held", "broker"),  # CLOSE_WAIT seen
])
def test_a_close_gone_without_a_closing_state_is_either_side_s(way, expected):
    """Real loopback sockets closed each way. A client that resets its connection leaves its
    4-tuple in no closing state, as a broker's close the client answered at once does: no
    TIME_WAIT is no evidence of the broker (it was told ``broker``, the reason from the
    broker's limits). The client's FIN leaves TIME_WAIT behind; a CLOSE_WAIT seen names the
    broker."""
    local, states, kernel_state = _closed(way)
    seen = SocketLife(1_000, 1_000, replace(row(), local=local))
    for ts, state in enumerate(states, start=1):
        seen.seen(replace(row(state), local=local), ts * 1000)
    assert closed_by(seen, kernel_state) == expected, (states, kernel_state)
    told = story(seen, kernel_state, seen.last_seen_ms + 100)  # gone at the next poll
    assert told.closed_by == expected
    assert told.reason == {"unknown": "unknown", "client": "client_closed",
                           "broker": "broker_closed"}[expected]


# --- churn patterns on constructed histories ----------------------------------------------

def test_churn_patterns_from_constructed_polls():
    from kmon.engine.churn import ChurnWatch
    from kmon.model import ChurnThresholds, CloseStory, Event, EventKind, ProcessView

    watch = ChurnWatch(ChurnThresholds())
    views = [ProcessView(pid, "app", "app") for pid in (1, 2, 3)]
    steady = ProcessView(9, "steady", "steady", clients_created=2)

    def closed(ts: int, pid: int, why: str, side: str) -> Event:
        return Event(ts, EventKind.CLOSED, pid, "k", broker_id=1,
                     close=CloseStory(side, why, 600_000, 900_000))

    def opened(ts: int, pid: int) -> Event:
        return Event(ts, EventKind.OPENED, pid, "k", broker_id=1)

    raised = []
    for minute in range(4):  # pid 1: broker 1 reaped idle and reopened every minute
        ts = minute * 60_000
        raised += watch.observe(ts, [views[0], steady],
                                [closed(ts, 1, "broker_idle_reap", "broker"), opened(ts + 1, 1)],
                                {1: 20, 9: 30})
    # raised at the second cycle, then at most once a window
    assert [(e.ts_ms, e.churn.pattern) for e in raised] == [
        (60_000 * m, "idle_reap_cycle") for m in (1, 2, 3)]
    # a bounce: three processes dropped by broker 1 reconnect within seconds
    bounce = 400_000
    drops = [closed(bounce, pid, "broker_closed", "broker") for pid in (1, 2, 3)]
    assert watch.observe(bounce, views + [steady], drops, {}) == []
    # back after a 20 s restart (longer than the storm window): a storm all the same
    reopens = [opened(bounce + 20_000, pid) for pid in (1, 2, 3)]
    storm = watch.observe(bounce + 20_000, views + [steady], reopens, {})
    assert [e.churn.pattern for e in storm] == ["reconnect_storm"]
    assert storm[0].churn.rate == 3 and storm[0].broker_id == 1
    # without the kernel's events a drop the clients answered at once is told unknown: a
    # storm all the same; the clients' own closes are none
    for side, storms in (("unknown", ["reconnect_storm"]), ("client", [])):
        other = ChurnWatch(ChurnThresholds())
        other.observe(bounce, views, [closed(bounce, pid, "unknown", side) for pid in (1, 2, 3)],
                      {})
        again = other.observe(bounce + 20_000, views, reopens, {})
        assert [e.churn.pattern for e in again] == storms, side
    # the agent's count of client instances: 60 more in 10 s
    made = [ProcessView(4, "per-message", "x", clients_created=n) for n in (100, 160)]
    assert watch.observe(500_000, [made[0]], [], {}) == []
    (per_message,) = watch.observe(510_000, [made[1]], [], {})
    assert per_message.churn.pattern == "client_per_message" and per_message.churn.rate == 360
    # none of it was the steady process's
    assert all(e.pid != 9 for e in raised + storm + [per_message])


def test_a_growing_fd_table_is_a_leak_and_a_steady_one_is_not():
    from kmon.engine.churn import ChurnWatch
    from kmon.model import ChurnThresholds, ProcessView

    watch = ChurnWatch(ChurnThresholds(window_ms=10_000, fd_growth=50))
    leaking, steady = ProcessView(1, "a", "a"), ProcessView(2, "b", "b")
    raised = []
    for second in range(12):
        raised += watch.observe(second * 1000, [leaking, steady], [],
                                {1: 100 + 10 * second, 2: 100 + second % 2})
    assert [(e.pid, e.churn.pattern) for e in raised] == [(1, "fd_leak")]


def test_every_event_kind_has_a_place_in_the_event_log():
    from kmon.model import EventKind
    from kmon.widgets.event_log import KIND_STYLE

    assert set(KIND_STYLE) == set(EventKind)
