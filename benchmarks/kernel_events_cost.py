"""What the kernel's TCP events cost ``kmon attach`` (root), beside a process that opens and
closes connections fast, on a host carrying many unrelated connections.

A churning process (plain sockets, a connection opened, a byte sent and closed
``--rate`` times a second to a local listener standing in for a broker) is
attached to with two ``kmon attach --any-process --json`` side by side, over the
same seconds (a shared host's load falls on both alike): with the kernel events
(``on``) and with ``--no-kernel-events`` (``off``, the baseline), ``--repeat``
times, while other processes hold ``--host-connections`` unrelated loopback TCP
connections open. Prints kmon's CPU seconds for each, their ratio, the
connections the kernel counted in its last minute, and the kernel's lost-event
count (read from kmon's notice, which appears once the counter moves).

    sudo python -m benchmarks kernel_events_cost [--rate 200] [--seconds 20] [--repeat 3]
        [--host-connections 20000]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from contextlib import suppress

import psutil

from benchmarks.api import BenchmarkError, Result

CHURNER = """
import socket, sys, time
port, rate = int(sys.argv[1]), float(sys.argv[2])
print("READY", flush=True)
while True:
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"x")
    time.sleep(max(0.0, 1 / rate - (time.monotonic() - started)))
"""


LOAD_PER_PROCESS = 4000  # connections (two fds each) one load process holds
HOST_LOAD = """
import socket, sys
count, source = int(sys.argv[1]), sys.argv[2]
server = socket.create_server(("127.0.0.9", 0), backlog=4096)
held = []
for _ in range(count):  # from its own 127.0.1.x: the churner's ephemeral ports stay free
    sock = socket.socket()
    sock.bind((source, 0))
    sock.connect(server.getsockname())
    held += [sock, server.accept()[0]]
print("READY", flush=True)
sys.stdin.read()
"""


def listener() -> int:
    """A local listener that accepts every connection, reads it and closes it a second
    later, after the client closed its end (the stand-in broker: not one that refuses or
    resets connections)."""
    server = socket.create_server(("127.0.0.1", 0), backlog=1024)

    def serve() -> None:
        held: deque[tuple[float, socket.socket]] = deque()
        while True:
            conn, _ = server.accept()
            conn.setblocking(False)
            held.append((time.monotonic(), conn))
            while held and time.monotonic() - held[0][0] > 1.0:
                old = held.popleft()[1]
                with suppress(OSError):  # read what it was sent, as a broker does (an
                    old.recv(64)  # unread byte would make the close a RST)
                old.close()

    threading.Thread(target=serve, daemon=True).start()
    return server.getsockname()[1]


def attach_cpu(pid: int, seconds: float) -> tuple[float, float, list[dict]]:
    """The CPU seconds of two ``kmon attach`` of ``pid`` run side by side over the same
    ``seconds`` after their first snapshots, kernel events off and on (the host's load
    falls on both alike), and the records of the one with them."""
    runs = [subprocess.Popen([sys.executable, "-m", "kmon", "attach", str(pid), "--json",
                              "--any-process", "--interval", "1s", *extra],
                             stdout=subprocess.PIPE, text=True)
            for extra in (("--no-kernel-events",), ())]
    records: list[list[dict]] = [[], []]

    def read(index: int) -> None:
        for line in runs[index].stdout:
            records[index].append(json.loads(line))

    for index, run in enumerate(runs):
        records[index].append(json.loads(run.stdout.readline()))
        threading.Thread(target=read, args=(index,), daemon=True).start()
    procs = [psutil.Process(run.pid) for run in runs]
    before = [sum(proc.cpu_times()[:2]) for proc in procs]
    time.sleep(seconds)
    off, on = (sum(proc.cpu_times()[:2]) - start for proc, start in zip(procs, before,
                                                                          strict=True))
    for run in runs:
        run.terminate()
        run.wait(10)
    return off, on, records[1]


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rate", type=float, default=200.0, help="connections a second")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--repeat", type=int, default=3,
                        help="off/on pairs, each pair run side by side (their sums compared)")
    parser.add_argument("--host-connections", type=int, default=20_000,
                        help="unrelated loopback connections held open meanwhile")


def run(args: argparse.Namespace) -> Result:
    if os.geteuid() != 0:
        raise BenchmarkError("the kernel events need root: run this as root")
    port = listener()
    loads = [subprocess.Popen([sys.executable, "-c", HOST_LOAD,
                               str(min(LOAD_PER_PROCESS, args.host_connections - start)),
                               f"127.0.1.{1 + start // LOAD_PER_PROCESS}"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for start in range(0, args.host_connections, LOAD_PER_PROCESS)]
    churner = subprocess.Popen([sys.executable, "-c", CHURNER, str(port), str(args.rate)],
                               stdout=subprocess.PIPE, text=True)
    try:
        for load in loads:
            if load.stdout.readline().strip() != "READY":
                raise BenchmarkError("the unrelated connections could not be opened")
        churner.stdout.readline()
        pairs = []
        for _ in range(args.repeat):
            off, on, records = attach_cpu(churner.pid, args.seconds)
            pairs.append((off, on))
    finally:
        for child in (churner, *loads):
            child.terminate()
    events = [e for r in records for e in r["events"]]
    churn = [e["detail"] for e in events if e["kind"] == "churn"]
    notices = [n for r in records for p in r["processes"] for n in p["notices"]
               if "dropped" in n]
    lost = max((int(m[1]) for n in notices if (m := re.search(r"dropped (\d+)", n))),
               default=0)
    counted = records[-1]["processes"][0]["opened_1m"]
    print(f"churning process: {args.rate:.0f} connections/s for {args.seconds:.0f} s each run, "
          f"beside {args.host_connections} unrelated loopback connections")
    for off, on in pairs:
        print(f"kmon attach CPU, kernel events off {off:.2f} s, on {on:.2f} s: "
              f"{on / max(off, 1e-3):.2f}x")
    off, on = sum(p[0] for p in pairs), sum(p[1] for p in pairs)
    print(f"in all: off {off:.2f} s, on {on:.2f} s; ratio on/off: {on / max(off, 1e-3):.2f}x")
    print(f"connections the kernel counted in the last minute: {counted} "
          f"(opened: about {args.rate * min(args.seconds, 60):.0f})")
    print(f"churn events with the kernel events: {churn[:2]}")
    print(f"events the kernel lost: {lost}")
    result = Result()
    result.figure("kmon CPU, kernel events off", off, "s")
    result.figure("kmon CPU, kernel events on", on, "s")
    result.figure("events lost", lost)
    result.ratio("on / off", "kmon CPU, kernel events on", "kmon CPU, kernel events off")
    return result
