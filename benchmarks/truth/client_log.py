"""The client's own view: librdkafka's debug log (``debug=broker``, written to stderr with
epoch-millisecond times), as kcat and confluent-kafka print it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# %7|1795620298.569|CONNECT|name#consumer-2| [thrd:GroupCoordinator]: GroupCoordinator/1:
#   Connecting to ipv4#127.0.0.1:54403 (plaintext) with socket 8
# (a handle of a secured listener is named sasl_plaintext://127.0.0.1:PORT/N)
LINE = re.compile(r"^%\d\|(\d+)\.(\d+)\|(\w+)\|([^|]*)\| \[thrd:[^\]]*\]: (\S+): (.*)$")
CONNECTING = re.compile(r"Connecting to ipv[46]#[^:]+:(\d+) \(\w+\) with socket (\d+)")
REFUSED = re.compile(r"Connect to ipv[46]#[^:]+:(\d+) failed: Connection refused")
RENAMED = re.compile(r"Name changed from (\S+) to (\S+)")
IDLE = "max idle time exceeded"
# a refused connect() is logged twice, as a debug line and an error line, a millisecond apart
# at most: one refusal
SAME_FAILURE_MS = 5


@dataclass(frozen=True)
class Connect:
    """A broker handle's ``connect()``: its handle name (``host:port/bootstrap``,
    ``host:port/3``, ``GroupCoordinator/3``), the port and the socket's fd."""

    ts_ms: int
    instance: str
    handle: str
    port: int
    fd: int


@dataclass
class ClientLog:
    """What one process's librdkafka log says about its connections."""

    connects: list[Connect]
    refused: list[tuple[int, int]]  # (ts_ms, port) of each refused connect(), once
    idle_closes: list[tuple[int, str, str]]  # (ts_ms, instance, handle) of each idle reap
    renames: list[tuple[int, str, str, str]]  # (ts_ms, instance, old, new): a handle renamed

    def name_of(self, connect: Connect, until_ms: float | None) -> str:
        """The handle's name at ``until_ms`` (librdkafka renames a bootstrap handle once
        it learns its node id: ``/bootstrap`` becomes ``/1``, with the same socket)."""
        name = connect.handle
        for ts_ms, instance, old, new in self.renames:
            if (instance == connect.instance and old == name and ts_ms >= connect.ts_ms
                    and (until_ms is None or ts_ms <= until_ms)):
                name = new
        return name

    @classmethod
    def read(cls, path: Path) -> ClientLog:
        connects, refused, idle, renames = [], [], [], []
        failed: dict[tuple[str, str, int], int] = {}  # the last refusal of a handle's port
        for line in path.read_text(errors="replace").splitlines():
            match = LINE.match(line)
            if not match:
                continue
            sec, ms, _, instance, handle, text = match.groups()
            ts_ms = int(sec) * 1000 + int(ms)
            if found := CONNECTING.search(text):
                connects.append(Connect(ts_ms, instance, handle, int(found[1]), int(found[2])))
            elif found := REFUSED.search(text):
                port = int(found[1])
                last = failed.get((instance, handle, port))
                failed[(instance, handle, port)] = ts_ms
                if last is None or ts_ms - last > SAME_FAILURE_MS:  # (not its error line)
                    refused.append((ts_ms, port))
            elif found := RENAMED.search(text):
                renames.append((ts_ms, instance, found[1], found[2]))
            elif IDLE in text:
                idle.append((ts_ms, instance, handle))
        return cls(connects, refused, idle, renames)

    def handle_of(self, port: int, syn_ms: float, fd: int | None) -> Connect | None:
        """The handle whose connect() made the SYN at ``syn_ms`` to ``port``: the last one
        logged before it with that socket fd when the fd is known, else the last one
        logged within 300 ms before it (None when two handles connected within 20 ms)."""
        before = [c for c in self.connects
                  if c.port == port and syn_ms - 300 <= c.ts_ms <= syn_ms + 5]
        if fd is not None:
            before = [c for c in self.connects if c.port == port and c.fd == fd
                      and c.ts_ms <= syn_ms + 5] or before
            return before[-1] if before else None
        if not before:
            return None
        if len(before) > 1 and before[-1].ts_ms - before[-2].ts_ms < 20 and (
                before[-1].handle != before[-2].handle):
            return None
        return before[-1]

    def reaped(self, connect: Connect, close_ms: float) -> bool:
        """The client logged its own idle reap of the socket ``connect`` made, which it closed
        at ``close_ms`` (its first FIN). librdkafka closes the socket first and logs why after
        (rd_kafka_broker_fail), so the line is stamped at or after the FIN (its time cut to
        the millisecond: from ``close_ms`` - 1 on), however long the thread waited for a CPU
        in between, and before the handle's next ``connect()``: until then the handle held
        no other socket to reap."""
        name = self.name_of(connect, close_ms)
        after = [c.ts_ms for c in self.connects
                 if c.instance == connect.instance and c.handle == name and c.ts_ms > close_ms]
        until = min(after, default=float("inf"))
        return any(i == connect.instance and h == name and close_ms - 1 <= t <= until
                   for t, i, h in self.idle_closes)


def role_of(handle: str, port: int, node_of_port: dict[int, int]) -> str:
    """The role a handle's name tells, with its node: bootstrap, broker:N, coordinator:N."""
    name = handle.rsplit("/", 1)
    if handle.startswith(("GroupCoordinator", "TxnCoordinator")):
        return f"coordinator:{node_of_port.get(port, '?')}"
    if len(name) == 2 and name[1] == "bootstrap":
        return "bootstrap"
    if len(name) == 2 and name[1].lstrip("-").isdigit():
        return "bootstrap" if int(name[1]) < 0 else f"broker:{name[1]}"
    return "unknown"
