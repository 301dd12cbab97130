"""kmon's count of the connections opened to the brokers against the brokers' own: over a
window of a scenario, the increase of ``kmon serve``'s ``kmon_connections_opened_total``
(kernel events, summed over the host's processes) and of the brokers'
``socket-server-metrics`` ``connection-creation-total`` on their client listeners (JMX,
read by ``BrokerJmx.java`` through the JDK's attach API), with the packet capture's
accepted SYNs of the window beside them."""

from __future__ import annotations

import functools
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.truth.clients import wait_logged
from benchmarks.truth.kmon_views import LABEL, command_of, last_poll_s

if TYPE_CHECKING:
    from benchmarks.truth.capture import Flow
    from benchmarks.truth.scenarios import Run

LISTENERS = ("PLAINTEXT", "SASL_PLAINTEXT", "SSL")
BURST = 20  # clients made, each for one message, in the measured window
TOLERANCE = 0.02  # issue 33: kmon's opens equal the brokers' within ±2%


@functools.cache
def reader_classes() -> str:
    """BrokerJmx compiled, once a run."""
    into = Path(tempfile.mkdtemp(prefix="kmon-truth-jmx-"))
    subprocess.run(["javac", "-nowarn", "-d", str(into),
                    str(Path(__file__).with_name("BrokerJmx.java"))],
                   check=True, capture_output=True, timeout=120)
    return str(into)


def broker_creations(run: Run) -> int:
    """The connections every node has accepted on its client listeners so far."""
    total = 0
    for node in run.cluster.nodes:
        lines = subprocess.run(["java", "-cp", reader_classes(), "BrokerJmx", str(node.pid),
                                *LISTENERS], capture_output=True, text=True, check=True,
                               timeout=60).stdout.split()
        total += sum(int(value) for value in lines[1::2])
    return total


def kmon_opened(run: Run, pid: int) -> int:
    """``kmon_connections_opened_total`` of ``pid``'s command, from a poll made after this
    call (kmon serve watches every client of the host: other processes are not the
    scenario's)."""
    process, asked, deadline = command_of(pid), time.time(), time.monotonic() + 30
    while time.monotonic() < deadline:
        text = run.serve.scrape()
        if last_poll_s(text) >= asked:
            return round(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                             if line.startswith("kmon_connections_opened_total{")
                             and dict(LABEL.findall(line.split("}", 1)[0])).get("process")
                             == process))
        time.sleep(0.3)
    raise RuntimeError("kmon serve made no poll in 30 s")


def measure(run: Run) -> None:
    """The act: both counts read while the client is quiet, ``BURST`` clients made, both read
    again once it has logged the last one done and its sockets are closed."""
    client = run.clients[0]
    run.serve.roles(client.pid, 5)  # its address known (the process has no socket yet)
    began_ms = time.time() * 1000
    kmon_before, brokers_before = kmon_opened(run, client.pid), broker_creations(run)
    client.proc.stdin.write(f"burst {BURST}\n")
    client.proc.stdin.flush()
    wait_logged(client, f"DONE {BURST}", 120)
    time.sleep(3)
    brokers_after, kmon_after = broker_creations(run), kmon_opened(run, client.pid)
    run.counts.update(kmon=kmon_after - kmon_before, brokers=brokers_after - brokers_before,
                      window_ms=(began_ms, time.time() * 1000))


def accepted(flows: dict[tuple[int, int], Flow], window_ms: tuple[float, float]) -> int:
    """Connections the capture saw accepted (SYN-ACK) with their SYN inside the window."""
    return sum(f.accepted and window_ms[0] <= f.syn_ms <= window_ms[1] for f in flows.values())


def verdict(counts: dict) -> str:
    """The comparison in words, for the report."""
    kmon, brokers = counts["kmon"], counts["brokers"]
    off = abs(kmon - brokers) / brokers if brokers else float(kmon != 0)
    return (f"opens over the window: kmon {kmon}, the brokers' connection-creation-total "
            f"{brokers}, the packets {counts.get('packets', '?')}: "
            f"{100 * off:.1f}% apart ({'within' if off <= TOLERANCE else 'outside'} ±2%)")
