"""Asking a broker for the cluster's brokers with one Metadata request of kmon's own.

Used where a process's own Metadata responses have not been seen yet (a client
refreshes them every few minutes): one short plaintext connection to a broker
the process is already talking to. The peer is not trusted: the whole exchange
has one deadline (``DEADLINE_S``, however slowly the peer drips its answer) and
an answer over ``MAX_RESPONSE`` bytes is refused. ``BrokerQuery`` runs it on a
thread of its own, so the poll that starts it, and every poll after, never waits.
"""

from __future__ import annotations

import socket
import threading
import time

from kmon.sources import kafka_protocol as kp
from kmon.sources.sockets import Endpoint

DEADLINE_S = 2.0  # connect, ask and read the whole answer in this long, or give up
MAX_RESPONSE = 64 * 1024  # a Metadata answer without topics: some 40 bytes a broker
CORRELATION_ID = 0x6B6D6F6E  # "kmon"


def ask_brokers(broker: Endpoint, deadline_s: float = DEADLINE_S
                ) -> dict[int, tuple[str, int]] | None:
    """broker id -> (host, port) as ``broker`` answers; None when it does not (TLS, SASL,
    not a broker, an answer too large, or not whole within ``deadline_s``). Blocks up to
    ``deadline_s``: see ``BrokerQuery`` for the poll's use."""
    until = time.monotonic() + deadline_s
    try:
        with socket.create_connection((broker.ip, broker.port), timeout=deadline_s) as conn:
            conn.sendall(kp.metadata_request(CORRELATION_ID))
            head = _read(conn, 4, until)
            size = int.from_bytes(head, "big", signed=True)
            if not 4 <= size <= MAX_RESPONSE:
                return None
            answer = head + _read(conn, size, until)
    except OSError:  # socket.timeout included
        return None
    if kp.response_correlation(answer) != CORRELATION_ID:
        return None
    return kp.metadata_brokers(answer, 1)


def _read(conn: socket.socket, n: int, until: float) -> bytes:
    """Exactly ``n`` bytes, all of them before ``until`` (monotonic), else OSError."""
    data = bytearray()
    while len(data) < n:
        left = until - time.monotonic()
        if left <= 0:
            raise TimeoutError("the answer did not arrive in time")
        conn.settimeout(left)
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise OSError("closed early")
        data += chunk
    return bytes(data)


class BrokerQuery:
    """``ask_brokers(broker)`` on a daemon thread of its own, started at once; ``done`` once
    it has returned, ``answer`` its result (None before then)."""

    def __init__(self, broker: Endpoint, deadline_s: float = DEADLINE_S) -> None:
        self.broker = broker
        self.answer: dict[int, tuple[str, int]] | None = None
        self._finished = threading.Event()
        threading.Thread(target=self._run, args=(deadline_s,), daemon=True,
                         name=f"kmon metadata query {broker.text}").start()

    @property
    def done(self) -> bool:
        return self._finished.is_set()

    def _run(self, deadline_s: float) -> None:
        try:
            self.answer = ask_brokers(self.broker, deadline_s)
        finally:
            self._finished.set()
