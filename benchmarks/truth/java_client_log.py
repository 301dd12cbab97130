"""The Java client's own view: its ``org.apache.kafka.clients.NetworkClient`` DEBUG log, as
slf4j-simple writes it with ISO times (``clients.java``). Before each ``connect()`` it logs
``Initiating connection to node HOST:PORT (id: N rack: …) using address /IP`` (and, once
connected, ``Completed connection to node N``), N its own name of the node: ``-1, -2, …`` a
bootstrap address, ``2147483647 - B`` (3.x) or ``+B`` (4.x) the group coordinator on broker
B, else the broker id. The line has no local port: a socket is the next SYN to that port,
from the process (/proc), after the line.

kmon reads this log only when ``kmon attach --client-log FILE`` names it; the harness never
does, and this module shares no code with kmon's reader (kmon/sources/jvm/java_log.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from benchmarks.truth.capture import Flow

# 2026-11-26T17:40:01.123+00:00 [consumer_background_thread] DEBUG
#   org.apache.kafka.clients.NetworkClient - [Consumer clientId=…, groupId=…] Initiating
#   connection to node 127.0.0.1:40099 (id: -1 rack: null isFenced: false) using address
#   /127.0.0.1
INITIATING = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(?:Z|[+-]\d\d:\d\d)) .*"
                        r"Initiating connection to node \S+:(\d+) \(id: ([+-]?\d+) ")
# ... "Completed connection to node +2. Fetching API versions." once the connect succeeded
COMPLETED = re.compile(r"Completed connection to node ([+-]?\d+)\.")
MAX_INT = 2147483647
LATE_MS = 1000  # a SYN this long after the line is another connect()'s


@dataclass(frozen=True)
class JavaConnect:
    """One ``Initiating connection`` line: its time (epoch ms), the port, the node id as
    printed (``-1``, ``+2``, ``2147483646``, ``1``)."""

    ts_ms: float
    port: int
    node: str

    @property
    def role(self) -> str:
        """bootstrap, coordinator:B or broker:B, from the node id alone."""
        number = int(self.node)
        if self.node.startswith("+"):
            return f"coordinator:{number}"
        if number < 0:
            return "bootstrap"
        if number > MAX_INT - (1 << 20):
            return f"coordinator:{MAX_INT - number}"
        return f"broker:{number}"


def read(path: Path) -> list[JavaConnect]:
    """Every connection the log says the client initiated and then completed, in the log's
    order: a connect the broker refused ("could not be established", a node restarting)
    made a SYN no socket of the process kept, and would take the next one to its port."""
    found, pending = [], {}
    for line in path.read_text(errors="replace").splitlines():
        if match := INITIATING.match(line):
            when = datetime.fromisoformat(match[1].replace("Z", "+00:00"))
            pending[match[3]] = JavaConnect(when.timestamp() * 1000, int(match[2]), match[3])
        elif (done := COMPLETED.search(line)) and done[1] in pending:
            found.append(pending.pop(done[1]))
    return found


def sockets(connects: list[JavaConnect], flows: dict[tuple[int, int], Flow],
            owned: set[tuple[int, int]]) -> dict[tuple[int, int, float], JavaConnect]:
    """{(local port, server port, SYN time): the line that made it}: each line takes the
    first SYN to its port from a socket of the process (``owned``: seen in its /proc) within
    ``LATE_MS`` after it that no earlier line took (the line's time is cut to the ms)."""
    attempts = sorted((f for latest in flows.values() for f in latest.attempts()
                       if (f.client_port, f.server_port) in owned), key=lambda f: f.syn_ms)
    found: dict[tuple[int, int, float], JavaConnect] = {}
    for connect in sorted(connects, key=lambda c: c.ts_ms):
        for flow in attempts:
            key = (flow.client_port, flow.server_port, flow.syn_ms)
            if (flow.server_port == connect.port and key not in found
                    and connect.ts_ms - 1 <= flow.syn_ms <= connect.ts_ms + LATE_MS):
                found[key] = connect
                break
    return found
