"""kmon's own DescribeConfigs request and the reading of its answer, which a peer may forge.

The honest answer comes from a real broker in tests/test_cluster_learned.py; these are the
answers a real broker cannot be made to send: cut short, carrying an error, a limit that is
no number, from a listener that answers nothing whole; and how often kmon asks, counted at
fake brokers.
"""

from __future__ import annotations

import socket
import threading
import time

from kmon.devtools.hostile_broker import HostileBroker
from kmon.sources import kafka_protocol as kp
from kmon.sources.brokers.broker_query import CORRELATION_ID, ConfirmedBrokers, ask_idle_limit
from kmon.sources.brokers.dns import Resolver
from kmon.sources.kernel.sockets import Endpoint


def _string(text: str | None) -> bytes:
    if text is None:
        return (-1).to_bytes(2, "big", signed=True)
    return len(text.encode()).to_bytes(2, "big") + text.encode()


def answer(value: str | None, error: int = 0, entries: int = 1) -> bytes:
    """A DescribeConfigs v1 response for one broker, as its message spec lays it out."""
    config = (_string("connections.max.idle.ms") + _string(value) + b"\0" + b"\x05" + b"\0"
              + (0).to_bytes(4, "big"))
    body = ((0).to_bytes(4, "big") + (1).to_bytes(4, "big") + error.to_bytes(2, "big")
            + _string(None) + bytes([kp.BROKER_RESOURCE]) + _string("1")
            + entries.to_bytes(4, "big") + config * entries)
    message = CORRELATION_ID.to_bytes(4, "big") + body
    return len(message).to_bytes(4, "big") + message


def test_an_answer_gives_its_values_and_nothing_when_cut_or_refused():
    assert kp.config_values(answer("8000")) == {"connections.max.idle.ms": "8000"}
    assert kp.config_values(answer("8000")[:-7]) is None  # cut inside the entry
    assert kp.config_values(answer("8000", error=29)) is None  # not authorized
    many = kp.config_values(answer("8000", entries=10_000))  # only the first 64 read
    assert many == {"connections.max.idle.ms": "8000"}


def test_the_request_names_the_broker_and_the_one_entry_asked():
    request = kp.describe_configs_request(7, 3, ["connections.max.idle.ms"])
    header = kp.request_header(request)
    assert (header.api_key, header.api_version, header.correlation_id) == (32, 1, 7)
    assert request.endswith(_string("3") + (1).to_bytes(4, "big")
                            + _string("connections.max.idle.ms") + b"\0")
    assert int.from_bytes(request[:4], "big") == len(request) - 4


def serve_once(reply: bytes) -> Endpoint:
    """A listener that reads a request and sends ``reply``, then closes."""
    server = socket.create_server(("127.0.0.1", 0))

    def run() -> None:
        conn, _ = server.accept()
        with conn, server:
            conn.recv(4096)
            conn.sendall(reply)

    threading.Thread(target=run, daemon=True).start()
    return Endpoint("127.0.0.1", server.getsockname()[1])


def test_a_limit_that_is_no_number_or_no_whole_answer_is_none():
    assert ask_idle_limit(serve_once(answer("8000")), broker_id=1) == 8000
    assert ask_idle_limit(serve_once(answer("soon")), broker_id=1) is None
    assert ask_idle_limit(serve_once(answer("-5")), broker_id=1) is None
    assert ask_idle_limit(serve_once(answer(None)), broker_id=1) is None
    assert ask_idle_limit(serve_once(answer("8000")[:20]), broker_id=1, deadline_s=0.5) is None


def test_a_cluster_s_idle_limit_is_asked_once_of_a_confirmed_broker():
    """Two endpoints of one cluster (fake brokers on real sockets, each answering kmon's
    Metadata query with both; a real broker's requests cannot be counted from here): both
    are confirmed, and the cluster's idle limit is asked once, of one of them, after its
    confirmation; a third endpoint, never confirmed, is never asked it."""
    brokers = [HostileBroker("liar") for _ in range(2)]
    stranger = HostileBroker("liar")  # names only another endpoint: never confirmed
    cluster = {n + 1: ("127.0.0.1", b.port) for n, b in enumerate(brokers)}
    for broker in brokers:
        broker.lies.update(cluster)
    stranger.lies.update({9: ("127.0.0.1", 9)})
    endpoints = [Endpoint("127.0.0.1", b.port) for b in (*brokers, stranger)]
    confirmed = ConfirmedBrokers(Resolver())
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (
                len(confirmed.brokers) < 2 or confirmed.unanswered(endpoints)):
            confirmed.check(endpoints)
            time.sleep(0.02)
        for _ in range(20):  # more checks ask nothing more
            confirmed.check(endpoints)
            time.sleep(0.02)
    finally:
        for broker in (*brokers, stranger):
            broker.close()
    assert confirmed.brokers == {endpoints[0]: 1, endpoints[1]: 2}
    asked = [b.kmon_apis for b in (*brokers, stranger)]
    assert sorted(api for apis in asked for api in apis) == [3, 3, 3, 32], asked
    assert kp.DESCRIBE_CONFIGS not in asked[2], asked
