"""What the kernel's TCP events cost ``kmon attach`` (root), beside a process that opens and
closes connections fast.

A churning process (plain sockets, a connection opened, a byte sent and closed
``--rate`` times a second to a local listener standing in for a broker) is
attached to with ``kmon attach --any-process --json`` twice in one run: with the
kernel events (``on``) and with ``--no-kernel-events`` (``off``, the baseline).
Prints kmon's CPU seconds for each, their ratio, the connections the kernel events
counted against those opened, and whether the kernel reported lost events.

    sudo python benchmarks/kernel_events_cost.py [--rate 200] [--seconds 20]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections import deque

import psutil

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


def listener() -> int:
    """A local listener that accepts every connection and closes it a second later, after
    the client closed its end (the stand-in broker: not one that refuses connections)."""
    server = socket.create_server(("127.0.0.1", 0), backlog=1024)

    def serve() -> None:
        held: deque[tuple[float, socket.socket]] = deque()
        while True:
            conn, _ = server.accept()
            held.append((time.monotonic(), conn))
            while held and time.monotonic() - held[0][0] > 1.0:
                held.popleft()[1].close()

    threading.Thread(target=serve, daemon=True).start()
    return server.getsockname()[1]


def attach_cpu(pid: int, seconds: float, *extra: str) -> tuple[float, list[dict]]:
    """kmon attach's CPU seconds over ``seconds`` after its first snapshot, and its records."""
    kmon = subprocess.Popen([sys.executable, "-m", "kmon", "attach", str(pid), "--json",
                             "--any-process", "--interval", "1s", *extra],
                            stdout=subprocess.PIPE, text=True)
    records = [json.loads(kmon.stdout.readline())]
    proc = psutil.Process(kmon.pid)
    before = sum(proc.cpu_times()[:2])
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        records.append(json.loads(kmon.stdout.readline()))
    used = sum(proc.cpu_times()[:2]) - before
    kmon.terminate()
    kmon.wait(10)
    return used, records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200.0, help="connections a second")
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("the kernel events need root: run this as root")
    port = listener()
    churner = subprocess.Popen([sys.executable, "-c", CHURNER, str(port), str(args.rate)],
                               stdout=subprocess.PIPE, text=True)
    try:
        churner.stdout.readline()
        off, _ = attach_cpu(churner.pid, args.seconds, "--no-kernel-events")
        on, records = attach_cpu(churner.pid, args.seconds)
    finally:
        churner.terminate()
    events = [e for r in records for e in r["events"]]
    churn = [e["detail"] for e in events if e["kind"] == "churn"]
    lost = [n for r in records for p in r["processes"] for n in p["notices"] if "dropped" in n]
    print(f"churning process: {args.rate:.0f} connections/s for {args.seconds:.0f} s each run")
    print(f"kmon attach CPU, kernel events off: {off:.2f} s")
    print(f"kmon attach CPU, kernel events on:  {on:.2f} s")
    print(f"ratio on/off: {on / max(off, 1e-3):.2f}x")
    print(f"churn events with the kernel events: {churn[:2]}")
    print(f"lost-event notices: {lost[:1] or 'none'}")


if __name__ == "__main__":
    main()
