"""Asking a broker for the cluster's brokers with one Metadata request of kmon's own.

Used where a process's own Metadata responses have not been seen yet (a client
refreshes them every few minutes): one short plaintext connection to a broker
the process is already talking to, bounded in time and size.
"""

from __future__ import annotations

import socket

from kmon.sources import kafka_protocol as kp
from kmon.sources.sockets import Endpoint

MAX_RESPONSE = 1 << 20
CORRELATION_ID = 0x6B6D6F6E  # "kmon"


def ask_brokers(broker: Endpoint, timeout_s: float = 1.0) -> dict[int, tuple[str, int]] | None:
    """broker id -> (host, port) as ``broker`` answers; None when it does not (TLS, SASL,
    not a broker, too slow)."""
    try:
        with socket.create_connection((broker.ip, broker.port), timeout=timeout_s) as conn:
            conn.sendall(kp.metadata_request(CORRELATION_ID))
            head = _read(conn, 4)
            size = int.from_bytes(head, "big", signed=True)
            if not 4 <= size <= MAX_RESPONSE:
                return None
            answer = head + _read(conn, size)
    except OSError:
        return None
    if kp.response_correlation(answer) != CORRELATION_ID:
        return None
    return kp.metadata_brokers(answer, 1)


def _read(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise OSError("closed early")
        data += chunk
    return data
