"""Fake, hostile Kafka "brokers" and the plain client that talks to them, for kmon's tests
and benchmarks of what a peer can make kmon spend.

These are fakes on purpose: a real broker cannot be made to drip its answers or
to name a new coordinator in every answer. ``HostileBroker(mode)`` is a socket
server on 127.0.0.1 run by threads of the calling process:

* ``drip``: to every connection, a 1 MiB response size and then one byte every 0.9 s;
* ``coordinators``: answers every FindCoordinator request (v0) naming a coordinator
  address never named before (``10.x.y.z``), other requests not at all, and
  closes on kmon's own query;
* ``quiet``: the same, every answer naming the same coordinator;
* ``liar``: answers every Metadata request, kmon's own too, with a broker list of its
  choosing (``lies``: broker id -> (host, port); ``crowd`` makes a long one).

Each notes whether kmon's own request (correlation id "kmon") reached it, and the API of
each (``kmon_apis``).
``python -m kmon.devtools.hostile_broker PORT API`` is the client: it connects to
127.0.0.1:PORT, prints ``READY``, then sends requests of ``API`` (``metadata`` or
``find_coordinator``) one after another, reading each answer (``find_coordinator``)
or pausing 0.3 s (``metadata``). ``python -m kmon.devtools.hostile_broker attack
PORT`` is an attacker process (see ``attack``).
"""

from __future__ import annotations

import socket
import sys
import threading
import time

from kmon.sources import kafka_protocol as kp

KMON_CORRELATION = 0x6B6D6F6E  # kmon.sources.brokers.broker_query's own requests


def find_coordinator_request(correlation: int, group: str = "flood") -> bytes:
    """A FindCoordinator v0 request for ``group``."""
    key = group.encode()
    body = (kp.FIND_COORDINATOR.to_bytes(2, "big") + bytes(2) + correlation.to_bytes(4, "big")
            + (6).to_bytes(2, "big") + b"talker" + len(key).to_bytes(2, "big") + key)
    return len(body).to_bytes(4, "big") + body


def coordinator_response(correlation: int, host: str, node_id: int, port: int = 9092) -> bytes:
    """A FindCoordinator v0 response naming ``host:port`` as broker ``node_id``."""
    name = host.encode()
    body = (correlation.to_bytes(4, "big") + bytes(2) + node_id.to_bytes(4, "big")
            + len(name).to_bytes(2, "big") + name + port.to_bytes(4, "big"))
    return len(body).to_bytes(4, "big") + body


def metadata_response(correlation: int, brokers: dict[int, tuple[str, int]]) -> bytes:
    """A Metadata v1 response listing ``brokers`` (no topics)."""
    parts = [correlation.to_bytes(4, "big"), len(brokers).to_bytes(4, "big")]
    for node_id, (host, port) in brokers.items():
        name = host.encode()
        parts += (node_id.to_bytes(4, "big"), len(name).to_bytes(2, "big"), name,
                  port.to_bytes(4, "big"), (-1).to_bytes(2, "big", signed=True))
    parts.append((-1).to_bytes(4, "big", signed=True) + bytes(4))  # controller, topics
    body = b"".join(parts)
    return len(body).to_bytes(4, "big") + body


def crowd(port: int, count: int) -> dict[int, tuple[str, int]]:
    """A broker list of ``count`` brokers on ``port``, at addresses (10.x.y.z) no broker
    serves: what a liar answers to make kmon look at every entry."""
    return {n: (f"10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}", port) for n in range(count)}


def _read_frame(conn: socket.socket) -> bytes | None:
    """One whole request frame, or None once the peer closed."""
    head = _read_exactly(conn, 4)
    if head is None:
        return None
    size = int.from_bytes(head, "big")
    if not 0 < size < 1 << 16:
        return None
    return _read_exactly(conn, size)


def _read_exactly(conn: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


class HostileBroker:
    """A fake broker on 127.0.0.1 (see the module's docstring); ``close()`` stops it."""

    def __init__(self, mode: str, lies: dict[int, tuple[str, int]] | None = None) -> None:
        self.mode, self.lies = mode, lies or {}
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.asked_by_kmon = threading.Event()
        self.kmon_apis: list[int] = []  # the API key of each of kmon's own requests
        self.answers = 0  # coordinator answers sent
        self.stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                if self.mode == "drip":
                    self._note(conn.recv(64))
                    conn.sendall((1 << 20).to_bytes(4, "big"))
                    while not self.stopped.wait(0.9):
                        conn.sendall(b"\0")
                    return
                while not self.stopped.is_set():
                    frame = _read_frame(conn)
                    if frame is None:
                        return
                    correlation = int.from_bytes(frame[4:8], "big")
                    if self.mode == "liar":
                        self._note(len(frame).to_bytes(4, "big") + frame)
                        conn.sendall(metadata_response(correlation, self.lies))
                        continue
                    if self._note(len(frame).to_bytes(4, "big") + frame):
                        return  # kmon's own query: refused
                    if int.from_bytes(frame[:2], "big") != kp.FIND_COORDINATOR:
                        continue
                    self.answers += 1
                    n = self.answers if self.mode == "coordinators" else 0
                    host = f"10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}"
                    conn.sendall(coordinator_response(correlation, host, self.answers % 1000))
            except OSError:
                return

    def _note(self, request: bytes) -> bool:
        """True (and noted) for kmon's own query."""
        header = kp.request_header(request)
        if header is not None and header.correlation_id == KMON_CORRELATION:
            self.kmon_apis.append(header.api_key)
            self.asked_by_kmon.set()
            return True
        return False

    def close(self) -> None:
        self.stopped.set()
        self.server.close()


def talk(port: int, api: str) -> None:
    """The client of the module's docstring (runs until killed)."""
    conn = socket.create_connection(("127.0.0.1", port))
    print("READY", flush=True)
    for correlation in range(1 << 31):
        if api == "metadata":
            conn.sendall(kp.metadata_request(correlation, "talker"))
            time.sleep(0.3)
        else:
            conn.sendall(find_coordinator_request(correlation))
            if not conn.recv(1 << 16):
                return


def attack(port: int) -> None:
    """The attacker of kmon's tests: a process with the Kafka client library loaded (so kmon
    takes it for a Kafka client) asking a ``liar`` on ``port`` for Metadata every 0.3 s."""
    import confluent_kafka  # noqa: F401  (mapped: the host view finds this process)

    talk(port, "metadata")


if __name__ == "__main__":
    if sys.argv[1] == "attack":
        attack(int(sys.argv[2]))
    else:
        talk(int(sys.argv[1]), sys.argv[2])
