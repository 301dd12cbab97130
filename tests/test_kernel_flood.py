"""The kernel's TCP events under a local user's connect flood (root): the rings of the ports
kmon follows take nothing else, so a flood elsewhere costs a watched process none of its
closes, and events a full ring dropped are counted where ``kmon serve`` shows them."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time

import pytest
from helpers import FLOODER, Child, free_port, get, python_as, start_serve, wait_for

from kmon.engine.kernel_watch import KernelWatch
from kmon.model import ProcessView
from kmon.sources.kernel.kernel_events import RING_PAGES, KernelEvents

pytestmark = [pytest.mark.integration,
              pytest.mark.root(reason="the kernel's TCP events need root")]

VICTIM = """
import socket, sys, time
port, count = int(sys.argv[1]), int(sys.argv[2])
print("READY", flush=True)
sys.stdin.readline()
for _ in range(count):
    with socket.create_connection(("127.0.0.1", port)):
        pass
    time.sleep(0.01)
print("DONE", count, flush=True)
"""


class Listener:
    """A real listening port on loopback that accepts and closes every connection."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0), backlog=4096)
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            conn.close()

    def close(self) -> None:
        self.server.close()


def test_a_connect_flood_to_another_port_costs_a_watched_process_none_of_its_closes(
        throwaway_user):
    """Two flooders of a throwaway user connect to a closed port of their own for 10 s
    (hundreds of thousands of connects, each two records past the filter before the fix);
    meanwhile a watched process makes 600 connections to a port kmon follows and closes
    them: kmon's kernel watch tells every one of them close (before the fix, about a
    quarter were lost)."""
    listener = Listener()
    watch = KernelWatch(KernelEvents([listener.port]), {listener.port})
    prefix, env = python_as(throwaway_user.pw_name)
    flooders = [Child([*prefix, "-c", FLOODER, "10"], env=env) for _ in range(2)]
    victim = Child([sys.executable, "-c", VICTIM, str(listener.port), "600"])
    closes = 0
    try:
        for child in (*flooders, victim):
            child.wait_line("READY")
        victim.proc.stdin.write("go\n")
        victim.proc.stdin.flush()
        views = [ProcessView(victim.pid, "victim", "victim")]
        deadline = time.monotonic() + 60
        while victim.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(1)  # kmon's default interval
            _, closed, _ = watch.poll(views)
            closes += sum(1 for life in closed if life.pid == victim.pid)
        made = int(victim.wait_line("DONE").split()[1])
        _, closed, _ = watch.poll(views)
        closes += sum(1 for life in closed if life.pid == victim.pid)
        flooded = [int(child.wait_line("DONE", timeout=30).split()[1]) for child in flooders]
    finally:
        watch.close()
        listener.close()
        for child in (*flooders, victim):
            child.stop()
    assert sum(flooded) > 50_000, flooded  # a flood, however fast this machine is
    assert closes == made == 600, (closes, made, watch.lost, watch.source.lost_connects)
    assert watch.lost == 0  # the flood filled only the rings of other ports' connects


def test_a_ring_replaced_by_a_new_filter_still_gives_its_count_of_lost_records():
    """2,000 connections (three records each: about 6,000) into a 4 KiB ring no one reads,
    then a new port to follow: the kernel writes the old ring's count at its next record,
    which kmon still reads once (before: the ring was closed and the loss never known); no
    record is counted twice. The test and its listener run on one CPU: the kernel writes a
    ring's count only at that CPU's next record, so the closing connection must be made
    where the flood was."""
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})  # this thread, and the listener's it starts
    listener = Listener()
    source = KernelEvents([listener.port], {**RING_PAGES, "inet_sock_set_state": 1})
    try:
        for _ in range(2000):
            socket.create_connection(("127.0.0.1", listener.port)).close()
        time.sleep(0.2)
        source.watch_ports([listener.port, free_port()])
        source.read()
        socket.create_connection(("127.0.0.1", listener.port)).close()
        time.sleep(0.2)
        source.read()
    finally:
        source.close()
        listener.close()
        os.sched_setaffinity(0, cpus)
    assert 0 < source.lost <= 6_003, source.lost


BURSTER = """
import os, socket, sys, time
import confluent_kafka  # noqa: F401  (mapped: kmon's host view watches this process)
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # the flood and the records after it
port = int(sys.argv[1])
held = socket.create_connection(("127.0.0.1", port))  # so kmon follows the port
print("READY", flush=True)
sys.stdin.readline()
for _ in range(60_000):
    socket.create_connection(("127.0.0.1", port)).close()
print("DONE", flush=True)
while True:  # a ring writes its count of lost records at its next record after a read
    socket.create_connection(("127.0.0.1", port)).close()
    time.sleep(0.2)
"""


def lost_total(address: str) -> float | None:
    """kmon_kernel_events_lost_total as /metrics shows it."""
    status, _, text = get(f"http://{address}/metrics")
    assert status == 200
    return next((float(line.split()[1]) for line in text.splitlines()
                 if line.startswith("kmon_kernel_events_lost_total ")), None)


def test_events_a_full_ring_dropped_are_counted_in_kmon_serve_s_metrics(tmp_path):
    """A watched process connects 60,000 times to a port kmon follows (three records each),
    over one or two 10 s poll intervals, far past the 10,000 or so records the kernel's
    1 MiB rings a CPU hold: kmon serve's kmon_kernel_events_lost_total goes from 0 to the
    kernel's count. The process runs on one CPU: the kernel writes a ring's count only at
    that CPU's next record, so the connects after the flood must be made where it was."""
    listener = Listener()
    script = tmp_path / "flood_burster.py"  # its name is its process label on /metrics
    script.write_text(BURSTER)
    burster = Child([sys.executable, str(script), str(listener.port)])
    burster.wait_line("READY")
    serve, address = start_serve("--interval", "10s")
    try:
        assert lost_total(address) == 0
        wait_for(lambda: 'process="flood_burster.py"' in get(f"http://{address}/metrics")[2],
                 "the bursting process watched (its port followed)", 60)
        burster.proc.stdin.write("go\n")
        burster.proc.stdin.flush()
        burster.wait_line("DONE", timeout=120)
        lost = wait_for(lambda: lost_total(address), "the lost events in /metrics", 90,
                        every=1)
    finally:
        burster.stop()
        serve.stop()
        listener.close()
    assert lost > 0
